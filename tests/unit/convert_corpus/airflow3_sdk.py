"""An Airflow 3 DAG: airflow.sdk, the standard provider, Param, enums and a timetable."""

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Param, chain
from airflow.task.trigger_rule import TriggerRule
from airflow.timetables.interval import CronDataIntervalTimetable
from airflow.utils.weight_rule import WeightRule

with DAG(
    dag_id="billing_v3",
    schedule=CronDataIntervalTimetable("0 4 * * *", timezone="America/New_York"),
    start_date=pendulum.datetime(2026, 6, 1, 4, tz="America/New_York"),
    catchup=True,
    max_active_runs=3,
    params={"currency": Param("USD", type="string"), "dry_run": Param(False, type="boolean")},
    doc_md="Bills every customer once a day.",
):
    begin = EmptyOperator(task_id="begin")
    invoice = BashOperator(
        task_id="invoice",
        bash_command=(
            "invoice --currency {{ params.currency }} --dry-run={{ params.dry_run }} "
            "--period {{ data_interval_start | ds }}..{{ data_interval_end | ds }}\n"
            "echo conf: {{ dag_run.conf }}\n"
        ),
        weight_rule=WeightRule.UPSTREAM,
        priority_weight=5,
    )
    report = BashOperator(
        task_id="report",
        bash_command="report {{ ds }}",
        trigger_rule=TriggerRule.ONE_SUCCESS,
        retries=1,
        retry_delay=30,
    )
    chain(begin, invoice, report)
