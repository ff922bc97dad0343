"""Generated from conformance/cases/clearing/clear-every-run-only-failed.yaml by conformance/airflow_dags.py; do not edit.

Catchup over three past days, first -> second; second fails on its first try on 2026-11-01 and 2026-11-03. Then every run is cleared, only failed tasks (one clear over the three dates on Airflow): the two failed runs run second again (try 2) and succeed, the succeeded run, nothing cleared in it, keeps every try 1.
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
    'clear-every-run-only-failed',
    schedule='@daily',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    end_date=pendulum.parse('2026-11-03T00:00:00Z').in_timezone('UTC'),
    catchup=True,
) as dag:
    tasks = {
        'first': BashOperator(
            task_id='first',
            bash_command='echo "$SLUICE_LOGICAL_DATE"',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'second': BashOperator(
            task_id='second',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; case "$SLUICE_LOGICAL_DATE" in 2026-11-02*) ;; *) [ "$SLUICE_TRY_NUMBER" -ge 2 ];; esac',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
    tasks['first'] >> tasks['second']
