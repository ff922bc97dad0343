"""Retries with exponential backoff, a cleanup task that always runs, and pool slots.

The Python twin of ../etl-retries.yaml. `extract` fails on its first try and
succeeds on the second, every run, so the retry path is exercised
deterministically (no marker files, no randomness).
"""

from datetime import UTC, datetime, timedelta

from sluice.sdk import DAG, TriggerRule

dag = DAG(
    "etl-retries",
    labels={"team": "data"},
    schedule="@hourly",
    start_date=datetime(2026, 12, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(minutes=30),
    defaults={
        "image": "busybox:1.36",
        "command": ["sh", "-c"],
        "retries": 2,
        "retry_delay": timedelta(seconds=2),
        "retry_exponential_backoff": True,  # 2s, then 4s, capped by max_retry_delay
        "max_retry_delay": timedelta(seconds=30),
        "execution_timeout": timedelta(minutes=2),
    },
)

extract = dag.task(
    "extract",
    args=[
        'if [ "$SLUICE_TRY_NUMBER" = "1" ]; then\n'
        '  echo "try 1: the source is flaky today, failing on purpose" >&2\n'
        "  exit 1\n"
        "fi\n"
        'echo "try $SLUICE_TRY_NUMBER: extracted rows for $SLUICE_LOGICAL_DATE"\n'
    ],
)
transform = dag.task(
    "transform",
    # The built-in `default` pool always exists; a Pool object (sluice.sdk.Pool)
    # would cap this kind of work across all DAGs.
    pool="default",
    pool_slots=2,
    priority_weight=10,
    resources={"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
    args=['echo "transforming (try $SLUICE_TRY_NUMBER)"'],
)
load = dag.task("load", retries=0, args=['echo "loaded"'])
cleanup = dag.task(
    "cleanup",
    trigger_rule=TriggerRule.ALL_DONE,  # runs whether load succeeded, failed or was skipped
    retries=0,
    args=['echo "removing temporary files for run $SLUICE_RUN_ID"'],
)

extract >> transform >> load >> cleanup
