"""Generated from conformance/cases/clearing/clear-every-run-one-at-a-time.yaml by conformance/airflow_dags.py; do not edit.

maxActiveRuns 1, catchup over three past days, one 3-second task each; all succeed. Then every run is cleared at once (the whole runs): queued again, they run one at a time, oldest first, each task on try 2.
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
    'clear-every-run-one-at-a-time',
    schedule='@daily',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    end_date=pendulum.parse('2026-11-03T00:00:00Z').in_timezone('UTC'),
    catchup=True,
    max_active_runs=1,
) as dag:
    tasks = {
        'work': BashOperator(
            task_id='work',
            bash_command='sleep 3; echo "try $SLUICE_TRY_NUMBER"',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
