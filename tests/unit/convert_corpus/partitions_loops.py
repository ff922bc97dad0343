"""Tasks made in loops, a helper factory, a TaskGroup and a timedelta schedule."""

import datetime

from airflow import DAG
from airflow.models.baseoperator import cross_downstream
from airflow.operators.bash import BashOperator
from airflow.utils.task_group import TaskGroup

SHARDS = range(3)
REGIONS = {"eu": "eu-west-1", "us": "us-east-1"}


def shard_task(number, region):
    return BashOperator(
        task_id=f"shard_{number}",
        bash_command=f"process --shard {number} --region {region} --at $(date +%s)",
        execution_timeout=datetime.timedelta(minutes=20),
    )


with DAG(
    "partitions",
    schedule=datetime.timedelta(hours=6),
    start_date=datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc),
    catchup=True,
    default_args={"pool": "default_pool", "depends_on_past": False},
) as dag:
    prepare = {
        name: BashOperator(task_id=f"prepare_{name}", bash_command=f"prepare {zone}")
        for name, zone in REGIONS.items()
    }
    groups = []
    for name, zone in REGIONS.items():
        with TaskGroup(group_id=name, default_args={"retries": 4}) as group:
            shards = [shard_task(number, zone) for number in SHARDS]
            merge = BashOperator(task_id="merge", bash_command="merge", retries=1)
            shards >> merge
        prepare[name] >> group
        groups.append(group)

    audits = []
    for kind in ("rows", "bytes"):
        audits.append(BashOperator(task_id=f"audit_{kind}", bash_command=f"audit {kind}"))
    cross_downstream(groups, audits)
