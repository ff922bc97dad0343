"""The chaos workload: DAGs that exercise pools, retries, trigger rules, catchup and long tries.

Every task is a shell script that appends JSON lines (start, a heartbeat every
half second, end) to the shared event log, with its (dag, run, task, try), its
own pid and PID namespace, and its scheduler's pid. The checker replays that
log. The workload asks for more than the limits allow, so that they bind: the
`chaos` pool (2 slots) is wanted by `chaos-fanout` and `chaos-flaky`, and
`chaos-wide` (6 parallel tasks, 2 active runs) by `maxActiveTasks: 3`.
`chaos-fragile` is the DAG whose stored spec the harness makes unloadable.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

POOL = "chaos"
POOL_SLOTS = 2
WIDE_MAX_ACTIVE_TASKS = 3
# The faults start once the replicas are up, which takes up to a minute on a busy
# machine: the minutely DAGs run that much longer, so that they run under the faults.
BOOT = timedelta(minutes=1)
FRAGILE = "chaos-fragile"

_LOG_LINE = (
    'printf \'{"event":"%s","dag":"%s","run":"%s","task":"%s","try":%s,'
    '"pid":%s,"ns":"%s","scheduler":%s,"t":%s}\\n\' "$1" "$SLUICE_DAG" "$SLUICE_RUN_ID" '
    '"$SLUICE_TASK" "$SLUICE_TRY_NUMBER" $$ "$ns" "${SLUICE_SCHEDULER_PID:-0}" '
    '"$(date +%s.%N)" >> "$CHAOS_LOG"'
)


def task_script(seconds: float, *, fail_first_try: bool = False) -> str:
    beats = max(1, int(seconds / 0.5))
    fail = 'if [ "$SLUICE_TRY_NUMBER" = 1 ]; then log end; exit 1; fi; ' if fail_first_try else ""
    return (
        f"ns=$(readlink /proc/$$/ns/pid); log() {{ {_LOG_LINE}; }}; log start; {fail}"
        f"i=0; while [ $i -lt {beats} ]; do sleep 0.5; log heartbeat; i=$((i+1)); done; "
        "log end"
    )


def _task(name: str, seconds: float, **extra: Any) -> dict[str, Any]:
    fail = extra.pop("fail_first_try", False)
    return {"name": name, "args": [task_script(seconds, fail_first_try=fail)], **extra}


TaskMaker = Callable[..., dict[str, Any]]


def fanout_tasks(task: TaskMaker, pool: str, *, short: float, work: float) -> list[Any]:
    """start -> four pool tasks (one taking 2 slots) -> join (all_done): the pool binds.
    `task(name, seconds, **fields)` makes each task (the local or the cluster workload's)."""
    return [
        task("start", short),
        *[
            task(f"work-{i}", work, dependsOn=["start"], pool=pool, poolSlots=2 if i == 0 else 1)
            for i in range(4)
        ],
        task("join", short, dependsOn=[f"work-{i}" for i in range(4)], triggerRule="all_done"),
    ]


def flaky_tasks(task: TaskMaker, pool: str, *, short: float, load: float) -> list[Any]:
    """extract fails its first try (retried), load in the pool, cleanup (all_done)."""
    return [
        task("extract", short, fail_first_try=True),
        task("load", load, dependsOn=["extract"], pool=pool),
        task("cleanup", short, dependsOn=["load"], triggerRule="all_done"),
    ]


def manifests(now: datetime, fault_window: timedelta, event_log: Path) -> list[dict[str, Any]]:
    """Enough catchup work to keep the pool busy for about the fault window."""
    hour = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    # Capped so a long soak keeps a steady load instead of a backlog that outlasts it.
    hours = max(3, min(30, int(fault_window.total_seconds() / 6)))
    minute = now.astimezone(UTC).replace(second=0, microsecond=0)
    defaults = {
        "image": "busybox:1.36",
        "command": ["sh", "-c"],
        "retries": 4,
        "retryDelay": "1s",
        "env": [{"name": "CHAOS_LOG", "value": str(event_log)}],
    }
    fanout = fanout_tasks(_task, POOL, short=0.5, work=2)
    flaky = flaky_tasks(_task, POOL, short=0.5, load=1)
    minutely = [
        _task(f"step-{i}", 1, **({"dependsOn": [f"step-{i - 1}"]} if i else {})) for i in range(3)
    ]
    # Longer than a local try's lease here (12 s): a try whose replica stops for longer
    # and that nobody adopts stops itself.
    long_running = [_task("long-a", 25), _task("long-b", 25)]
    wide = [_task(f"part-{i}", 3) for i in range(6)]
    fragile = [_task("first", 8), _task("second", 8, dependsOn=["first"])]
    specs: list[tuple[str, dict[str, Any]]] = [
        (
            "chaos-fanout",
            {
                "schedule": "@hourly",
                "startDate": hour - timedelta(hours=hours),
                "catchup": True,
                "maxActiveRuns": 2,
                "tasks": fanout,
            },
        ),
        (
            "chaos-flaky",
            {
                "schedule": "@hourly",
                "startDate": hour - timedelta(hours=hours),
                "catchup": True,
                "maxActiveRuns": 2,
                "tasks": flaky,
            },
        ),
        (
            "chaos-minutely",
            {
                "schedule": "* * * * *",
                "startDate": minute - timedelta(minutes=2),
                "endDate": minute + BOOT + fault_window,
                "catchup": True,
                "maxActiveRuns": 3,
                "tasks": minutely,
            },
        ),
        (
            # Minutely 25 s tries, two runs at a time: whichever replica a fault hits
            # almost always has a try that outlives it (adopted, or stopped by its lease).
            "chaos-long",
            {
                "schedule": "* * * * *",
                "startDate": minute - timedelta(minutes=3),
                "endDate": minute + BOOT + fault_window,
                "catchup": True,
                "maxActiveRuns": 2,
                "tasks": long_running,
            },
        ),
        (
            # Minutely with a backlog, so maxActiveTasks binds through a soak too.
            "chaos-wide",
            {
                "schedule": "* * * * *",
                "startDate": minute - timedelta(minutes=4),
                "endDate": minute + BOOT + fault_window,
                "catchup": True,
                "maxActiveRuns": 2,
                "maxActiveTasks": WIDE_MAX_ACTIVE_TASKS,
                "tasks": wide,
            },
        ),
        (
            # Minutely with 8 s tasks, so that a run is under way most of the time and a
            # break of its stored spec meets one (and the next runs fall due meanwhile).
            FRAGILE,
            {
                "schedule": "* * * * *",
                "startDate": minute - timedelta(minutes=2),
                "endDate": minute + BOOT + fault_window,
                "catchup": True,
                "maxActiveRuns": 2,
                "tasks": fragile,
            },
        ),
    ]
    return [
        {
            "apiVersion": "sluice.io/v1alpha1",
            "kind": "DAG",
            "metadata": {"name": name},
            "spec": {
                **{k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in spec.items()},
                "defaults": defaults,
            },
        }
        for name, spec in specs
    ]


def write_dags(directory: Path, docs: list[dict[str, Any]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "chaos.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
