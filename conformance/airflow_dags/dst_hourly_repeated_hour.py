"""Generated from conformance/cases/schedule/dst-hourly-repeated-hour.yaml by conformance/airflow_dags.py; do not edit.

@hourly in America/New_York across 2026-11-01, when 01:00-02:00 happens twice.
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
    'dst-hourly-repeated-hour',
    schedule='@hourly',
    start_date=pendulum.parse('2026-11-01T03:00:00Z').in_timezone('America/New_York'),
    end_date=pendulum.parse('2026-11-01T09:00:00Z').in_timezone('America/New_York'),
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
