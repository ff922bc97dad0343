"""Generated from conformance/cases/limits/pool-slots.yaml by conformance/airflow_dags.py; do not edit.

A pool of two slots; big takes both (poolSlots 2) and weighs 2, s1 and s2 take one each and weigh 3 and 1. s1 starts first; big does not fit beside it, so does s2, the lighter one, take the free slot, or wait behind big?
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
    'pool-slots',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
    default_args={
        'pool': 'pool-slots',
        'weight_rule': 'absolute',
    },
) as dag:
    tasks = {
        's1': BashOperator(
            task_id='s1',
            bash_command='sleep 4',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=3,
        ),
        'big': BashOperator(
            task_id='big',
            bash_command='sleep 4',
            env=SLUICE_ENV,
            append_env=True,
            pool_slots=2,
            priority_weight=2,
        ),
        's2': BashOperator(
            task_id='s2',
            bash_command='sleep 4',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=1,
        ),
    }
