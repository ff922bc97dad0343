"""Generated from conformance/cases/retries/retries-exhausted.yaml by conformance/airflow_dags.py; do not edit.

A task with retries 2 that always fails ends failed after try 3; its all_success downstream is upstream_failed (never tried), its all_done downstream runs.
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
    'retries-exhausted',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
) as dag:
    tasks = {
        'broken': BashOperator(
            task_id='broken',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; exit 1',
            env=SLUICE_ENV,
            append_env=True,
            retries=2,
            retry_delay=datetime.timedelta(seconds=2.0),
        ),
        'after': BashOperator(
            task_id='after',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'cleanup': BashOperator(
            task_id='cleanup',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='all_done',
        ),
    }
    tasks['broken'] >> tasks['after']
    tasks['broken'] >> tasks['cleanup']
