"""Generated from conformance/cases/clearing/clear-whole-run-with-skips.yaml by conformance/airflow_dags.py; do not edit.

first exits 99 and is skipped (skipOnExitCode, try 1), so second, after it, is skipped without running (try 0); other succeeds; the run succeeds. Then the whole run is cleared: first runs again and is skipped again (try 2), second is skipped again without running (try 0), other runs again (try 2).
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
    'clear-whole-run-with-skips',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
) as dag:
    tasks = {
        'first': BashOperator(
            task_id='first',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; exit 99',
            env=SLUICE_ENV,
            append_env=True,
            skip_on_exit_code=[99],
        ),
        'second': BashOperator(
            task_id='second',
            bash_command='echo "$SLUICE_TASK"',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'other': BashOperator(
            task_id='other',
            bash_command='echo "$SLUICE_TASK"',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
    tasks['first'] >> tasks['second']
