"""Generated from conformance/cases/backfill/backfill-beside-scheduled.yaml by conformance/airflow_dags.py; do not edit.

Catchup makes scheduled runs for 2026-11-01 to 2026-11-04 (endDate), the one of 2026-11-03 failing on its second task's first try; once they end, a backfill over the same days reprocessing failed runs runs that one again (it succeeds) and keeps the others.
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
    'backfill-beside-scheduled',
    schedule='@daily',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    end_date=pendulum.parse('2026-11-04T00:00:00Z').in_timezone('UTC'),
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
            bash_command='echo "try $SLUICE_TRY_NUMBER"; case "$SLUICE_LOGICAL_DATE" in 2026-11-03*) [ "$SLUICE_TRY_NUMBER" -ge 2 ];; esac',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
    tasks['first'] >> tasks['second']
