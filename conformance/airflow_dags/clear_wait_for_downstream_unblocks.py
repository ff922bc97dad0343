"""Generated from conformance/cases/clearing/clear-wait-for-downstream-unblocks.yaml by conformance/airflow_dags.py; do not edit.

Catchup over two past days; extract has waitForDownstream and load follows it. On 2026-11-01 load fails on its first try, so 2026-11-02's extract waits (the previous extract's downstream did not succeed) and its run stays running. 40 s after the first run, load is cleared in the 2026-11-01 run: it succeeds on try 2, then 2026-11-02's extract and load run (try 1), and both runs succeed.
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
    'clear-wait-for-downstream-unblocks',
    schedule='@daily',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    end_date=pendulum.parse('2026-11-02T00:00:00Z').in_timezone('UTC'),
    catchup=True,
    max_active_runs=2,
) as dag:
    tasks = {
        'extract': BashOperator(
            task_id='extract',
            bash_command='echo "$SLUICE_LOGICAL_DATE"',
            env=SLUICE_ENV,
            append_env=True,
            wait_for_downstream=True,
        ),
        'load': BashOperator(
            task_id='load',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; case "$SLUICE_LOGICAL_DATE" in 2026-11-01*) [ "$SLUICE_TRY_NUMBER" -ge 2 ];; esac',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
    tasks['extract'] >> tasks['load']
