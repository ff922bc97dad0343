"""Generated from conformance/cases/across-runs/depends-on-past-after-failure.yaml by conformance/airflow_dags.py; do not edit.

Catchup over three past days with maxActiveRuns 3; step (dependsOnPast, no retries) fails on 2026-11-02 only, and report follows it with trigger rule all_done. The third day's step never runs: its run stays running, observed 90 s after the first run appeared.
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
    'depends-on-past-after-failure',
    schedule='@daily',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    end_date=pendulum.parse('2026-11-03T00:00:00Z').in_timezone('UTC'),
    catchup=True,
    max_active_runs=3,
) as dag:
    tasks = {
        'step': BashOperator(
            task_id='step',
            bash_command='echo "$SLUICE_LOGICAL_DATE"; case "$SLUICE_LOGICAL_DATE" in 2026-11-02*) exit 1;; esac',
            env=SLUICE_ENV,
            append_env=True,
            depends_on_past=True,
        ),
        'report': BashOperator(
            task_id='report',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='all_done',
        ),
    }
    tasks['step'] >> tasks['report']
