"""Generated from conformance/cases/clearing/mark-success-unblocks-depends-on-past.yaml by conformance/airflow_dags.py; do not edit.

Catchup over two past days; step (dependsOnPast) fails on 2026-11-01, so 2026-11-02's step waits and its run stays running. 40 s after the first run, step is marked success in the 2026-11-01 run: that run, nothing cleared in it, stays failed, and 2026-11-02's step, its past now a success, runs and its run succeeds.
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
    'mark-success-unblocks-depends-on-past',
    schedule='@daily',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    end_date=pendulum.parse('2026-11-02T00:00:00Z').in_timezone('UTC'),
    catchup=True,
    max_active_runs=2,
) as dag:
    tasks = {
        'step': BashOperator(
            task_id='step',
            bash_command='echo "$SLUICE_LOGICAL_DATE"; case "$SLUICE_LOGICAL_DATE" in 2026-11-01*) exit 1;; esac',
            env=SLUICE_ENV,
            append_env=True,
            depends_on_past=True,
        ),
    }
