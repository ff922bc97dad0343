"""Generated from conformance/cases/schedule/generated-dag-fields.yaml by conformance/airflow_dags.py; do not edit.

Every DAG and task field the generated Airflow DAG carries (limits, timeouts, retries, trigger rules, priorities, env, edges), with defaults; a daily schedule.
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
    'generated-dag-fields',
    schedule='@daily',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    end_date=pendulum.parse('2026-11-02T00:00:00Z').in_timezone('UTC'),
    catchup=True,
    max_active_runs=3,
    max_active_tasks=5,
    dagrun_timeout=datetime.timedelta(seconds=3600.0),
    default_args={
        'retries': 2,
        'retry_delay': datetime.timedelta(seconds=30.0),
    },
) as dag:
    tasks = {
        'extract': BashOperator(
            task_id='extract',
            bash_command='echo "try $SLUICE_TRY_NUMBER of $SLUICE_TASK in $SLUICE_RUN_ID"',
            env={
                'SLUICE_DAG': '{{ dag.dag_id }}',
                'SLUICE_TASK': '{{ task.task_id }}',
                'SLUICE_RUN_ID': '{{ run_id }}',
                'SLUICE_LOGICAL_DATE': '{{ logical_date | ts }}',
                'SLUICE_DATA_INTERVAL_START': '{{ data_interval_start | ts }}',
                'SLUICE_DATA_INTERVAL_END': '{{ data_interval_end | ts }}',
                'SLUICE_TRY_NUMBER': '{{ ti.try_number }}',
                'SLUICE_CONF': '{{ dag_run.conf | tojson }}',
                'GREETING': 'hello',
            },
            append_env=True,
            retry_exponential_backoff=True,
            max_retry_delay=datetime.timedelta(seconds=120.0),
            execution_timeout=datetime.timedelta(seconds=600.0),
            priority_weight=5,
            weight_rule='absolute',
        ),
        'transform': BashOperator(
            task_id='transform',
            bash_command='echo "$GREETING $SLUICE_CONF"; exit 99',
            env=SLUICE_ENV,
            append_env=True,
            pool_slots=2,
            depends_on_past=True,
            wait_for_downstream=True,
            skip_on_exit_code=[99, 100],
        ),
        'cleanup': BashOperator(
            task_id='cleanup',
            bash_command='echo cleanup',
            env=SLUICE_ENV,
            append_env=True,
            retries=0,
            trigger_rule='all_done',
            weight_rule='upstream',
        ),
    }
    tasks['extract'] >> tasks['transform']
    tasks['extract'] >> tasks['cleanup']
    tasks['transform'] >> tasks['cleanup']
