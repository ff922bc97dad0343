"""Generated from conformance/cases/dependencies/rule-all-skipped.yaml by conformance/airflow_dags.py; do not edit.

Trigger rule all_skipped against each upstream state (success, failed, skipped by exit 99, upstream_failed), some pairs and all four; the run's state follows its leaves.
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
    'rule-all-skipped',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
) as dag:
    tasks = {
        'ok': BashOperator(
            task_id='ok',
            bash_command='echo ok',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'fail': BashOperator(
            task_id='fail',
            bash_command='echo failing; exit 1',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'skip': BashOperator(
            task_id='skip',
            bash_command='echo skipping; exit 99',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'upfail': BashOperator(
            task_id='upfail',
            bash_command='echo never runs',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'on-ok': BashOperator(
            task_id='on-ok',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='all_skipped',
        ),
        'on-fail': BashOperator(
            task_id='on-fail',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='all_skipped',
        ),
        'on-skip': BashOperator(
            task_id='on-skip',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='all_skipped',
        ),
        'on-upfail': BashOperator(
            task_id='on-upfail',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='all_skipped',
        ),
        'on-ok-fail': BashOperator(
            task_id='on-ok-fail',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='all_skipped',
        ),
        'on-ok-skip': BashOperator(
            task_id='on-ok-skip',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='all_skipped',
        ),
        'on-fail-skip': BashOperator(
            task_id='on-fail-skip',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='all_skipped',
        ),
        'on-all': BashOperator(
            task_id='on-all',
            bash_command='echo "$SLUICE_TASK ran"',
            env=SLUICE_ENV,
            append_env=True,
            trigger_rule='all_skipped',
        ),
    }
    tasks['fail'] >> tasks['upfail']
    tasks['ok'] >> tasks['on-ok']
    tasks['fail'] >> tasks['on-fail']
    tasks['skip'] >> tasks['on-skip']
    tasks['upfail'] >> tasks['on-upfail']
    tasks['ok'] >> tasks['on-ok-fail']
    tasks['fail'] >> tasks['on-ok-fail']
    tasks['ok'] >> tasks['on-ok-skip']
    tasks['skip'] >> tasks['on-ok-skip']
    tasks['fail'] >> tasks['on-fail-skip']
    tasks['skip'] >> tasks['on-fail-skip']
    tasks['ok'] >> tasks['on-all']
    tasks['fail'] >> tasks['on-all']
    tasks['skip'] >> tasks['on-all']
    tasks['upfail'] >> tasks['on-all']
