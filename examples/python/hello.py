"""The smallest useful DAG: extract, two transforms in parallel, then load.

The Python twin of ../hello.yaml: `sluice dags render examples/python/hello.py`
prints that manifest. Every task runs `sh -c` with the run's context in its
environment, so it works the same as a Kubernetes Job and as a local
subprocess (`sluice standalone`).
"""

from datetime import UTC, datetime

from sluice.sdk import DAG

dag = DAG(
    "hello",
    schedule="@hourly",
    start_date=datetime(2026, 12, 1, tzinfo=UTC),
    catchup=False,  # only the latest hour runs, not every hour since start_date
    params={"audience": "world"},  # Airflow's params: a run's conf may override it
    defaults={"image": "busybox:1.36", "command": ["sh", "-c"], "execution_timeout": "5m"},
)

extract = dag.task(
    "extract",
    args=[
        'echo "hello $SLUICE_PARAM_AUDIENCE from $SLUICE_DAG, run $SLUICE_RUN_ID, '
        'logical date $SLUICE_LOGICAL_DATE"'
    ],
)
words = dag.task(
    "transform-words",
    args=['echo "interval: $SLUICE_DATA_INTERVAL_START .. $SLUICE_DATA_INTERVAL_END"'],
)
numbers = dag.task(
    "transform-numbers",
    env={"GREETING": "hello"},
    args=['echo "$GREETING, conf is $SLUICE_CONF"'],
)
load = dag.task("load", args=['echo "loaded for $SLUICE_LOGICAL_DATE"'])

extract >> [words, numbers] >> load
