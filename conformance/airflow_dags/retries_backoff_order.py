"""Generated from conformance/cases/retries/retries-backoff-order.yaml by conformance/airflow_dags.py; do not edit.

Three tasks fail their first two tries and succeed on try 3, each with retryDelay 8s: steady without backoff (waits 8 s, 8 s), backoff with retryExponentialBackoff (8 s then 16 s in Sluice; Airflow adds up to as much again), capped with backoff and maxRetryDelay 8s (8 s, 8 s). Their third tries run in that order: steady and capped side by side, backoff after both ended. Timing is not compared, only the order and try numbers.
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
    'retries-backoff-order',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
    default_args={
        'retries': 2,
        'retry_delay': datetime.timedelta(seconds=8.0),
    },
) as dag:
    tasks = {
        'steady': BashOperator(
            task_id='steady',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; [ "$SLUICE_TRY_NUMBER" -ge 3 ] && sleep 3',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'backoff': BashOperator(
            task_id='backoff',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; [ "$SLUICE_TRY_NUMBER" -ge 3 ] && sleep 3',
            env=SLUICE_ENV,
            append_env=True,
            retry_exponential_backoff=True,
        ),
        'capped': BashOperator(
            task_id='capped',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; [ "$SLUICE_TRY_NUMBER" -ge 3 ] && sleep 3',
            env=SLUICE_ENV,
            append_env=True,
            retry_exponential_backoff=True,
            max_retry_delay=datetime.timedelta(seconds=8.0),
        ),
    }
