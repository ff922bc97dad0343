"""Status flows out: a thread in each scheduler replica publishes runs to DagRun objects.

One cycle (at most every `interval`, at once again while cycles come back full;
with an `idle_interval`, only when woken, when a row it deferred comes due, or
once per `idle_interval`: see `wake`):

1. In one short transaction, take ready `status_outbox` rows (SKIP LOCKED,
   leased), and read the runs they name as they are now, with their last
   publication. A run published less than `min_interval` ago waits until that
   interval has passed (its rows are given back for then): however fast its
   tasks change, a run gets at most one status patch per `min_interval`, and
   all of its changes meanwhile are one patch.
2. Without a transaction, for each run: create its DagRun object if the
   scheduler made the run and it has none yet (owner reference to its DAG
   object), then merge-patch its status with the resourceVersion of the last
   publication as a precondition, and post the Events of what changed.
3. In a second short transaction, record each publication (compare-and-set on
   that resourceVersion) and delete the rows it covered; give back the rows of
   runs that failed, with a growing delay, or drop them if the API server
   refused them for good (refusals.py); and enqueue the deletion of the DagRun
   objects of ended runs beyond their DAG's history limit (history.py), which
   a later cycle's step 2 makes, at most `prunes_per_cycle` per cycle.

Order per object holds with any number of replicas: a patch applies only if
the object is still at the resourceVersion recorded with the last publication,
and that record is read in the same transaction as the run's state, so a patch
that applies carries a state read after every publication before it. A
conflict (another replica, or kopf writing to a user's object) re-reads the
object's version and publishes again at once.

The scheduling loop never waits for any of this: it runs in its own thread
with its own database connections, and an API server that is down or slow
only delays status (the rows wait in the outbox; nothing is lost). On start,
`resync` enqueues every run whose object may differ from the database.
"""

from __future__ import annotations

import functools
import json
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict

import structlog
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import ObjectPublication
from sluice.logs import first_line
from sluice.metrics import families
from sluice.spec.states import ACTIVE_RUN_STATES
from sluice.status import history, refusals, render, store

log = structlog.get_logger("sluice.status")

GROUP = "sluice.io"
VERSION = "v1alpha1"
PLURAL = "dagruns"
POOL = "pool"
TIMEOUT = (5, 10)
MAX_BACKOFF = 30.0
DAG_UID_TTL = 60.0
COMPONENT = "sluice-scheduler"
DROPPED = "StatusNotPublished"  # the Event's reason when a publication is dropped
DEFAULT_HISTORY_LIMIT = 100  # DagRun objects of ended runs kept per DAG (ADR 0034)
PRUNES_PER_CYCLE = 50  # DagRun objects a cycle deletes at most, and enqueues per DAG


Publication = store.Publication | None


class MissingResource(Exception):
    """The DagRun kind or the namespace is not there: say how to fix it."""

    def __init__(self, message: str, refusal: refusals.Refusal) -> None:
        super().__init__(message)
        self.refusal = refusal


class ApiDown(Exception):
    """The API server cannot be reached: the rest of the cycle waits."""


@dataclass
class Outcome:
    kind: str  # published, conflict, gone, failed, dropped; pruned (an object deleted)
    values: dict[str, Any]
    error: str = ""
    # failed: the API server's refusal (None: no answer, or one that always passes)...
    refusal: refusals.Refusal | None = None
    # ...and the object it refused, when it exists: a dropped publication's Event goes there.
    involved: dict[str, Any] | None = None


@dataclass
class Counts:
    published: int = 0
    patches: int = 0
    creates: int = 0
    events: int = 0
    conflicts: int = 0
    failures: int = 0
    deferred: int = 0
    held: int = 0  # objects whose rows waited out the object's backoff, by cycle
    dropped: int = 0  # publications refused for good (refusals.py): rows deleted
    pruned: int = 0  # DagRun objects of ended runs deleted beyond the history limit


class LoopHooks(TypedDict):
    on_change: Callable[[], None] | None
    on_replicas: Callable[[int], None] | None


