"""Jobs and pods of Sluice's tries, kept current by one watch per kind per replica.

Each kind is LISTed once, then WATCHed from the list's resourceVersion with
bookmarks, resuming from the last version seen when the server ends a watch
(every `WATCH_SECONDS`). `410 Gone` (history compacted, the API server
restarted) means LIST again and replace the cache: the objects' current state
is what the executor judges, so a relist loses no ended try. Any other error
marks the cache unsynced (`synced` is False: the executor then says it cannot
tell, and no try is declared a zombie on that replica's word) and reconnects
with backoff. Events may repeat or come out of a relist; the cache keeps the
newest object per name, so they are idempotent. The cache also notes which
Jobs changed (their own object or one of their pods), so the executor judges
only those tries again (`take_touched`).

With a `replica`, the watches select only that replica's tries (the
`sluice.io/replica` label), so a replica parses the events of the tries it
reports on, not every replica's. A Job or pod that leaves the selection
because another replica adopted it (moved the label onto itself) arrives as a
DELETED event carrying the new label: the cache forgets it and notes its Job
as handed over (`take_handed_over`), which is not the Job being deleted.

A third watch, on the namespace's `FailedCreate` Events of Jobs, sees a
Job whose pod the API server refused (Pod Security admission, a missing
ServiceAccount, a LimitRange): the Job controller keeps no condition for that,
only the Event it records at each attempt. Events carry no labels to select
on, so every replica sees every such Event of the namespace (they are rare,
and the API server drops them after an hour). This watch is best-effort: the
cache counts as synced on the Job and pod watches alone, so a replica without
the right to list Events still judges its tries (a refused pod then fails its
try at the pod start timeout).

No per-task polling: the only steady API traffic is the watches.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import structlog
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from sluice.executors.kubernetes import names

log = structlog.get_logger("sluice.executors.kubernetes")

Key = tuple[int, int]
WATCH_SECONDS = 15  # the server ends each watch after this; we resume from the last version
# A watch that sends nothing (no event, no bookmark, no end) for this long is dead. An
# API server shutting down held its watches open for a minute and sent nothing: the
# cache looked synced while pods ended unseen, and a replica killed them as silent (the
# cluster chaos run, issue 29). Kept under the chaos run's kill threshold (30 s).
WATCH_READ_TIMEOUT = WATCH_SECONDS + 10
LIST_READ_TIMEOUT = 90
MAX_BACKOFF = 10.0
# The Events the third watch selects: a Job's pod that could not be created.
FAILED_CREATE_SELECTOR = "involvedObject.kind=Job,reason=FailedCreate"
# The kinds whose watches decide whether the cache is synced (Events are best-effort).
ESSENTIAL = ("jobs", "pods")


def try_key(obj: dict[str, Any]) -> Key | None:
    labels = obj.get("metadata", {}).get("labels") or {}
    try:
        return int(labels[names.TI_LABEL]), int(labels[names.TRY_LABEL])
    except (KeyError, ValueError):
        return None


class _Kind:
    """One watched kind: its objects by name, and (pods, Events) by Job."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.by_name: dict[str, dict[str, Any]] = {}
        # Pods and Events: the names of each Job's, so a try's pod is found without a scan
        # (a namespace keeps every finished try's pod for ttlSecondsAfterFinished).
        self.by_job: dict[str, set[str]] = {}
        self.synced = False
        self.resource_version: str | None = None
        self.relists = 0
        self.relisted_at: float | None = None  # time.monotonic() of the last LIST
        self.gone = 0  # 410s: history compacted or the API server restarted
        self.errors = 0


