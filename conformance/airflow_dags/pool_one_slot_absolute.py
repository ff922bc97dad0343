"""Generated from conformance/cases/limits/pool-one-slot-absolute.yaml by conformance/airflow_dags.py; do not edit.

Four independent tasks in a pool of one slot, weightRule absolute with weights 1, 4, 2, 3: they run one at a time, heaviest first.
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
    'pool-one-slot-absolute',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
    default_args={
        'pool': 'pool-one-slot-absolute',
        'weight_rule': 'absolute',
    },
) as dag:
    tasks = {
        'w1': BashOperator(
            task_id='w1',
            bash_command='sleep 1',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=1,
        ),
        'w4': BashOperator(
            task_id='w4',
            bash_command='sleep 1',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=4,
        ),
        'w2': BashOperator(
            task_id='w2',
            bash_command='sleep 1',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=2,
        ),
        'w3': BashOperator(
            task_id='w3',
            bash_command='sleep 1',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=3,
        ),
    }
