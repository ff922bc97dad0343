"""Generated from conformance/cases/clearing/clear-task-retries-again.yaml by conformance/airflow_dags.py; do not edit.

flaky (retries 1) fails on tries 1 to 3 and succeeds from try 4; report follows it. The first run fails (tries 1 and 2, report upstream_failed). Then flaky is cleared with its downstream: it gets its retry again, so try 3 fails, try 4 succeeds, report runs, the run succeeds.
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
    'clear-task-retries-again',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
) as dag:
    tasks = {
        'flaky': BashOperator(
            task_id='flaky',
            bash_command='echo "try $SLUICE_TRY_NUMBER"; [ "$SLUICE_TRY_NUMBER" -ge 4 ]',
            env=SLUICE_ENV,
            append_env=True,
            retries=1,
            retry_delay=datetime.timedelta(seconds=1.0),
        ),
        'report': BashOperator(
            task_id='report',
            bash_command='echo "$SLUICE_TASK"',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
    tasks['flaky'] >> tasks['report']
