"""The cluster chaos run's DAGs: pools, retries, trigger rules, catchup and long tries, as pods.

Every task is a short Python program in the Sluice image that reports to the
test's event collector (`chaos_cluster.Collector`) what the local chaos
workload's tasks append to their event log: start, a heartbeat every half
second, end, each with its (dag, run, task, try), its pid and pod, and this
machine's clock (the node is this machine, so the checker compares the pods'
times with the replicas' verdicts without skew). A report that cannot be made
(the collector is the test process, never faulted; the pod's network may be)
is retried for a while and then dropped: the checker then sees less, never a
start that did not happen.

As in tests/chaos/workload.py, the workload asks for more than its limits
allow so that they bind: the pool (2 slots) is wanted by `chaos-fanout` and
`chaos-flaky`, and `chaos-wide` (6 parallel tasks, 2 active runs) by
`maxActiveTasks: 3`. `chaos-long`'s 40 s tries outlive most faults, so a
killed or stopped scheduler almost always has one for another to adopt.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.chaos.workload import fanout_tasks, flaky_tasks

POOL_SLOTS = 2
WIDE_MAX_ACTIVE_TASKS = 3
# The faults start once the DAGs are registered and their first pods run.
BOOT = timedelta(minutes=1)

_PROGRAM = """\
import json, os, sys, time, urllib.request
URL = os.environ["CHAOS_URL"]
def log(event, patience):
    body = json.dumps({
        "event": event, "dag": os.environ["SLUICE_DAG"], "run": os.environ["SLUICE_RUN_ID"],
        "task": os.environ["SLUICE_TASK"], "try": int(os.environ["SLUICE_TRY_NUMBER"]),
        "pid": os.getpid(), "pod": os.environ.get("HOSTNAME", ""), "t": time.time(),
    }).encode()
    give_up = time.monotonic() + patience
    while True:
        try:
            urllib.request.urlopen(urllib.request.Request(URL, data=body), timeout=2).close()
            return
        except Exception:
            if time.monotonic() >= give_up:
                return
            time.sleep(0.2)
log("start", 30)
if FAIL_FIRST_TRY and os.environ["SLUICE_TRY_NUMBER"] == "1":
    log("end", 10)
    sys.exit(1)
for _ in range(BEATS):
    time.sleep(0.5)
    log("heartbeat", 0.5)
log("end", 10)
"""


def task_program(seconds: float, *, fail_first_try: bool = False) -> str:
    beats = max(1, int(seconds / 0.5))
    return f"BEATS = {beats}\nFAIL_FIRST_TRY = {fail_first_try}\n{_PROGRAM}"


def _task(name: str, seconds: float, **extra: Any) -> dict[str, Any]:
    fail = extra.pop("fail_first_try", False)
    return {"name": name, "args": [task_program(seconds, fail_first_try=fail)], **extra}


def manifests(
    now: datetime, fault_window: timedelta, *, image: str, pool: str, collector: str
) -> list[dict[str, Any]]:
    """The DAGs, for a run whose faults last `fault_window` from about `now` + BOOT."""
    minute = now.astimezone(UTC).replace(second=0, microsecond=0)
    until = minute + BOOT + fault_window
    defaults = {
        "image": image,
        "command": ["python3", "-c"],
        "retries": 4,
        "retryDelay": "1s",
        "env": [{"name": "CHAOS_URL", "value": collector}],
    }
    fanout = fanout_tasks(_task, pool, short=1, work=3)
    flaky = flaky_tasks(_task, pool, short=1, load=2)
    specs: list[tuple[str, dict[str, Any]]] = [
        # A backlog of 3 runs at the start, then one every 2 minutes until the faults end:
        # the pool binds through a soak too.
        ("chaos-fanout", {"schedule": "*/2 * * * *", "startDate": minute - timedelta(minutes=6),
                          "endDate": until, "catchup": True, "maxActiveRuns": 2,
                          "tasks": fanout}),
        ("chaos-flaky", {"schedule": "*/2 * * * *", "startDate": minute - timedelta(minutes=6),
                         "endDate": until, "catchup": True, "maxActiveRuns": 2, "tasks": flaky}),
        ("chaos-long", {"schedule": "* * * * *", "startDate": minute - timedelta(minutes=1),
                        "endDate": until, "catchup": True, "maxActiveRuns": 2,
                        "tasks": [_task("long-a", 40), _task("long-b", 40)]}),
        ("chaos-wide", {"schedule": "* * * * *", "startDate": minute - timedelta(minutes=2),
                        "endDate": until, "catchup": True, "maxActiveRuns": 2,
                        "maxActiveTasks": WIDE_MAX_ACTIVE_TASKS,
                        "tasks": [_task(f"part-{i}", 4) for i in range(6)]}),
    ]  # fmt: skip
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


def pool_manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "sluice.io/v1alpha1",
        "kind": "Pool",
        "metadata": {"name": name},
        "spec": {"slots": POOL_SLOTS, "description": "the cluster chaos run"},
    }
