"""Generated from conformance/cases/dependencies/run-state-failed-leaf.yaml by conformance/airflow_dags.py; do not edit.

One leaf fails, the others succeed or are skipped: the run fails.
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
    'run-state-failed-leaf',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
) as dag:
    tasks = {
        'start': BashOperator(
            task_id='start',
            bash_command='echo start',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'good-leaf': BashOperator(
            task_id='good-leaf',
            bash_command='echo fine',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'skipped-leaf': BashOperator(
            task_id='skipped-leaf',
            bash_command='exit 99',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'failed-leaf': BashOperator(
            task_id='failed-leaf',
            bash_command='echo failing; exit 1',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
    tasks['start'] >> tasks['good-leaf']
    tasks['start'] >> tasks['skipped-leaf']
    tasks['start'] >> tasks['failed-leaf']
