"""Generated from conformance/cases/retries/retries-in-defaults.yaml by conformance/airflow_dags.py; do not edit.

retries 1 in the DAG's defaults (Airflow's default_args): a failing task is tried twice, one that succeeds on try 2 succeeds, one that sets retries 0 is tried once, one that sets retries 2 three times.
"""

import datetime

import airflow
import pendulum

if airflow.__version__.startswith("2."):
    from airflow import DAG
    from airflow.operators.bash import BashOperator
else:
    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.sdk import DAG

SLUICE_ENV = {
    'SLUICE_DAG': '{{ dag.dag_id }}',
    'SLUICE_TASK': '{{ task.task_id }}',
    'SLUICE_RUN_ID': '{{ run_id }}',
    'SLUICE_LOGICAL_DATE': '{{ logical_date | ts }}',
    'SLUICE_DATA_INTERVAL_START': '{{ data_interval_start | ts }}',
    'SLUICE_DATA_INTERVAL_END': '{{ data_interval_end | ts }}',
    'SLUICE_TRY_NUMBER': '{{ ti.try_number }}',
    'SLUICE_CONF': '{{ dag_run.conf | tojson }}',
}

with DAG(
    'retries-in-defaults',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
    default_args={
        'retries': 1,
        'retry_delay': datetime.timedelta(seconds=2.0),
    },
) as dag:
    tasks = {
        'always-fails': BashOperator(
            task_id='always-fails',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; exit 1',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'second-try-works': BashOperator(
            task_id='second-try-works',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; [ "$SLUICE_TRY_NUMBER" -ge 2 ]',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'no-retries': BashOperator(
            task_id='no-retries',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; exit 1',
            env=SLUICE_ENV,
            append_env=True,
            retries=0,
        ),
        'more-retries': BashOperator(
            task_id='more-retries',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; exit 1',
            env=SLUICE_ENV,
            append_env=True,
            retries=2,
        ),
        'fine': BashOperator(
            task_id='fine',
            bash_command='echo fine',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
