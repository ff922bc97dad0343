"""A TaskFlow DAG: @dag and @task, one mapped task, and a BashOperator beside them."""

import pendulum
from airflow.decorators import dag, task
from airflow.operators.bash import BashOperator


@dag(
    schedule="@weekly",
    start_date=pendulum.datetime(2026, 1, 5, tz="UTC"),
    catchup=True,
    default_args={"retries": 1},
)
def weekly_reports():
    @task
    def list_regions() -> list[str]:
        return ["eu", "us"]

    @task
    def build(region: str) -> str:
        return f"report-{region}"

    publish = BashOperator(
        task_id="publish",
        bash_command="publish --week {{ ds }} --items '{{ ti.xcom_pull(task_ids=\"build\") }}'",
    )
    archive = BashOperator(task_id="archive", bash_command="archive --week {{ ds }}")

    regions = list_regions()
    built = build.expand(region=regions)
    built >> publish >> archive


weekly_reports()
