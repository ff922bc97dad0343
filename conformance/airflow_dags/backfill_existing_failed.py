"""Generated from conformance/cases/backfill/backfill-existing-failed.yaml by conformance/airflow_dags.py; do not edit.

Manual runs at 2026-11-02 (succeeds) and 2026-11-03 (its second task fails on try 1) end first; then a backfill from 2026-11-01 to 2026-11-04 reprocessing failed runs (Airflow 3's --reprocess-behavior failed, Airflow 2's --rerun-failed-tasks): the two days without a run get one, the failed run runs again and succeeds on its second try, the succeeded run is kept.
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
    'backfill-existing-failed',
    schedule='@daily',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    end_date=pendulum.parse('2026-11-10T00:00:00Z').in_timezone('UTC'),
    catchup=False,
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
