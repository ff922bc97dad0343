"""Generated from conformance/cases/params/params-conf-overrides.yaml by conformance/airflow_dags.py; do not edit.

A DAG's params reach its tasks: its @once run sees the defaults, a manual run whose conf overrides two params and adds a key sees them merged; each task succeeds only if it reads what it should, its params one by one ({{ params.x }}: SLUICE_PARAM_X) and all of them as JSON ({{ params | tojson }}: SLUICE_PARAMS).
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
    'SLUICE_PARAMS': '{{ params | tojson }}',
    'SLUICE_PARAM_MODE': '{{ params.mode }}',
    'SLUICE_PARAM_DRY_RUN': '{{ params.dry_run }}',
    'SLUICE_PARAM_LIMIT': '{{ params.limit }}',
    'SLUICE_PARAM_RATIO': '{{ params.ratio }}',
    'SLUICE_PARAM_NOTHING': '{{ params.nothing }}',
}

with DAG(
    'params-conf-overrides',
    schedule='@once',
    start_date=pendulum.parse('2026-11-01T00:00:00Z').in_timezone('UTC'),
    catchup=False,
    params={'mode': 'full', 'dry_run': False, 'limit': 1000, 'ratio': 0.5, 'nothing': None, 'tables': ['a', 'b']},
) as dag:
    tasks = {
        'one-by-one': BashOperator(
            task_id='one-by-one',
            bash_command='case "$SLUICE_LOGICAL_DATE" in\n  *T12:00:00*) want=\'delta|True|1000|0.5|None\' ;;\n  *) want=\'full|False|1000|0.5|None\' ;;\nesac\ngot="$SLUICE_PARAM_MODE|$SLUICE_PARAM_DRY_RUN|$SLUICE_PARAM_LIMIT|$SLUICE_PARAM_RATIO|$SLUICE_PARAM_NOTHING"\necho "got $got, want $want"\n[ "$got" = "$want" ]\n',
            env=SLUICE_ENV,
            append_env=True,
        ),
        'as-json': BashOperator(
            task_id='as-json',
            bash_command='case "$SLUICE_LOGICAL_DATE" in\n  *T12:00:00*) want=\'{"dry_run": true, "extra": "x y", "limit": 1000, "mode": "delta", "nothing": null, "ratio": 0.5, "tables": ["a", "b"]}\' ;;\n  *) want=\'{"dry_run": false, "limit": 1000, "mode": "full", "nothing": null, "ratio": 0.5, "tables": ["a", "b"]}\' ;;\nesac\necho "got $SLUICE_PARAMS"\necho "want $want"\n[ "$SLUICE_PARAMS" = "$want" ]\n',
            env=SLUICE_ENV,
            append_env=True,
        ),
    }
