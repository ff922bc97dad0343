"""Generated from conformance/cases/dependencies/skip-exit-codes.yaml by conformance/airflow_dags.py; do not edit.

skipOnExitCode (Airflow's skip_on_exit_code): exit 99 skips by default; a task that sets [3] is skipped on exit 3 and fails on exit 99; [] never skips; a skip code does not count against retries.
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
    'skip-exit-codes',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
) as dag:
    tasks = {
        'default-99': BashOperator(
            task_id='default-99',
            bash_command='exit 99',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'set-3-exits-3': BashOperator(
            task_id='set-3-exits-3',
            bash_command='exit 3',
            env=SLUICE_ENV,
            append_env=True,
            skip_on_exit_code=[3],
        ),
        'set-3-exits-99': BashOperator(
            task_id='set-3-exits-99',
            bash_command='exit 99',
            env=SLUICE_ENV,
            append_env=True,
            skip_on_exit_code=[3],
        ),
        'set-none-exits-99': BashOperator(
            task_id='set-none-exits-99',
            bash_command='exit 99',
            env=SLUICE_ENV,
            append_env=True,
            skip_on_exit_code=[],
        ),
        'several-exits-100': BashOperator(
            task_id='several-exits-100',
            bash_command='exit 100',
            env=SLUICE_ENV,
            append_env=True,
            skip_on_exit_code=[99, 100],
        ),
        'skip-with-retries': BashOperator(
            task_id='skip-with-retries',
            bash_command='exit 99',
            env=SLUICE_ENV,
            append_env=True,
            retries=2,
            retry_delay=datetime.timedelta(seconds=2.0),
        ),
    }
