"""Generated from conformance/cases/schedule/dst-daily-missing-hour.yaml by conformance/airflow_dags.py; do not edit.

A daily 02:30 in Europe/Berlin across 2026-03-29, when 02:30 does not exist.
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
    'dst-daily-missing-hour',
    schedule='30 2 * * *',
    start_date=pendulum.parse('2026-03-25T23:00:00Z').in_timezone('Europe/Berlin'),
    end_date=pendulum.parse('2026-03-31T22:00:00Z').in_timezone('Europe/Berlin'),
    catchup=True,
) as dag:
    tasks = {
        'work': BashOperator(
            task_id='work',
            bash_command='echo "$SLUICE_DAG for $SLUICE_DATA_INTERVAL_START .. $SLUICE_DATA_INTERVAL_END"',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
