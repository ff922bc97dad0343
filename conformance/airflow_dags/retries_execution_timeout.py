"""Generated from conformance/cases/retries/retries-execution-timeout.yaml by conformance/airflow_dags.py; do not edit.

executionTimeout 2s: a try still running then fails and is retried like any failure; a task slow only on try 1 succeeds on try 2, one slow on every try fails after try 2, and its all_done downstream runs.
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
    'retries-execution-timeout',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
    default_args={
        'retries': 1,
        'retry_delay': datetime.timedelta(seconds=2.0),
        'execution_timeout': datetime.timedelta(seconds=2.0),
    },
) as dag:
    tasks = {
        'always-slow': BashOperator(
            task_id='always-slow',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; sleep 30',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'slow-once': BashOperator(
            task_id='slow-once',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; if [ "$SLUICE_TRY_NUMBER" -lt 2 ]; then sleep 30; fi',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'after-slow': BashOperator(
            task_id='after-slow',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            retries=0,
            trigger_rule='all_done',
        ),
    }
    tasks['always-slow'] >> tasks['after-slow']