def loop_hooks(publisher: StatusPublisher | None) -> LoopHooks:
    """The scheduler loop's hooks for a replica's publisher (none without one): the loop
    wakes it when the outbox may have rows, and tells it the live replicas' count. One
    place, so `sluice scheduler` and the benchmark's replica wire it alike."""
    return LoopHooks(
        on_change=None if publisher is None else publisher.wake,
        on_replicas=None if publisher is None else publisher.share,
    )


class StatusPublisher:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        api_client: Callable[[], client.ApiClient],
        *,
        clock: Callable[[], datetime],
        default_namespace: str | None,
        interval: float = 0.5,
        batch: int = 500,
        min_interval: float = 1.0,
        lease: float = 30.0,
        horizon: timedelta = timedelta(hours=24),
        pool_interval: float = 5.0,
        idle_interval: float | None = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        prunes_per_cycle: int = PRUNES_PER_CYCLE,
    ) -> None:
        self.sessions = sessions
        # Each DAG keeps the DagRun objects of its newest `history_limit` ended runs (0:
        # all); a cycle deletes at most `prunes_per_cycle` older ones (history.py).
        self.history_limit = history_limit
        self.prunes_per_cycle = prunes_per_cycle
        self.clock = clock
        self.default_namespace = default_namespace
        self.interval = interval
        self.batch = batch
        self.min_interval = min_interval
        self.lease = lease
        self.horizon = horizon
        self.pool_interval = pool_interval
        # None: a cycle every `interval`, whatever happened. Else cycles run when `wake`
        # says the outbox may have rows, when rows this publisher deferred come due, and
        # otherwise once per `idle_interval` (rows no one woke it for).
        self.idle_interval = idle_interval
        # Live replicas, as the loop last counted them (`share`): the pool sampling and
        # the idle look serve the whole fleet, so each replica's come N times rarer.
        self._replicas = 1
        self._phases = random.Random()
        self._pools_at = 0.0  # monotonic: the last pool sampling (0: at the first cycle)
        # Objects whose last publication failed: (failures in a row, when to try again).
        # The backoff is the object's, not its rows': every change to a run adds a row,
        # and a row taken for the first time would otherwise be tried within seconds
        # however long the object has been failing (a missing CRD, a refusing webhook).
        self._failing: dict[tuple[str, str], tuple[int, datetime]] = {}
        self._woken = threading.Event()
        self._next_due = float("inf")  # monotonic: the earliest row this publisher deferred
        api = api_client()
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.counts = Counts()
        self._dag_uids: dict[tuple[str, str], tuple[str | None, datetime]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._instance = socket.gethostname()

    # -- the thread -------------------------------------------------------------------

    def start(self) -> None:
        with self.sessions.begin() as session:
            store.enable(session)
        self._thread = threading.Thread(target=self._run, name="status-publisher", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._woken.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def wake(self) -> None:
        """Rows may be in the outbox (the replica's loop changed a state, or heard that
        another process did): the next cycle runs `interval` later (what else the burst
        changes is published with it), not after `idle_interval`."""
        self._woken.set()

    def share(self, replicas: int) -> None:
        """`replicas` live replicas publish: each samples the pools once per `replicas`
        pool intervals and makes its idle look once per `replicas` idle intervals (the
        fleet, about once per interval as one replica would), at a random phase of its
        own. What this replica is woken for is published as soon as before."""
        replicas = max(1, replicas)
        if replicas != self._replicas:
            self._replicas = replicas
            if self._pools_at:
                self._pools_at -= self._phases.uniform(0, self._pool_every - self.pool_interval)

    @property
    def _pool_every(self) -> float:
        return self.pool_interval * self._replicas

    def _run(self) -> None:
        pause = self.interval
        resynced = False
        while not self._stop.is_set():
            self._woken.clear()  # a wake from now on is for rows this cycle may not see
            cycle_at = time.monotonic()
            idle = False
            try:
                if not resynced:
                    resynced = True  # once: a failed resync must not stop publishing
                    self._resync_logged()
                if time.monotonic() - self._pools_at >= self._pool_every:
                    self._pools_at = time.monotonic()
                    self.publish_pools()
                full = self.run_once() >= self.batch
                pause = 0.0 if full else self.interval
                idle = not full
            except Exception as exc:  # the database or the API server; never the loop's
                log.warning("status publishing failed; trying again", error=first_line(exc))
                pause = min(max(pause * 2, 1.0), MAX_BACKOFF)
            if self._stop.wait(pause):
                return
            if idle and self.idle_interval is not None:
                until = min(
                    cycle_at + self.idle_interval * self._replicas,
                    self._pools_at + self._pool_every,
                    self._next_due,
                )
                woken = self._woken.wait(max(0.0, until - time.monotonic()))
                # A wake comes with the first change of a burst (a report, then the tasks
                # it made ready queued and claimed, a few ticks within milliseconds): one
                # interval lets the rest land, so a run gets one patch for them all, as
                # when the publisher polled every interval.
                if woken and self._stop.wait(self.interval):
                    return

    # -- one cycle ----------------------------------------------------------------------

    def run_once(self) -> int:
        """Publish what is ready; returns how many outbox rows were taken."""
        now = self.clock()
        self._next_due = float("inf")
        with self.sessions.begin() as session:
            taken = store.take(session, now, limit=self.batch, lease=self.lease)
            if not taken:
                return 0
            runs_taken = [t for t in taken if t.kind == store.RUN]
            ids = [t.dag_run_id for t in runs_taken]
            runs = store.read_runs(session, ids, self.default_namespace)
            prunes_taken = [t.dag_run_id for t in taken if t.kind == history.PRUNE]
            publications = store.read_publications(session, ids + prunes_taken)
            run_states = history.run_states(session, prunes_taken)
            objects = [t for t in taken if t.kind in (store.DAG, store.BACKFILL)]
            dags = store.read_dags(session, [t.key for t in objects if t.kind == store.DAG])
            backfills = store.read_backfills(
                session, [t.key for t in objects if t.kind == store.BACKFILL]
            )
            object_publications = store.read_object_publications(
                session, [(t.kind, t.key) for t in objects]
            )
            work: list[tuple[store.Taken, Callable[[], Outcome], Any]] = []
            finished: list[int] = []  # rows with nothing to publish
            deferred: list[tuple[list[int], datetime]] = []
            active_again: list[int] = []  # marked for deletion, but a backfill took them
            prunes = 0
            for item in taken:
                publication: Any
                job: Callable[[], Outcome] | None
                if item.kind == history.PRUNE:
                    publication = publications.get(item.dag_run_id)
                    published_at = None
                    state = run_states.get(item.dag_run_id)
                    job = None
                    if publication is None or publication.uid is None or state is None:
                        pass  # the run or its object is gone: nothing to delete
                    elif state in ACTIVE_RUN_STATES:
                        active_again.append(item.dag_run_id)
                    elif prunes >= self.prunes_per_cycle:
                        deferred.append((item.row_ids, now))  # the next cycle's
                        continue
                    else:
                        prunes += 1
                        job = functools.partial(self._prune, publication)
                elif item.kind == store.RUN:
                    publication = publications.get(item.dag_run_id)
                    run = runs.get(item.dag_run_id)
                    gone = publication is not None and publication.gone
                    published_at = publication.published_at if publication else None
                    job = (
                        None
                        if run is None or gone
                        else functools.partial(self._publish, run, publication)
                    )
                else:
                    view = (dags if item.kind == store.DAG else backfills).get(item.key)
                    seen = object_publications.get((item.kind, item.key))
                    publication = seen
                    published_at = seen.published_at if seen else None
                    job = (
                        None
                        if view is None
                        else functools.partial(self._publish_object, item.kind, view, seen)
                    )
                if job is None:
                    finished.extend(item.row_ids)  # deleted, or nowhere to publish it
                    continue
                failing = self._failing.get((item.kind, item.key))
                if failing is not None and failing[1] > now:
                    deferred.append((item.row_ids, failing[1]))
                    self.counts.held += 1
                    continue
                if published_at is not None:
                    ready_at = published_at + timedelta(seconds=self.min_interval)
                    if ready_at > now:
                        deferred.append((item.row_ids, ready_at))
                        self.counts.deferred += 1
                        continue
                work.append((item, job, publication))
            store.done(session, finished)
            store.release_each(session, deferred)
            history.keep(session, active_again)
            self._due_at(now, [when for _, when in deferred])
        outcomes: list[tuple[store.Taken, Outcome, Any]] = []
        down = ""
        for item, job, publication in work:
            if down:
                outcomes.append((item, Outcome("failed", {}, down), publication))
                continue
            try:
                outcome = self._drop_if_refused_for_good(item, job())
            except ApiDown as exc:
                down = str(exc)
                outcome = Outcome("failed", {}, down)
            outcomes.append((item, outcome, publication))
        self._record(outcomes)
        return sum(len(t.row_ids) for t in taken)

    def _record(self, outcomes: list[tuple[store.Taken, Outcome, Any]]) -> None:
        now = self.clock()
        finished: list[int] = []
        released: list[tuple[list[int], datetime]] = []
        # DAGs whose history may have grown past the limit: a run's end was published, or
        # some of its objects were deleted and older ones may be due.
        histories: set[str] = set()
        with self.sessions.begin() as session:
            for item, outcome, publication in outcomes:
                expected = None if publication is None else publication.resource_version
                if item.kind == history.PRUNE and outcome.kind in ("pruned", "gone"):
                    if publication.dag_id:
                        histories.add(publication.dag_id)
                elif outcome.kind == "published" and outcome.values.get("ended_at"):
                    histories.add(outcome.values["dag_id"])

                def record(
                    values: dict[str, Any],
                    item: store.Taken = item,
                    expected: str | None = expected,
                ) -> None:
                    if item.kind == store.RUN:
                        store.record(
                            session, item.dag_run_id, expected_version=expected, values=values
                        )
                    elif values:
                        store.record_object(
                            session, item.kind, item.key, expected_version=expected, values=values
                        )

                if outcome.kind not in ("failed", "dropped"):
                    self._failing.pop((item.kind, item.key), None)
                if outcome.kind == "pruned":
                    self.counts.pruned += 1
                    families.DAGRUN_OBJECTS_PRUNED.inc()
                    finished.extend(item.row_ids)
                elif outcome.kind in ("published", "gone"):
                    record(outcome.values)
                    finished.extend(item.row_ids)
                    if outcome.kind == "published":
                        self.counts.published += 1
                elif outcome.kind == "conflict":
                    self.counts.conflicts += 1
                    if outcome.values:
                        record(outcome.values)
                    released.append((item.row_ids, now))
                else:
                    failures = self._failures(item)
                    delay = min(2.0 ** min(failures, 5), MAX_BACKOFF)
                    # A dropped object's next rows wait out its backoff too, and are
                    # dropped at their first refusal.
                    self._failing[(item.kind, item.key)] = (
                        failures,
                        now + timedelta(seconds=delay),
                    )
                    if outcome.kind == "dropped":
                        self.counts.dropped += 1
                        cause = refusals.cause(outcome.refusal) if outcome.refusal else None
                        families.STATUS_DROPPED.labels(item.kind, cause or "refused").inc()
                        finished.extend(item.row_ids)
                        continue
                    self.counts.failures += 1
                    log.warning(
                        "could not publish a status; trying again",
                        kind=item.kind,
                        key=item.key,
                        retry_in=delay,
                        error=outcome.error,
                    )
                    released.append((item.row_ids, now + timedelta(seconds=delay)))
            store.done(session, finished)
            store.release_each(session, released)
            pruning = history.enqueue(
                session, sorted(histories), keep=self.history_limit, per_dag=PRUNES_PER_CYCLE
            )
        # Deletions just enqueued are due now: a long history is worked off a cycle at a
        # time, not one cycle per idle interval.
        self._due_at(now, [when for _, when in released] + ([now] if pruning else []))
        # An object that stopped failing by going away (a deleted run) is forgotten once
        # its backoff has long passed.
        forget = now - timedelta(seconds=10 * MAX_BACKOFF)
        for key in [k for k, (_, at) in self._failing.items() if at < forget]:
            del self._failing[key]

    def _failures(self, item: store.Taken) -> int:
        """Failures in a row of the object's publication, this one included: its rows'
        takes (another replica's failures count), or this replica's count for the object
        (its new rows, taken for the first time, carry the object's failures on)."""
        return max(item.attempts, self._failing.get((item.kind, item.key), (0, None))[0] + 1)

    def _drop_if_refused_for_good(self, item: store.Taken, outcome: Outcome) -> Outcome:
        """A publication the API server refused in a way that cannot pass (refusals.py)
        is `dropped`: its rows are deleted rather than retried for ever. Said by a Warning
        Event on the object when it exists, and in the log."""
        if outcome.kind != "failed" or outcome.refusal is None:
            return outcome
        failures = self._failures(item)
        if not refusals.drops(outcome.refusal, failures):
            return outcome
        log.warning(
            "a status publication was refused for good; dropped",
            kind=item.kind,
            key=item.key,
            failures=failures,
            cause=refusals.cause(outcome.refusal),
            error=outcome.error,
        )
        if outcome.involved is not None:
            message = (
                f"Sluice could not publish this object's status and stopped trying after"
                f" {failures} attempt(s): {outcome.error}. The database has the state (sluice"
                " dags runs); the next change is published again"
                if item.kind != history.PRUNE
                else f"Sluice could not delete this DagRun object (its DAG has"
                f" --dagrun-history-limit newer ended runs) and stopped trying after"
                f" {failures} attempt(s): {outcome.error}. It stays; its run is in the"
                " database (sluice dags runs)"
            )
            try:
                self._post_event(outcome.involved, render.EventSpec("Warning", DROPPED, message))
            except ApiDown as exc:
                log.warning("could not post an Event", reason=DROPPED, error=str(exc))
        return Outcome("dropped", {}, outcome.error, outcome.refusal, outcome.involved)

    def _due_at(self, now: datetime, times: list[datetime]) -> None:
        """Rows this publisher gave back come due then: an idle wait ends by the first."""
        if times:
            wait = (min(times) - now).total_seconds()
            self._next_due = min(self._next_due, time.monotonic() + max(0.0, wait))

    # -- pools --------------------------------------------------------------------------

    def publish_pools(self) -> int:
        """Patch each Pool object whose usage changed since it was last published (every
        `pool_interval`: a pool's counts move with every claim, so they are sampled, not
        enqueued per change). Returns how many were patched."""
        now = self.clock()
        with self.sessions.begin() as session:
            usage = store.pools_in_use(session)
            seen = store.read_object_publications(session, [(POOL, name) for name in usage])
        patched = 0
        for name, (slots, running, queued) in sorted(usage.items()):
            status = {"slots": slots, "running": running, "queued": queued}
            status["open"] = slots - running - queued
            publication = seen.get((POOL, name))
            last = publication.published_at if publication is not None else None
            if publication is not None and publication.summary == status:
                continue
            if last is not None and (now - last).total_seconds() < self.min_interval:
                continue
            values = self._publish_pool(name, status, publication)
            if values is None:
                continue
            expected = None if publication is None else publication.resource_version
            with self.sessions.begin() as session:
                store.record_object(session, POOL, name, expected_version=expected, values=values)
            patched += values["resource_version"] is not None
        return patched

    def _publish_pool(
        self, name: str, status: dict[str, Any], publication: ObjectPublication | None
    ) -> dict[str, Any] | None:
        """The publication to record (None: try again next time)."""
        where = {"namespace": "", "object_name": name, "published_at": self.clock()}
        version = publication.resource_version if publication else None
        try:
            if version is None:
                found = self._call(
                    self.custom.get_cluster_custom_object, GROUP, VERSION, "pools", name
                )
                version = found["metadata"]["resourceVersion"]
            response = self._patch_status(None, "pools", name, version, status)
        except ApiException as exc:
            if exc.status == 404:  # a pool with no object (the default one, or from the CLI)
                return {**where, "resource_version": None, "summary": status}
            if exc.status == 409:
                self.counts.conflicts += 1
                return {**where, "resource_version": None, "summary": None}
            log.warning("could not publish a pool's status", pool=name, error=_api_error(exc))
            return None
        except ApiDown as exc:
            log.warning("could not publish a pool's status", pool=name, error=str(exc))
            return None
        return {
            **where,
            "resource_version": response.get("metadata", {}).get("resourceVersion"),
            "summary": status,
        }

    # -- a DAG's or a Backfill's object -------------------------------------------------

    def _publish_object(
        self,
        kind: str,
        view: render.DagView | render.BackfillView,
        publication: ObjectPublication | None,
    ) -> Outcome:
        """Merge-patch the status of a DAG or Backfill object the operator keeps (never its
        conditions), with the same resourceVersion precondition as a run's."""
        uid: str | None = None  # a Backfill object is the one with its backfill's uid
        if isinstance(view, render.DagView):
            plural, name, status = "dags", view.dag_id, render.dag_status(view)
        else:
            plural, name, status = "backfills", view.object_name, render.backfill_status(view)
            uid = view.object_uid
        namespace = view.namespace
        where = {"namespace": namespace, "object_name": name}
        version = publication.resource_version if publication else None
        try:
            if version is None:
                current = self._get(namespace, name, plural)
                if current is None or not _same_object(current, uid):
                    return Outcome("gone", {})
                version = current["resource_version"]
            response = self._patch_status(namespace, plural, name, version, status)
        except ApiException as exc:
            if exc.status == 404:
                return Outcome("gone", {})
            if exc.status == 409:
                current = self._get(namespace, name, plural)
                if current is None or not _same_object(current, uid):
                    return Outcome("gone", {})
                return Outcome(
                    "conflict", {**where, "resource_version": current["resource_version"]}
                )
            kind = "DAG" if isinstance(view, render.DagView) else "Backfill"
            involved = {
                "apiVersion": render.API_VERSION,
                "kind": kind,
                "name": name,
                "namespace": namespace,
            }
            if uid is not None:
                involved["uid"] = uid
            return Outcome("failed", {}, _api_error(exc), refusals.Refusal.of(exc), involved)
        return Outcome(
            "published",
            {
                **where,
                "resource_version": response.get("metadata", {}).get("resourceVersion"),
                "published_at": self.clock(),
                "summary": status,
            },
        )

    # -- one run ------------------------------------------------------------------------

    def _publish(self, run: render.RunView, publication: store.Publication | None) -> Outcome:
        try:
            return self._publish_one(run, publication)
        except ApiException as exc:  # refused (RBAC, validation): this run only
            return Outcome("failed", {}, _api_error(exc), refusals.Refusal.of(exc))
        except MissingResource as exc:
            return Outcome("failed", {}, str(exc), exc.refusal)

    def _publish_one(self, run: render.RunView, publication: store.Publication | None) -> Outcome:
        namespace = publication.namespace if publication else run.namespace
        name = publication.object_name if publication else render.object_name(run)
        where = {"namespace": namespace, "object_name": name}
        version = publication.resource_version if publication else None
        generation = publication.generation if publication else None
        uid = publication.uid if publication else None
        if uid is None:
            found = self._find_or_create(run, namespace, name)
            if found is None:
                return Outcome("gone", {**where, "gone": True})
            uid, version, generation, created = found
            if not created:
                # An object this replica did not just create may have been patched since
                # this cycle read the run: record its version, and publish from a fresh
                # read (the order argument needs the version read with the state).
                values = {"uid": uid, "resource_version": version, "generation": generation}
                return Outcome("conflict", {**where, **values})
        status = render.status_of(run, generation)
        status["conditions"].insert(
            0,
            {
                "type": "Ready",
                "status": "True",
                "reason": "Triggered" if run.object_name else "Created",
                "message": f"run {run.run_id} is in the database",
                "lastTransitionTime": render.timestamp(run.created_at),
                **({"observedGeneration": generation} if generation is not None else {}),
            },
        )
        involved = {
            "apiVersion": render.API_VERSION,
            "kind": "DagRun",
            "name": name,
            "namespace": namespace,
            "uid": uid,
        }
        try:
            response = self._patch_status(namespace, PLURAL, name, version, status)
        except ApiException as exc:
            if exc.status == 404:
                return Outcome("gone", {**where, "uid": uid, "gone": True})
            if exc.status == 409:
                current = self._get(namespace, name)
                if current is None or not _same_object(current, uid):
                    # Deleted, maybe created again under its name: another object.
                    return Outcome("gone", {**where, "uid": uid, "gone": True})
                return Outcome("conflict", {**where, **current})
            return Outcome("failed", {}, _api_error(exc), refusals.Refusal.of(exc), involved)
        metadata = response.get("metadata", {})
        previous = publication.summary if publication else None
        for event in render.events_between(previous, run):
            self._post_event(involved, event)
        return Outcome(
            "published",
            {
                **where,
                "uid": uid,
                "resource_version": metadata.get("resourceVersion"),
                "generation": metadata.get("generation", generation),
                "published_at": self.clock(),
                "state": run.state,
                "summary": render.summary_of(run),
                "gone": False,
                "dag_id": run.dag_id,
                "ended_at": None
                if run.state in ACTIVE_RUN_STATES
                else (run.end_date or self.clock()),
            },
        )

    def _prune(self, publication: store.Publication) -> Outcome:
        """Delete the DagRun object of an ended run beyond its DAG's history limit, only if
        it is still the object of the recorded uid (an object created again under its
        name is another one: the precondition refuses, 409)."""
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=publication.uid))
        try:
            self._call(
                self.custom.delete_namespaced_custom_object,
                GROUP,
                VERSION,
                publication.namespace,
                PLURAL,
                publication.object_name,
                body=options,
            )
        except ApiException as exc:
            if exc.status in (404, 409):  # deleted already, or another object now
                return Outcome("gone", {})
            involved = {
                "apiVersion": render.API_VERSION,
                "kind": "DagRun",
                "name": publication.object_name,
                "namespace": publication.namespace,
                "uid": publication.uid,
            }
            return Outcome("failed", {}, _api_error(exc), refusals.Refusal.of(exc), involved)
        return Outcome("pruned", {})

    def _patch_status(
        self,
        namespace: str | None,
        plural: str,
        name: str,
        version: str | None,
        status: dict[str, Any],
    ) -> Any:
        """Merge-patch an object's status, refused (409) unless the object is still at
        `version` (None: a cluster-scoped object's namespace)."""
        self.counts.patches += 1
        body = {"metadata": {"resourceVersion": version}, "status": status}
        where = (
            (self.custom.patch_cluster_custom_object_status, GROUP, VERSION, plural, name, body)
            if namespace is None
            else (
                self.custom.patch_namespaced_custom_object_status,
                GROUP,
                VERSION,
                namespace,
                plural,
                name,
                body,
            )
        )
        return self._call(*where, _content_type="application/merge-patch+json")

    def _find_or_create(
        self, run: render.RunView, namespace: str, name: str
    ) -> tuple[str, str, int | None, bool] | None:
        """(uid, resourceVersion, generation, created here) of the run's object, created if
        the scheduler made the run; None if a user's object is gone (an object under its
        name with another uid is another object: the one that triggered the run was
        deleted)."""
        if not run.object_name:
            body = render.new_object(run, self._dag_uid(namespace, run.dag_id))
            try:
                self.counts.creates += 1
                created = self._call(
                    self.custom.create_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    body,
                )
                meta = created["metadata"]
                return meta["uid"], meta["resourceVersion"], meta.get("generation"), True
            except ApiException as exc:
                if exc.status == 404:
                    raise MissingResource(
                        f"cannot create DagRun {namespace}/{name}: {_api_error(exc)}; is the"
                        " DagRun CRD installed (kubectl apply -f crds/) and the namespace there?"
                        " (--no-publish-status turns publishing off)",
                        refusals.Refusal.of(exc),
                    ) from exc
                if exc.status != 409:
                    raise
        current = self._get(namespace, name)
        if current is None or not _same_object(current, run.object_uid):
            return None
        return current["uid"], current["resource_version"], current["generation"], False

    def _get(self, namespace: str, name: str, plural: str = PLURAL) -> dict[str, Any] | None:
        try:
            found = self._call(
                self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, plural, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        meta = found["metadata"]
        return {
            "uid": meta["uid"],
            "resource_version": meta["resourceVersion"],
            "generation": meta.get("generation"),
        }

    def _dag_uid(self, namespace: str, dag_id: str) -> str | None:
        """The DAG object's uid, for the owner reference (None: the DAG came from a file)."""
        now = self.clock()
        cached = self._dag_uids.get((namespace, dag_id))
        if cached is not None and (now - cached[1]).total_seconds() < DAG_UID_TTL:
            return cached[0]
        try:
            found = self._call(
                self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, "dags", dag_id
            )
            uid: str | None = found["metadata"]["uid"]
        except ApiException as exc:
            if exc.status != 404:
                raise
            uid = None
        self._dag_uids[(namespace, dag_id)] = (uid, now)
        return uid

    def _post_event(self, involved: dict[str, Any], event: render.EventSpec) -> None:
        now = self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {
                "generateName": f"{involved['name']}.",
                "namespace": involved["namespace"],
            },
            "involvedObject": involved,
            "reason": event.reason,
            "message": event.message,
            "type": event.type,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": COMPONENT, "host": self._instance},
            "reportingComponent": f"{GROUP}/scheduler",
            "reportingInstance": self._instance,
        }
        try:
            self.counts.events += 1
            self._call(self.core.create_namespaced_event, involved["namespace"], body)
        except ApiException as exc:  # an Event is best effort: the status is the record
            log.warning("could not post an Event", reason=event.reason, error=_api_error(exc))

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            response = method(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiDown(f"{type(exc).__name__}: {str(exc)[:200]}") from exc
        except ApiException as exc:
            if exc.status is not None and (exc.status >= 500 or exc.status == 429):
                raise ApiDown(_api_error(exc)) from exc
            raise
        return json.loads(response.data)

    # -- start-up -----------------------------------------------------------------------

    def _resync_logged(self) -> None:
        try:
            self.resync()
        except Exception as exc:
            log.warning("status resync failed; publishing goes on", error=first_line(exc))

    def resync(self) -> int:
        """Enqueue every run whose object may not show the database's state: never
        published, last published in another state, or whose object says otherwise; and
        the deletion of every DAG's objects beyond the history limit (a limit lowered, or
        set for the first time)."""
        now = self.clock()
        with self.sessions.begin() as session:
            enqueued = store.resync(session, now, horizon=self.horizon)
            published = store.published_recently(session, now - self.horizon)
            pruning = history.enqueue(
                session,
                history.dags_with_history(session) if self.history_limit else [],
                keep=self.history_limit,
                per_dag=PRUNES_PER_CYCLE,
            )
        by_namespace: dict[str, dict[str, tuple[int, str]]] = {}
        for run_id, namespace, name, state in published:
            by_namespace.setdefault(namespace, {})[name] = (run_id, state)
        stale: list[int] = []
        for namespace, expected in by_namespace.items():
            try:
                listed = self._call(
                    self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL
                )
            except ApiException as exc:
                log.warning(
                    "status resync: cannot list DagRuns", namespace=namespace, error=_api_error(exc)
                )
                continue
            shown = {
                item["metadata"]["name"]: (item.get("status") or {}).get("state")
                for item in listed.get("items", [])
            }
            stale.extend(
                run_id
                for name, (run_id, state) in expected.items()
                if name in shown and shown[name] != state
            )
        if stale:
            with self.sessions.begin() as session:
                store.enqueue(session, stale)
        log.info(
            "status resync",
            enqueued=enqueued + len(stale),
            objects_behind=len(stale),
            objects_to_prune=pruning,
        )
        return enqueued + len(stale)


def _same_object(current: dict[str, Any], uid: str | None) -> bool:
    """Is the object read by name the one with `uid`? (None: no uid to hold it to.)"""
    return uid is None or current["uid"] == uid


def _api_error(exc: ApiException) -> str:
    try:
        message = json.loads(exc.body or "{}").get("message") or exc.reason
    except (ValueError, AttributeError):
        message = exc.reason
    return f"{exc.status} {message}"[:300]
