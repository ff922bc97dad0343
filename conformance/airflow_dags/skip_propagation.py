"""Generated from conformance/cases/dependencies/skip-propagation.yaml by conformance/airflow_dags.py; do not edit.

A task that exits 99 is skipped, and so is every all_success task after it down a chain; the rules that accept a skipped upstream (all_done, none_failed) run after it, none_skipped and none_failed_min_one_success do not; skipped leaves make a successful run.
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
    'skip-propagation',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
) as dag:
    tasks = {
        'skip': BashOperator(
            task_id='skip',
            bash_command='echo skipping; exit 99',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'a': BashOperator(
            task_id='a',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'b': BashOperator(
            task_id='b',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'c': BashOperator(
            task_id='c',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'done-after-b': BashOperator(
            task_id='done-after-b',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='all_done',
        ),
        'none-failed-after-c': BashOperator(
            task_id='none-failed-after-c',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='none_failed',
        ),
        'min-one-after-c': BashOperator(
            task_id='min-one-after-c',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='none_failed_min_one_success',
        ),
        'none-skipped-after-a': BashOperator(
            task_id='none-skipped-after-a',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='none_skipped',
        ),
        'after-none-failed': BashOperator(
            task_id='after-none-failed',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
    tasks['skip'] >> tasks['a']
    tasks['a'] >> tasks['b']
    tasks['b'] >> tasks['c']
    tasks['b'] >> tasks['done-after-b']
    tasks['c'] >> tasks['none-failed-after-c']
    tasks['c'] >> tasks['min-one-after-c']
    tasks['a'] >> tasks['none-skipped-after-a']
    tasks['none-failed-after-c'] >> tasks['after-none-failed']
