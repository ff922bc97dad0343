"""Generated from conformance/cases/backfill/backfill-max-active-runs-beside-dag.yaml by conformance/airflow_dags.py; do not edit.

A backfill over four past days with max active runs 2 of a DAG whose maxActiveRuns is 1, one 5-second task per run: the backfill's own limit holds, two runs at a time, the first two days before the last two (Airflow 2.10.5's backfill has no limit of its own and keeps the DAG's: one at a time).
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
    'backfill-max-active-runs-beside-dag',
    schedule='@daily',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    end_date=pendulum.parse('2026-11-10T00:00:00Z').in_timezone('UTC'),
    catchup=False,
    max_active_runs=1,
) as dag:
    tasks = {
        'work': BashOperator(
            task_id='work',
            bash_command='sleep 5; echo "$SLUICE_LOGICAL_DATE"',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
