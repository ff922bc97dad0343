"""Generated from conformance/cases/limits/max-active-tasks.yaml by conformance/airflow_dags.py; do not edit.

Four independent 4-second tasks with maxActiveTasks 2 and distinct priority weights: the two heaviest run first, side by side, then the other two; never more than two at once.
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
    'max-active-tasks',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
    max_active_tasks=2,
) as dag:
    tasks = {
        'a': BashOperator(
            task_id='a',
            bash_command='sleep 4',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=1,
        ),
        'b': BashOperator(
            task_id='b',
            bash_command='sleep 4',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=4,
        ),
        'c': BashOperator(
            task_id='c',
            bash_command='sleep 4',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=2,
        ),
        'd': BashOperator(
            task_id='d',
            bash_command='sleep 4',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=3,
        ),
    }
