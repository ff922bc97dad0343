"""Generated from conformance/cases/retries/retries-then-skip.yaml by conformance/airflow_dags.py; do not edit.

A task that fails on try 1 and exits 99 on try 2 ends skipped at try 2 (a skip is not retried); its all_success downstream is skipped, its none_failed downstream runs.
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
    'retries-then-skip',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
) as dag:
    tasks = {
        'fail-then-skip': BashOperator(
            task_id='fail-then-skip',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; if [ "$SLUICE_TRY_NUMBER" -lt 2 ]; then exit 1; fi; exit 99',
            env=SLUICE_ENV,
            append_env=True,
            retries=3,
            retry_delay=datetime.timedelta(seconds=2.0),
        ),
        'after': BashOperator(
            task_id='after',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'none-failed-after': BashOperator(
            task_id='none-failed-after',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='none_failed',
        ),
    }
    tasks['fail-then-skip'] >> tasks['after']
    tasks['fail-then-skip'] >> tasks['none-failed-after']
