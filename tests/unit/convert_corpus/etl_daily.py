"""A nightly ETL in the classic Airflow 2 style: `with DAG`, default_args, templates."""

from datetime import timedelta

import pendulum
from airflow import DAG
from airflow.models.baseoperator import chain
from airflow.operators.bash import BashOperator
from airflow.operators.empty import EmptyOperator
from airflow.utils.trigger_rule import TriggerRule

BUCKET = "s3://warehouse"
TABLES = ["orders", "customers", "payments"]

default_args = {
    "owner": "data-eng",
    "email_on_failure": False,
    "retries": 2,
    "retry_delay": timedelta(minutes=5),
    "retry_exponential_backoff": True,
    "max_retry_delay": timedelta(minutes=30),
    "execution_timeout": timedelta(hours=1),
}

with DAG(
    dag_id="etl_daily",
    description="Nightly load of the warehouse",
    schedule="30 2 * * *",
    start_date=pendulum.datetime(2026, 11, 1, tz="Europe/Berlin"),
    end_date=pendulum.datetime(2027, 11, 1, tz="Europe/Berlin"),
    catchup=False,
    max_active_runs=1,
    max_active_tasks=4,
    dagrun_timeout=timedelta(hours=6),
    default_args=default_args,
    params={"target": "prod", "limit": 1000},
    tags=["etl"],
) as dag:
    start = EmptyOperator(task_id="start")

    extracts = [
        BashOperator(
            task_id=f"extract_{table}",
            bash_command=f"extract --table {table} --day {{{{ ds }}}} --out {BUCKET}/{table}/",
            pool="warehouse_io",
            pool_slots=2,
            priority_weight=10 if table == "orders" else 1,
        )
        for table in TABLES
    ]

    transform = BashOperator(
        task_id="transform",
        bash_command=(
            "dbt run --target {{ params.target }} "
            '--vars \'{"day": "{{ ds_nodash }}", "run": "{{ run_id }}"}\''
        ),
        env={
            "PARTITION": "dt={{ data_interval_start | ds }}/hour={{ logical_date.strftime('%H') }}",
            "LIMIT": "{{ params.limit }}",
            "MODE": "full",
        },
        append_env=True,
        weight_rule="absolute",
        depends_on_past=True,
    )

    check = BashOperator(
        task_id="check_counts",
        bash_command='test "$(count {{ ts_nodash }})" -gt 0 || exit 99',
        skip_on_exit_code=[99],
        wait_for_downstream=True,
    )

    notify = BashOperator(
        task_id="notify",
        bash_command='echo "{{ dag.dag_id }} {{ ts }} try {{ ti.try_number }}: done"',
        trigger_rule=TriggerRule.ALL_DONE,
        retries=0,
    )

    end = EmptyOperator(task_id="end", trigger_rule="none_failed_min_one_success")

    start >> extracts >> transform
    chain(transform, check, [notify, end])