class TryCache:
    """The Jobs and pods labelled `sluice.io/ti` in one namespace, and its Jobs'
    `FailedCreate` Events, from three watches."""

    def __init__(
        self,
        api_factory: Callable[[], client.ApiClient],
        namespace: str,
        *,
        replica: str | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._api_factory = api_factory
        self.namespace = namespace
        self.replica = replica
        self.selector = names.SELECTOR if replica is None else names.replica_selector(replica)
        self._on_change = on_change
        self._lock = threading.Lock()
        self._kinds = {kind: _Kind(kind) for kind in ("jobs", "pods", "events")}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # The Jobs whose Job or pods changed since the last `take_touched`; `_everything`
        # after a relist, when any may have (the cache was replaced).
        self._touched: set[str] = set()
        self._everything = True
        # The Jobs whose Job or pod another replica took over since the last call.
        self._handed_over: set[str] = set()

    # -- reading ----------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        with self._lock:
            return all(self._kinds[kind].synced for kind in ESSENTIAL)

    def relisted_within(self, seconds: float) -> bool:
        """Did a watch of this cache LIST again less than `seconds` ago (after an error,
        a 410)? Then its objects are what kubelets reported before the outage: a pod that
        ended meanwhile may still look running until its kubelet reports again."""
        now = time.monotonic()
        with self._lock:
            return any(
                self._kinds[kind].relisted_at is not None
                and now - self._kinds[kind].relisted_at < seconds  # type: ignore[operator]
                for kind in ESSENTIAL
            )

    def job(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._kinds["jobs"].by_name.get(name)

    def newest_pod(self, job_name: str) -> dict[str, Any] | None:
        with self._lock:
            state = self._kinds["pods"]
            pods = [state.by_name[name] for name in state.by_job.get(job_name, ())]
        return max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), default=None)

    def failed_create(self, job: dict[str, Any] | None) -> str | None:
        """The message of the newest `FailedCreate` Event of this Job (the API server
        refused its pod), or None."""
        if job is None:
            return None
        name, uid = job["metadata"]["name"], job["metadata"].get("uid")
        with self._lock:
            state = self._kinds["events"]
            events = [state.by_name[n] for n in state.by_job.get(name, ())]
        mine = [e for e in events if uid is None or e["involvedObject"].get("uid") in (None, uid)]
        newest = max(mine, key=_event_time, default=None)
        return None if newest is None else str(newest.get("message") or "")

    def take_touched(self) -> set[str] | None:
        """The names of the Jobs whose Job or pods changed since the last call; None when
        any may have (a relist replaced the cache). Take it before reading the objects:
        a change made after the call is in the next answer."""
        with self._lock:
            touched, self._touched = self._touched, set()
            everything, self._everything = self._everything, False
        return None if everything else touched

    def take_handed_over(self) -> set[str]:
        """The names of the Jobs another replica adopted since the last call (their Job or
        a pod left this replica's selection with another replica's label on it)."""
        with self._lock:
            handed, self._handed_over = self._handed_over, set()
        return handed

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                f"{k.kind}_{what}": value
                for k in self._kinds.values()
                for what, value in (
                    ("cached", len(k.by_name)),
                    ("relists", k.relists),
                    ("gone", k.gone),
                    ("errors", k.errors),
                )
            }

    # -- writing (from the executor's own API responses) ----------------------------

    def put_job(self, obj: dict[str, Any]) -> None:
        """A Job this replica just created or read: known before its watch event arrives."""
        with self._lock:
            self._store(self._kinds["jobs"], obj)

    def put_pod(self, obj: dict[str, Any]) -> None:
        """A pod this replica just relabelled (adopted): known before its watch event."""
        with self._lock:
            self._store(self._kinds["pods"], obj)

    # -- the watches ------------------------------------------------------------------

    def start(self) -> None:
        for kind in self._kinds:
            thread = threading.Thread(
                target=self._run, args=(kind,), name=f"sluice-watch-{kind}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.synced:
                return True
            time.sleep(0.05)
        return self.synced

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=0.5)  # a watch blocked in a read ends with the process

    def force_relist(self, kind: str) -> None:
        """Forget the resume point (as a 410 does); the next watch cycle relists."""
        with self._lock:
            self._kinds[kind].resource_version = None

    def _run(self, kind: str) -> None:
        api = self._api_factory()
        state = self._kinds[kind]
        backoff = 0.2
        while not self._stop.is_set():
            try:
                if state.resource_version is None:
                    self._relist(api, state)
                for event in self._watch(api, state):
                    self._apply(state, event)
                    backoff = 0.2
                    if self._stop.is_set():
                        return
            except ApiException as exc:
                if exc.status == 410:
                    self._gone(state)
                    continue
                self._failed(state, exc)
            except Exception as exc:  # connection refused/reset, read timeout, bad JSON
                self._failed(state, exc)
            else:
                continue  # the server ended the watch: resume from the last version
            if self._stop.wait(backoff):
                return
            backoff = min(backoff * 2, MAX_BACKOFF)

    def _list_fn(self, api: client.ApiClient, kind: str) -> Callable[..., Any]:
        if kind == "jobs":
            return client.BatchV1Api(api).list_namespaced_job
        if kind == "events":
            return client.CoreV1Api(api).list_namespaced_event
        return client.CoreV1Api(api).list_namespaced_pod

    def _selection(self, kind: str) -> dict[str, str]:
        if kind == "events":
            return {"field_selector": FAILED_CREATE_SELECTOR}
        return {"label_selector": self.selector}

    def _relist(self, api: client.ApiClient, state: _Kind) -> None:
        response = self._list_fn(api, state.kind)(
            self.namespace,
            **self._selection(state.kind),
            _preload_content=False,
            _request_timeout=(10, LIST_READ_TIMEOUT),
        )
        body = json.loads(response.data)
        items = body.get("items") or []
        with self._lock:
            state.by_name = {}
            state.by_job = {}
            for item in items:
                self._store(state, item)
            state.resource_version = body["metadata"]["resourceVersion"]
            state.synced = True
            state.relists += 1
            state.relisted_at = time.monotonic()
            self._everything = True
        log.debug("relisted", kind=state.kind, objects=len(items))
        self._changed()

    def _watch(self, api: client.ApiClient, state: _Kind) -> Iterator[dict[str, Any]]:
        """The events of one WATCH request, as dicts. (The client's `Watch.stream` cannot
        hand ERROR events over undeserialized, and deserializing every event into model
        classes costs more than judging it.)"""
        response: Any = self._list_fn(api, state.kind)(
            self.namespace,
            **self._selection(state.kind),
            resource_version=state.resource_version,
            allow_watch_bookmarks=True,
            watch=True,
            timeout_seconds=WATCH_SECONDS,
            _preload_content=False,
            _request_timeout=(10, WATCH_READ_TIMEOUT),
        )
        try:
            status = getattr(response, "status", 200)
            if not 200 <= status < 300:
                raise ApiException(status=status, reason=str(response.data[:300]))
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                if line:
                    yield json.loads(line)
        finally:
            response.close()
            response.release_conn()

    def _apply(self, state: _Kind, event: dict[str, Any]) -> None:
        kind = event.get("type")
        raw = event.get("object") or {}
        if kind == "ERROR":
            code = raw.get("code")
            raise ApiException(status=code, reason=str(raw.get("message", "watch error")))
        version = (raw.get("metadata") or {}).get("resourceVersion")
        with self._lock:
            if kind == "DELETED":
                self._forget(state, raw["metadata"]["name"])
                if self._taken_over(raw):
                    job = raw["metadata"]["name"] if state.kind == "jobs" else _job_of(raw)
                    if job is not None:
                        self._handed_over.add(job)
            elif kind in ("ADDED", "MODIFIED"):
                self._store(state, raw)
            if version:
                state.resource_version = version
            state.synced = True
        if kind != "BOOKMARK":
            self._changed()

    def _store(self, state: _Kind, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        old = state.by_name.get(name)
        if old is not None and _newer(old, obj):
            return  # an older copy (our create response after a watch event): keep the newer
        if old is not None:
            self._forget(state, name)
        state.by_name[name] = obj
        job = name if state.kind == "jobs" else _job_of(obj)
        if job is not None:
            self._touched.add(job)
            if state.kind != "jobs":
                state.by_job.setdefault(job, set()).add(name)

    def _forget(self, state: _Kind, name: str) -> None:
        old = state.by_name.pop(name, None)
        if old is not None and state.kind == "jobs":
            self._touched.add(name)
        job = _job_of(old) if old is not None and state.kind != "jobs" else None
        if job is not None:
            self._touched.add(job)
            names = state.by_job.get(job)
            if names is not None:
                names.discard(name)
                if not names:
                    del state.by_job[job]

    def _taken_over(self, obj: dict[str, Any]) -> bool:
        """Does this object carry another replica's label (it left the selection because
        that replica adopted its try, not because it was deleted)?"""
        if self.replica is None:
            return False
        labels = obj.get("metadata", {}).get("labels") or {}
        owner = labels.get(names.REPLICA_LABEL)
        return owner is not None and owner != self.replica

    def _gone(self, state: _Kind) -> None:
        log.info("watch history gone (410): relisting", kind=state.kind)
        with self._lock:
            state.resource_version = None
            state.gone += 1

    def _failed(self, state: _Kind, exc: Exception) -> None:
        with self._lock:
            # The first failure after a sync, or ever (a watch the replica has no right
            # to: the Events of a namespace whose Role predates them).
            first = state.synced or state.errors == 0
            state.synced = False
            state.resource_version = None  # relist on reconnect: nothing missed is lost
            state.errors += 1
        if first:
            log.warning("watch lost: reconnecting", kind=state.kind, error=str(exc)[:200])

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()


def _job_of(obj: dict[str, Any]) -> str | None:
    """The name of the Job a pod belongs to (the Job controller's labels), or an Event is
    about."""
    regarding = obj.get("involvedObject")
    if regarding is not None:
        return str(regarding["name"]) if regarding.get("kind") == "Job" else None
    labels = obj.get("metadata", {}).get("labels") or {}
    job = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
    return str(job) if job else None


def _event_time(event: dict[str, Any]) -> str:
    """When an Event last happened, as a sortable string (RFC 3339 times sort as text)."""
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("metadata", {}).get("creationTimestamp")
        or ""
    )


def _newer(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Is `a` a newer copy of the same object than `b`? (same uid, higher resourceVersion)"""
    if a["metadata"].get("uid") != b["metadata"].get("uid"):
        return False
    try:
        return int(a["metadata"]["resourceVersion"]) > int(b["metadata"]["resourceVersion"])
    except (KeyError, ValueError):
        return False
