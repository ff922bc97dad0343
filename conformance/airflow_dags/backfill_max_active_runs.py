"""Generated from conformance/cases/backfill/backfill-max-active-runs.yaml by conformance/airflow_dags.py; do not edit.

A backfill over three past days with max active runs 1 (the backfill's own on Sluice and Airflow 3; the DAG's maxActiveRuns 1 on Airflow 2, whose backfill has no limit of its own): the runs execute one at a time in logical-date order, each run's two tasks in turn, and no two runs overlap.
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
    'backfill-max-active-runs',
    schedule='@daily',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    end_date=pendulum.parse('2026-11-10T00:00:00Z').in_timezone('UTC'),
    catchup=False,
    max_active_runs=1,
) as dag:
    tasks = {
        'first': BashOperator(
            task_id='first',
            bash_command='sleep 1; echo "$SLUICE_LOGICAL_DATE"',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'second': BashOperator(
            task_id='second',
            bash_command='sleep 1; echo "$SLUICE_LOGICAL_DATE"',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
    tasks['first'] >> tasks['second']
