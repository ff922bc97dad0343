"""Branching without a branch operator: the Python twin of ../branching.yaml.

A task that exits with 99 is skipped (skip_on_exit_code), the skip propagates
to the tasks that need it, and the join runs if nothing failed and at least
one branch succeeded. The two branches have the same shape, so one function
makes both.
"""

from datetime import UTC, datetime

from sluice.sdk import DAG, Task

dag = DAG(
    "branching",
    schedule="@hourly",
    start_date=datetime(2026, 12, 1, tzinfo=UTC),
    catchup=False,
    defaults={
        "image": "busybox:1.36",
        "command": ["sh", "-c"],
        "skip_on_exit_code": 99,  # the default, spelled out
    },
)


def branch(start: Task, check: str, parity: int, work: str, said: str, skipped: str) -> Task:
    """A check that succeeds on hours of one parity (else exits 99: skipped), then its work."""
    script = (
        'hour=$(echo "$SLUICE_LOGICAL_DATE" | cut -c12-13)\n'
        f"if [ $(( ${{hour#0}} % 2 )) -eq {parity} ]; then\n"
        f'  echo "{said}"; exit 0\n'
        "fi\n"
        f'echo "{skipped}"; exit 99\n'
    )
    checked = dag.task(check, args=[script])
    # all_success (the default): skipped when the check is skipped.
    done = dag.task(work, args=[f'echo "{work.replace("-", " ")}"'])
    start >> checked >> done
    return done


start = dag.task("start", args=['echo "choosing a branch for $SLUICE_LOGICAL_DATE"'])
# Exactly one of the two checks succeeds: even hours take the full path, odd hours the quick one.
full = branch(
    start,
    "check-full",
    0,
    "full-refresh",
    "even hour $hour: full refresh",
    "odd hour $hour: skipping the full refresh",
)
quick = branch(
    start,
    "check-quick",
    1,
    "quick-update",
    "odd hour $hour: quick update",
    "even hour $hour: skipping the quick update",
)
join = dag.task(
    "join",
    trigger_rule="none_failed_min_one_success",
    args=['echo "one branch ran, the other was skipped; publishing"'],
)
[full, quick] >> join
