"""Generated from conformance/cases/across-runs/wait-for-downstream.yaml by conformance/airflow_dags.py; do not edit.

Catchup over three past days with maxActiveRuns 3; extract has waitForDownstream (so dependsOnPast too) and load follows it: a run's extract waits for the previous run's extract and load, so the six tasks run one at a time: each day's extract, then its load.
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
    'wait-for-downstream',
    schedule='@daily',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    end_date=pendulum.parse('2026-11-03T00:00:00Z').in_timezone('UTC'),
    catchup=True,
    max_active_runs=3,
) as dag:
    tasks = {
        'extract': BashOperator(
            task_id='extract',
            bash_command='sleep 1; echo "$SLUICE_LOGICAL_DATE"',
            env=SLUICE_ENV,
            append_env=True,
            wait_for_downstream=True,
        ),
        'load': BashOperator(
            task_id='load',
            bash_command='sleep 2; echo "$SLUICE_LOGICAL_DATE"',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
    tasks['extract'] >> tasks['load']
