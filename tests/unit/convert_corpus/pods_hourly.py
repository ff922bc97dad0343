"""KubernetesPodOperator tasks, the Airflow 2 `dag=dag` style, set_upstream/downstream."""

from datetime import datetime

from airflow import DAG
from airflow.operators.dummy import DummyOperator
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from kubernetes.client import models as k8s

IMAGE = "registry.example.com/ingest:2.4.1"

dag = DAG(
    "ingest.hourly",
    schedule_interval="@hourly",
    start_date=datetime(2026, 12, 1),
    catchup=True,
    is_paused_upon_creation=True,
)

begin = DummyOperator(task_id="begin", dag=dag)

fetch = KubernetesPodOperator(
    task_id="fetch",
    name="fetch-pod",
    namespace="data",
    image=IMAGE,
    cmds=["ingest"],
    arguments=["fetch", "--since={{ data_interval_start }}", "--until={{ data_interval_end }}"],
    env_vars={"SOURCE": "api", "SLUICE_RUN_ID": "{{ run_id }}"},
    container_resources=k8s.V1ResourceRequirements(
        requests={"cpu": "500m", "memory": "256Mi"},
        limits={"memory": "1Gi"},
    ),
    labels={"team": "ingest"},
    node_selector={"pool": "batch"},
    image_pull_policy="IfNotPresent",
    get_logs=True,
    is_delete_operator_pod=True,
    retries=3,
    dag=dag,
)

load = KubernetesPodOperator(
    task_id="load",
    image=IMAGE,
    arguments=["load", "--hour={{ ts_nodash }}"],
    env_vars=[k8s.V1EnvVar(name="TARGET", value="warehouse")],
    skip_on_exit_code=3,
    dag=dag,
)

fetch.set_upstream(begin)
fetch.set_downstream(load)
