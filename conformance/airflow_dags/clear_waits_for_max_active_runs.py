"""Generated from conformance/cases/clearing/clear-waits-for-max-active-runs.yaml by conformance/airflow_dags.py; do not edit.

maxActiveRuns 1, catchup over two past days: 2026-11-01's work fails on its first try, then 2026-11-02's work runs for 60 s. 25 s after the first run, while it runs, 2026-11-01's work is cleared: its run is queued again and waits for the running one, so its work runs again (try 2, success) only after the other's has ended, one run at a time.
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
    'clear-waits-for-max-active-runs',
    schedule='@daily',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    end_date=pendulum.parse('2026-11-02T00:00:00Z').in_timezone('UTC'),
    catchup=True,
    max_active_runs=1,
) as dag:
    tasks = {
        'work': BashOperator(
            task_id='work',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; case "$SLUICE_LOGICAL_DATE" in 2026-11-01*) [ "$SLUICE_TRY_NUMBER" -ge 2 ];; *) sleep 60;; esac',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
