"""A DAG driven by params: Param with a schema, default_args params, a list, a task's own params,
params in a KubernetesPodOperator's arguments and env, and a Param default that is not JSON."""

from datetime import datetime

from airflow import DAG
from airflow.models.param import Param
from airflow.operators.bash import BashOperator
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

with DAG(
    dag_id="reprocess",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    params={
        "region": Param("eu-west-1", enum=["eu-west-1", "us-east-1"], description="where"),
        "tables": ["orders", "users"],
        "batch size": 500,
        "since": datetime(2026, 1, 1),
    },
    default_args={"params": {"dry_run": True}, "retries": 1},
) as dag:
    plan = BashOperator(
        task_id="plan",
        bash_command=(
            "plan --region {{ params.region }} --dry-run={{ params.dry_run }} "
            "--tables '{{ params.tables }}' --batch {{ params['batch size'] }}"
        ),
    )
    sample = BashOperator(
        task_id="sample",
        bash_command="sample --region {{ params.region }} --rows {{ params.rows }}",
        params={"region": "us-east-1", "rows": 10},
    )
    copy = KubernetesPodOperator(
        task_id="copy",
        image="registry.example.com/copy:1.0",
        arguments=["copy", "--region={{ params.region }}"],
        env_vars={"REGION": "{{ params.region }}"},
    )
    plan >> [sample, copy]
