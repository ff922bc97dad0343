"""Generated from conformance/cases/clearing/clear-upstream-only-failed.yaml by conformance/airflow_dags.py; do not edit.

first, second, third in a chain; second fails on its first try, third is upstream_failed, the run fails. Then third is cleared with its upstream, only failed tasks: second (try 2) and third (try 1) run, first, a success, is not cleared and keeps its try 1; the run succeeds.
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
    'clear-upstream-only-failed',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
) as dag:
    tasks = {
        'first': BashOperator(
            task_id='first',
            bash_command='echo "$SLUICE_TASK"',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'second': BashOperator(
            task_id='second',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; [ "$SLUICE_TRY_NUMBER" -ge 2 ]',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'third': BashOperator(
            task_id='third',
            bash_command='echo "$SLUICE_TASK"',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
    tasks['first'] >> tasks['second']
    tasks['second'] >> tasks['third']
