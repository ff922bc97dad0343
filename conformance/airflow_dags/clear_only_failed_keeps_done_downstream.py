"""Generated from conformance/cases/clearing/clear-only-failed-keeps-done-downstream.yaml by conformance/airflow_dags.py; do not edit.

first -> second -> report (trigger rule all_done); second fails on its first try, report runs anyway and succeeds, so the run succeeds. Then second is cleared with its downstream, only failed tasks: second alone runs again (try 2); report, success, is not cleared and keeps its try 1.
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
    'clear-only-failed-keeps-done-downstream',
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
        'report': BashOperator(
            task_id='report',
            bash_command='echo "$SLUICE_TASK"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='all_done',
        ),
    }
    tasks['first'] >> tasks['second']
    tasks['second'] >> tasks['report']
