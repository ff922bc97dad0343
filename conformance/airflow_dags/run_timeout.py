"""Generated from conformance/cases/retries/run-timeout.yaml by conformance/airflow_dags.py; do not edit.

dagrunTimeout 15s with a task that would run two minutes: the run fails, its unfinished tasks (the running one and those after it, all_done included) are skipped; a task that ended before keeps its state.
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
    'run-timeout',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
    dagrun_timeout=datetime.timedelta(seconds=15.0),
) as dag:
    tasks = {
        'quick': BashOperator(
            task_id='quick',
            bash_command='echo quick',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'slow': BashOperator(
            task_id='slow',
            bash_command='sleep 120',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'after-slow': BashOperator(
            task_id='after-slow',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'done-after-slow': BashOperator(
            task_id='done-after-slow',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='all_done',
        ),
    }
    tasks['slow'] >> tasks['after-slow']
    tasks['slow'] >> tasks['done-after-slow']
