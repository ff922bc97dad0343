"""Generated from conformance/cases/across-runs/depends-on-past-catchup.yaml by conformance/airflow_dags.py; do not edit.

Catchup over three past days with maxActiveRuns 3 and one dependsOnPast task: the first run's task runs (it has no previous run), each later one only after the previous day's succeeded, so they run one at a time in logical-date order though the runs are active together.
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
    'depends-on-past-catchup',
    schedule='@daily',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    end_date=pendulum.parse('2026-11-03T00:00:00Z').in_timezone('UTC'),
    catchup=True,
    max_active_runs=3,
) as dag:
    tasks = {
        'step': BashOperator(
            task_id='step',
            bash_command='sleep 2; echo "$SLUICE_LOGICAL_DATE"',
            env=SLUICE_ENV,
            append_env=True,
            depends_on_past=True,
        ),
    }
