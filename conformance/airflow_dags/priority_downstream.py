"""Generated from conformance/cases/limits/priority-downstream.yaml by conformance/airflow_dags.py; do not edit.

One pool slot; roots a, b, c (own weights 1, 1, 2) use weightRule downstream, their downstream tasks absolute weights (a1 5, a2 6 after a; b1 3 after b): a counts 12, b 4, c 2, so the order is a, a2, a1, b, b1, c, where own weights alone would start c first.
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
    'priority-downstream',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
    default_args={
        'pool': 'priority-downstream',
    },
) as dag:
    tasks = {
        'a': BashOperator(
            task_id='a',
            bash_command='sleep 1',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=1,
            weight_rule='downstream',
        ),
        'b': BashOperator(
            task_id='b',
            bash_command='sleep 1',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=1,
            weight_rule='downstream',
        ),
        'c': BashOperator(
            task_id='c',
            bash_command='sleep 1',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=2,
            weight_rule='downstream',
        ),
        'a1': BashOperator(
            task_id='a1',
            bash_command='sleep 1',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=5,
            weight_rule='absolute',
        ),
        'a2': BashOperator(
            task_id='a2',
            bash_command='sleep 1',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=6,
            weight_rule='absolute',
        ),
        'b1': BashOperator(
            task_id='b1',
            bash_command='sleep 1',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=3,
            weight_rule='absolute',
        ),
    }
    tasks['a'] >> tasks['a1']
    tasks['a'] >> tasks['a2']
    tasks['b'] >> tasks['b1']
