"""Generated from conformance/cases/retries/retries-then-success.yaml by conformance/airflow_dags.py; do not edit.

A task with retries 3 fails on its first two tries (it reads SLUICE_TRY_NUMBER, Airflow's ti.try_number) and succeeds on try 3; its all_success downstream waits through the retries and runs once.
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
    'retries-then-success',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
) as dag:
    tasks = {
        'flaky': BashOperator(
            task_id='flaky',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; [ "$SLUICE_TRY_NUMBER" -ge 3 ]',
            env=SLUICE_ENV,
            append_env=True,
            retries=3,
            retry_delay=datetime.timedelta(seconds=2.0),
        ),
        'after': BashOperator(
            task_id='after',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
    tasks['flaky'] >> tasks['after']
