"""Generated from conformance/cases/limits/priority-upstream.yaml by conformance/airflow_dags.py; do not edit.

One pool slot; roots u1 (absolute 5), u2 (absolute 1), e (absolute 2); d1 after u1 and d2 after u2 use weightRule upstream with own weights 1 and 3 (so 6 and 4): the order is u1, d1, e, u2, d2, where d1's own weight alone would put e before it.
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
    'priority-upstream',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
    default_args={
        'pool': 'priority-upstream',
    },
) as dag:
    tasks = {
        'u1': BashOperator(
            task_id='u1',
            bash_command='sleep 1',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=5,
            weight_rule='absolute',
        ),
        'u2': BashOperator(
            task_id='u2',
            bash_command='sleep 1',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=1,
            weight_rule='absolute',
        ),
        'e': BashOperator(
            task_id='e',
            bash_command='sleep 1',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=2,
            weight_rule='absolute',
        ),
        'd1': BashOperator(
            task_id='d1',
            bash_command='sleep 1',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=1,
            weight_rule='upstream',
        ),
        'd2': BashOperator(
            task_id='d2',
            bash_command='sleep 1',
            env=SLUICE_ENV,
            append_env=True,
            priority_weight=3,
            weight_rule='upstream',
        ),
    }
    tasks['u1'] >> tasks['d1']
    tasks['u2'] >> tasks['d2']
