"""Figures of a Job-executor trial (`bench/k8s.py`), from what was recorded; pure.

- Latencies: per task, from the Job's and pod's own timestamps and the task
  instance's times in Postgres (`task_segments`). Kubernetes writes its
  timestamps in whole seconds (RFC 3339, truncated), so each is taken as the
  middle of its second (`k8s_time`): that makes every segment's mean sound,
  where truncation alone would bias a segment from a Postgres time to a
  Kubernetes one by half a second. A segment between two Kubernetes
  timestamps is still off by up to a second either way in any one task, one
  with a Postgres time at one end by up to half a second: p50 and p95 are
  coarse. `queued -> recorded end` has Postgres times at both ends (µs).
- API requests: `apiserver_request_total` from the API server's /metrics,
  before and after, by verb, resource and subresource (`parse_request_totals`,
  `diff_counts`); WATCH requests are left out everywhere. Sluice's own are
  the Job requests no Kubernetes component makes in a trial's window
  (`sluice_requests`); the executor's count of its own requests, logged by
  each replica at exit, checks them.
- CPU: seconds per component over the trial (`cpu_rows`).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from bench.metrics import percentile

HALF_SECOND = timedelta(seconds=0.5)
MAIN = "main"
SIDECAR = "sluice-heartbeat"

# (name, from, to): the segments of one task's life, in order, then the totals.
SEGMENTS: list[tuple[str, str, str]] = [
    ("queued -> Job created", "queued", "job_created"),
    ("Job created -> pod created", "job_created", "pod_created"),
    ("pod created -> scheduled", "pod_created", "pod_scheduled"),
    ("scheduled -> sidecar started", "pod_scheduled", "sidecar_started"),
    ("sidecar started -> main started", "sidecar_started", "main_started"),
    ("main ran", "main_started", "main_finished"),
    ("main ended -> recorded end", "main_finished", "recorded_end"),
]
TOTALS: list[tuple[str, str, str]] = [
    ("Job created -> main running", "job_created", "main_started"),
    ("main running -> recorded end", "main_started", "recorded_end"),
    ("Job created -> recorded end", "job_created", "recorded_end"),
    ("queued -> recorded end (Postgres only)", "queued", "recorded_end"),
]
HEADLINE = [name for name, _, _ in TOTALS[:3]]

# The Job requests of a trial that no Kubernetes component makes: Sluice's executor
# creates Jobs, reads one whose create found its name taken, deletes the ones it
# kills, and LISTs at each (re)list of its watch. (The Job controller works from its
# informer and writes jobs/status; the TTL controller's reads and deletes come an
# hour after a Job finished.)
SLUICE_JOB_VERBS = {"POST": "create", "GET": "get", "DELETE": "delete", "LIST": "list"}
# The log archiver's requests (`--archive`), one of each per try: it finds the try's pod
# (a LIST by its labels) and reads its log (`pods/log`, which the API server counts under
# the verb CONNECT). No Kubernetes component LISTs pods in a trial's window (their
# informers list once, at their start); the executors' pod watches LIST once per (re)list.
SLUICE_LOG_READ = ("CONNECT", "pods", "log")
SLUICE_POD_LIST = ("LIST", "pods")


def parse_time(value: Any) -> datetime | None:
    """An API timestamp (`2026-12-03T10:25:47Z`), or None."""
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def k8s_time(value: Any) -> datetime | None:
    """A Kubernetes timestamp, truncated to its second when written: the middle of it."""
    when = parse_time(value)
    return None if when is None else when + HALF_SECOND


def _container(pod: Mapping[str, Any], name: str, init: bool = False) -> dict[str, Any]:
    key = "initContainerStatuses" if init else "containerStatuses"
    for status in (pod.get("status") or {}).get(key) or []:
        if status.get("name") == name:
            return dict(status)
    return {}


def _started(status: Mapping[str, Any]) -> datetime | None:
    """When a container started: its running state, else its terminated state, else its
    last terminated state (a restarted sidecar)."""
    state = status.get("state") or {}
    for phase in ("running", "terminated"):
        if phase in state:
            return k8s_time(state[phase].get("startedAt"))
    last = (status.get("lastState") or {}).get("terminated") or {}
    return k8s_time(last.get("startedAt"))


def _condition_time(pod: Mapping[str, Any], kind: str) -> datetime | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return k8s_time(condition.get("lastTransitionTime"))
    return None


def task_times(
    queued: datetime | None,
    recorded_end: datetime | None,
    job: Mapping[str, Any] | None,
    pod: Mapping[str, Any] | None,
) -> dict[str, datetime | None]:
    """The instants of one task's life, from Postgres (queued, recorded end), its Job and
    its pod (None where it is missing)."""
    pod = pod or {}
    main = _container(pod, MAIN)
    terminated = (main.get("state") or {}).get("terminated") or {}
    return {
        "queued": queued,
        "job_created": k8s_time(((job or {}).get("metadata") or {}).get("creationTimestamp")),
        "pod_created": k8s_time((pod.get("metadata") or {}).get("creationTimestamp")),
        "pod_scheduled": _condition_time(pod, "PodScheduled"),
        "sidecar_started": _started(_container(pod, SIDECAR, init=True)),
        "main_started": _started(main),
        "main_finished": k8s_time(terminated.get("finishedAt")),
        "recorded_end": recorded_end,
    }


def task_segments(times: Mapping[str, datetime | None]) -> dict[str, float]:
    """Seconds of each segment and total whose two ends are known."""
    out: dict[str, float] = {}
    for name, start, end in SEGMENTS + TOTALS:
        a, b = times.get(start), times.get(end)
        if a is not None and b is not None:
            out[name] = (b - a).total_seconds()
    return out


@dataclass(frozen=True)
class Spread:
    n: int
    p50: float
    p95: float
    mean: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        if not values:
            return cls(0, math.nan, math.nan, math.nan)
        return cls(
            len(values),
            round(percentile(values, 50), 3),
            round(percentile(values, 95), 3),
            round(statistics.fmean(values), 3),
        )


def latency_table(per_task: Iterable[Mapping[str, float]]) -> dict[str, Spread]:
    """p50, p95 and mean of each segment over the tasks, in `SEGMENTS + TOTALS` order."""
    columns: dict[str, list[float]] = {name: [] for name, _, _ in SEGMENTS + TOTALS}
    for segments in per_task:
        for name, seconds in segments.items():
            columns[name].append(seconds)
    return {name: Spread.of(values) for name, values in columns.items()}


# -- API requests -------------------------------------------------------------------------

_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>.*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def request_key(verb: str, resource: str, subresource: str = "") -> str:
    """`POST jobs`, `PATCH pods/status`; `GET -/metrics` for a path that is no resource."""
    if resource == "-":
        return f"{verb} -{subresource}"
    return f"{verb} {resource}" + (f"/{subresource}" if subresource else "")


def parse_request_totals(metrics_text: str) -> dict[str, float]:
    """`apiserver_request_total` summed over codes and the rest: {"VERB resource[/sub]": n}.

    Requests to no resource (/metrics, /readyz, ...) are `VERB -<path>`.
    """
    totals: dict[str, float] = {}
    for line in metrics_text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        key = request_key(
            labels.get("verb", "?"), labels.get("resource") or "-", labels.get("subresource", "")
        )
        totals[key] = totals.get(key, 0.0) + float(match["value"])
    return totals


def diff_counts(
    before: Mapping[str, float], after: Mapping[str, float]
) -> tuple[dict[str, int], bool]:
    """after - before per key (keys with no change left out), and whether any counter went
    down (the API server restarted in between: the difference means nothing)."""
    out: dict[str, int] = {}
    reset = False
    for key in set(before) | set(after):
        delta = after.get(key, 0.0) - before.get(key, 0.0)
        if delta < 0:
            reset = True
        if delta:
            out[key] = round(delta)
    return out, reset


def without_watches(counts: Mapping[str, int]) -> dict[str, int]:
    """The requests that are not watches, and not to a resource-less path (/metrics, health)."""
    return {
        k: v
        for k, v in counts.items()
        if not k.startswith("WATCH ") and not k.split(" ", 1)[-1].startswith("-")
    }


def sluice_requests(counts: Mapping[str, int]) -> dict[str, int]:
    """Sluice's requests in a trial, by the executor's verb names (see SLUICE_JOB_VERBS), the
    archiver's reads of the tries' logs (`log`) and the pod LISTs (`pods list`: the
    archiver's, one per try, and the executors' pod watches')."""
    out: dict[str, int] = {}
    for verb, name in SLUICE_JOB_VERBS.items():
        n = counts.get(request_key(verb, "jobs"), 0)
        if n:
            out[name] = n
    logs = counts.get(request_key(*SLUICE_LOG_READ), 0)
    if logs:
        out["log"] = logs
    pods = counts.get(request_key(*SLUICE_POD_LIST), 0)
    if pods:
        out["pods list"] = pods
    return out


def background(rate_counts: Mapping[str, int], window_s: float, over_s: float) -> int:
    """How many non-watch requests the idle cluster makes in `over_s`, from a quiet window."""
    if window_s <= 0:
        return 0
    return round(sum(without_watches(rate_counts).values()) * over_s / window_s)


def sum_counts(many: Iterable[Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for counts in many:
        for key, n in counts.items():
            out[key] = out.get(key, 0) + int(n)
    return out


# -- CPU ----------------------------------------------------------------------------------


OTHER = "other (runc, kernel, shim time not sampled, other processes)"


def cpu_rows(
    cpu: Mapping[str, float], busy_s: float, window_s: float, tasks: int
) -> list[tuple[str, float, float, float]]:
    """(part, CPU s, cores on average, ms per task), largest first, then the rest of the
    machine's busy time ("other": the kernel, shim time the sampler missed) and the total."""
    rows = []
    for part, seconds in sorted(cpu.items(), key=lambda kv: -kv[1]):
        rows.append(_cpu_row(part, seconds, window_s, tasks))
    rest = busy_s - sum(cpu.values())
    rows.append(_cpu_row(OTHER, rest, window_s, tasks))
    rows.append(_cpu_row("machine busy (all CPUs)", busy_s, window_s, tasks))
    return rows


def _cpu_row(
    part: str, seconds: float, window_s: float, tasks: int
) -> tuple[str, float, float, float]:
    cores = seconds / window_s if window_s > 0 else math.nan
    per_task = seconds * 1000 / tasks if tasks else math.nan
    return part, round(seconds, 2), round(cores, 3), round(per_task, 2)


# -- the trial --------------------------------------------------------------------------


@dataclass
class K8sTrial:
    """One trial of the Job-executor benchmark, as saved in bench/results/k8s-*.json."""

    shapes: list[str]
    dags: int
    tasks_per_dag: int
    replicas: int
    trial: int
    namespace: str
    pool_slots: int
    sidecar: bool = True  # task pods ran the heartbeat sidecar (replicas served the task API)
    # The replicas archived every try's log (--log-store, a directory): how many were
    # archived and lost, and how long after the last run ended the last archive was.
    archive: bool = False
    archived: int = 0
    archive_lost: int = 0
    archive_drain_s: float = math.nan
    commit: str = ""  # the code measured (set when a saved run is rendered)
    status: str = "ok"  # ok, failed, timed out
    errors: list[str] = field(default_factory=list)
    tasks_total: int = 0
    tasks_succeeded: int = 0
    makespan_s: float = math.nan
    tasks_per_s: float = math.nan
    unpause_to_first_run_s: float = math.nan
    latency: dict[str, dict[str, float]] = field(default_factory=dict)
    tasks_without_pod: int = 0
    # API requests (non-watch), whole trial window (t0 to the end of the last run).
    api_window_s: float = math.nan
    api_cluster: dict[str, int] = field(default_factory=dict)
    api_sluice_server: dict[str, int] = field(default_factory=dict)
    api_sluice_executor: dict[str, int] = field(default_factory=dict)
    api_background: int = 0
    api_valid: bool = True
    # CPU seconds over the same window, by part.
    cpu_window_s: float = math.nan
    cpu: dict[str, float] = field(default_factory=dict)
    machine_busy_s: float = math.nan
    # All replicas' CPU per second in the quiet window before t0 (every DAG paused, nothing
    # to run): what the fleet costs whatever the load.
    replicas_idle_ms_per_s: float = math.nan
    restarted: list[str] = field(default_factory=list)
    heartbeats: dict[str, int] = field(default_factory=dict)
    per_replica: list[int] = field(default_factory=list)
    foreign: dict[str, Any] = field(default_factory=dict)
    namespace_delete_s: float = math.nan

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def label(self) -> str:
        return f"{'+'.join(self.shapes)} {self.dags}x{self.tasks_per_dag}"

    @property
    def scheduler_cpu_s(self) -> float:
        return self.cpu.get("scheduler replicas", math.nan)

    @property
    def scheduler_ms_per_task(self) -> float:
        """Scheduler CPU per task; as a share of a core per Job/s, it is this / 1000."""
        done = self.tasks_succeeded
        return self.scheduler_cpu_s * 1000 / done if done else math.nan

    @property
    def scheduler_marginal_ms_per_task(self) -> float:
        """Scheduler CPU per task less what the idle fleet costs over the window: the part
        that grows with tasks (a node twice as fast would halve the idle part per task,
        not this)."""
        done = self.tasks_succeeded
        idle_s = self.replicas_idle_ms_per_s / 1000 * self.cpu_window_s
        return (self.scheduler_cpu_s - idle_s) * 1000 / done if done else math.nan

    @property
    def sluice_requests_per_task(self) -> float:
        done = self.tasks_succeeded
        return sum(self.api_sluice_server.values()) / done if done and self.api_valid else math.nan

    @property
    def executor_requests_per_task(self) -> float:
        done = self.tasks_succeeded
        return sum(self.api_sluice_executor.values()) / done if done else math.nan

    @property
    def cluster_requests_per_task(self) -> float:
        done = self.tasks_succeeded
        if not done or not self.api_valid:
            return math.nan
        return (sum(self.api_cluster.values()) - self.api_background) / done
