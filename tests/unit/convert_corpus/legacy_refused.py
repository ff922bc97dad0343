"""What cannot be converted: Python callables, sensors, XCom, Variables, callbacks."""

from airflow import DAG
from airflow.models import Variable
from airflow.operators.bash import BashOperator
from airflow.operators.python import PythonOperator
from airflow.providers.http.operators.http import HttpOperator
from airflow.sensors.external_task import ExternalTaskSensor
from airflow.utils.dates import days_ago


def alert(context):
    print("failed", context)


def compute(**context):
    return 42


with DAG(
    "legacy",
    schedule="0 6 * * 1-5",
    start_date=days_ago(2),
    catchup=False,
    on_failure_callback=alert,
    max_active_runs=2,
) as dag:
    wait = ExternalTaskSensor(task_id="wait_upstream", external_dag_id="etl_daily")
    calc = PythonOperator(task_id="compute", python_callable=compute)
    ping = HttpOperator(task_id="ping", endpoint="/health")
    use = BashOperator(
        task_id="use_result",
        bash_command="echo {{ ti.xcom_pull(task_ids='compute') }} {{ dag_run.conf['mode'] }}",
        on_failure_callback=alert,
        sla=None,
    )
    script = BashOperator(task_id="script", bash_command="scripts/run.sh")
    secret = BashOperator(
        task_id="secret", bash_command="deploy", env={"TOKEN": Variable.get("token")}
    )
    tidy = BashOperator(task_id="tidy", bash_command="tidy", trigger_rule="all_done")
    wait >> calc >> [use, ping] >> tidy
    script >> secret >> tidy
