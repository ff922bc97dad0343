"""Generated from conformance/cases/dependencies/upstream-failed-propagation.yaml by conformance/airflow_dags.py; do not edit.

A failure makes every all_success task after it upstream_failed down a chain; after that, all_done, one_failed and all_failed run, none_failed is upstream_failed, one_done is skipped (upstream_failed is neither a success nor a failure for it).
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
    'upstream-failed-propagation',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
) as dag:
    tasks = {
        'fail': BashOperator(
            task_id='fail',
            bash_command='echo failing; exit 1',
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
        'all-done-after-b': BashOperator(
            task_id='all-done-after-b',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='all_done',
        ),
        'one-failed-after-b': BashOperator(
            task_id='one-failed-after-b',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='one_failed',
        ),
        'all-failed-after-b': BashOperator(
            task_id='all-failed-after-b',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='all_failed',
        ),
        'none-failed-after-b': BashOperator(
            task_id='none-failed-after-b',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='none_failed',
        ),
        'one-done-after-b': BashOperator(
            task_id='one-done-after-b',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='one_done',
        ),
    }
    tasks['fail'] >> tasks['a']
    tasks['a'] >> tasks['b']
    tasks['b'] >> tasks['all-done-after-b']
    tasks['b'] >> tasks['one-failed-after-b']
    tasks['b'] >> tasks['all-failed-after-b']
    tasks['b'] >> tasks['none-failed-after-b']
    tasks['b'] >> tasks['one-done-after-b']
