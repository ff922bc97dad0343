"""Generated from conformance/cases/schedule/catchup-off-start-in-future.yaml by conformance/airflow_dags.py; do not edit.

catchup off with a startDate after now: no run yet, the first one is the startDate's.
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
    'catchup-off-start-in-future',
    schedule='0 12 * * *',
    start_date=pendulum.parse('2026-12-10T11:00:00Z').in_timezone('Europe/Berlin'),
    catchup=False,
) as dag:
    tasks = {
        'work': BashOperator(
            task_id='work',
            bash_command='echo "$SLUICE_DAG for $SLUICE_DATA_INTERVAL_START .. $SLUICE_DATA_INTERVAL_END"',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
