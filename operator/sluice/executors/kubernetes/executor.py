"""The Job executor: the `Executor` protocol on Kubernetes Jobs (ADR 0013, 0032).

- Where: a try's Job runs in its DAG's namespace (`TaskLaunch.namespace`), a
  DAG without one in the default namespace (`KubernetesSettings.namespace`),
  and every Job in `job_namespace` when that pins them. A try is known by
  (namespace, Job name) everywhere: its external id is `<namespace>/<name>`
  (an id without a namespace, recorded before namespaces, means the pinned or
  default namespace), and each namespace has its own watches (`namespaces`).
- `start` creates one Job per try (`manifest.build_job`). A Job that already
  exists under the try's deterministic name is the same try (a replica died
  between creating it and recording it): it is adopted, never started twice.
  An API error that may pass (5xx, 429, a refused connection) is retried at
  the next poll until the pod start timeout, when a create that never got a
  clear answer looks for its Job before the try fails (it may exist: ADR
  0033); any other refusal fails the try with the API server's message. So
  does a pod the API server refuses once the Job exists (Pod Security
  admission: the Job controller's `FailedCreate` Event), at once
  (`outcome.judge`).
- `poll` judges each try this replica owns from the watch cache
  (`outcome.judge`): ended tries become `TaskEvent`s; tries whose pod could
  not start within the pod start timeout fail with the reason (and their Job
  is deleted); nothing is read from the API server per task. A verdict
  depends only on the Job, its pod and, for a try still starting, whether its
  pod start timeout has passed (or, once it runs, whether its execution
  timeout, counted from its main container's start, has); so a try is judged
  again only when its Job or pod changed (`TryCache.take_touched`) or one of
  those timeouts comes, not on every poll. A verdict that deletes the Job
  deletes only the version judged (ADR 0033).
- Each replica watches only its own tries: every Job it creates, and its
  pod, carries `sluice.io/replica` with the replica's watch identity (new at
  every start), and its watches of each namespace select on it. So a replica parses the
  events of the tries it reports on, not every replica's.
- `inspect` answers "alive" while a try's pod starts or runs, "gone" with the
  outcome if it ended, "gone" with the evidence if its Job or pod vanished,
  and "unreachable" when it cannot look (its namespace's watches are not
  synced, or the reads fail: then no try is a zombie on this replica's
  word): from the cache for this replica's tries, and for another
  replica's (a dead one's, which the zombie sweep asks about) by reading the
  Job and listing its pods, two requests per try, once.
- `adopt` moves the try into this replica's watches: it patches the label on
  the Job and on its pods (a dead replica's tries only; rare), only once the
  database has confirmed after reading them that this replica owns the try,
  and each on the version read (ADR 0033); it judges the try only once they
  are moved. The old owner, if it still runs, sees them leave its selection
  with another replica's label and drops them: handed over, not deleted.
  `release` only changes what this replica reports on; ownership lives in
  the database. `kill` deletes the Job (foreground: its pod goes first), by
  the external id it is given when the try is not in this replica's table.
  `shutdown` stops the watches and deletes nothing: tries outlive replicas.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from sluice.executors.base import Inspection, TaskEvent, TaskLaunch
from sluice.executors.kubernetes import names
from sluice.executors.kubernetes.manifest import JobSettings, PodTemplateError, build_job
from sluice.executors.kubernetes.namespaces import RESYNC_SETTLE, Scope, Watches
from sluice.executors.kubernetes.outcome import Verdict, job_finished, judge, k8s_time
from sluice.executors.kubernetes.watch import TryCache
from sluice.spec.states import TaskState

log = structlog.get_logger("sluice.executors.kubernetes")
# After a read of another replica's try failed, the sweep's next reads answer "unreachable"
# at once for this long: a blackholed API server costs one timeout per sweep, not one per try
# (the sweep reads inside a database transaction).
READ_BACKOFF = 10.0

Key = tuple[int, int]
TokenIssuer = Callable[[int, int, float], str]


@dataclass(frozen=True)
class KubernetesSettings:
    # The default namespace: Jobs of DAGs registered without one (the CLI, standalone),
    # and their DagRun objects.
    namespace: str
    # The Sluice image: the heartbeat sidecar of every task pod runs it.
    sluice_image: str
    # Where task pods reach the task API; None: no sidecar, no pod heartbeats.
    task_api_url: str | None = None
    service_account: str | None = None
    pod_start_timeout: float = 300.0
    heartbeat_interval: float = 10.0
    ttl_seconds_after_finished: int = 3600
    image_pull_policy: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    # Every Job in this namespace, whatever its DAG's (a single-namespace install); None:
    # each in its DAG's namespace.
    job_namespace: str | None = None

    def job_settings(self) -> JobSettings:
        return JobSettings(
            namespace=self.namespace,
            sidecar_image=self.sluice_image,
            task_api_url=self.task_api_url,
            heartbeat_interval=self.heartbeat_interval,
            service_account=self.service_account,
            ttl_seconds_after_finished=self.ttl_seconds_after_finished,
            image_pull_policy=self.image_pull_policy,
            pod_start_timeout=self.pod_start_timeout,
        )


@dataclass
class _Try:
    key: Key
    namespace: str
    job_name: str
    started: datetime  # when this replica created or adopted it (pod start timeout)
    skip_on_exit_code: frozenset[int]
    # The task's execution timeout in seconds, counted from its main container's start.
    timeout: float | None = None
    pending_body: dict[str, Any] | None = None  # a create to retry
    # A create that got no clear answer (a timeout, a 5xx): the Job may exist all the same,
    # so it is looked for before the try fails.
    unanswered: bool = False
    last_error: str | None = None
    blind_at_start: float = 0.0  # its namespace's blind seconds when this replica took it
    # Judged since its Job and pod last changed; and when its verdict can next change with
    # time alone (its pod start timeout, or its execution timeout once it runs).
    judged: bool = False
    late_at: datetime | None = None
    # Adopted: its Job and pods carried another replica's label. `relabel` while they
    # still may (not in this replica's watches yet: not judged until they are moved).
    adopted: bool = False
    relabel: bool = False
    # The move under way (`_relabel`): the objects as read, and when.
    move: _Move | None = None
    # The latest time.monotonic() at or after which the database confirmed that this
    # replica owns the try (`heartbeats_recorded`).
    owned_at: float | None = None


@dataclass
class _Move:
    """A try's Job and pods as read for a move into this replica's watches: each is patched
    only if it has not changed since (its resourceVersion a precondition), and only once the
    database has confirmed after `read_at` (time.monotonic()) that this replica owns the try."""

    job: dict[str, Any] | None
    pods: list[dict[str, Any]]
    read_at: float


@dataclass
class ApiCounts:
    """API requests this executor made (the watches excluded), by verb."""

    by_verb: dict[str, int] = field(default_factory=dict)

    def add(self, verb: str) -> None:
        self.by_verb[verb] = self.by_verb.get(verb, 0) + 1


class JsonApiClient(client.ApiClient):
    """The client for the bodies Sluice sends: plain JSON it built itself (dicts and lists
    of strings, numbers, booleans and None), which go out as they are.

    The generated client walks and copies every value of every body and parameter first
    (`sanitize_for_serialization`, for its model classes and datetimes): for a Job or a
    run's status that costs more than the request itself. A model object (what a typed
    method makes of its body) still takes the client's own conversion, all the way down.
    """

    def sanitize_for_serialization(self, obj: Any) -> Any:
        if type(obj) is dict or type(obj) is list:
            return obj
        return _STOCK.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]


# The generated conversion, whose recursion stays its own (no connection pool: it is only
# asked to convert).
_STOCK = client.ApiClient.__new__(client.ApiClient)


def api_client_factory(settings: KubernetesSettings) -> Callable[[], client.ApiClient]:
    """A function that makes a new ApiClient per call (one per thread: they are not shared)."""
    return client_factory(settings.kubeconfig, settings.context)


def client_factory(
    kubeconfig: str | None, context: str | None = None
) -> Callable[[], client.ApiClient]:
    """The same from a kubeconfig file (None: in-cluster when in a pod, else $KUBECONFIG)."""
    configuration = client.Configuration()
    if kubeconfig is None and config.incluster_config.SERVICE_HOST_ENV_NAME in os.environ:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    return lambda: JsonApiClient(configuration)


class KubernetesExecutor:
    name = "kubernetes"

    def __init__(
        self,
        settings: KubernetesSettings,
        *,
        tokens: TokenIssuer | None = None,
        api_factory: Callable[[], client.ApiClient] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sync_timeout: float = 30.0,
        replica: str | None = None,
    ) -> None:
        self.settings = settings
        # This replica's watch identity: on every Job it creates or adopts, and its pods.
        self.replica = replica or names.new_replica_id()
        self._job_settings = replace(settings.job_settings(), replica=self.replica)
        # With a task API, heartbeats come from the task pods' sidecars, never from this
        # process; without one (no sidecar), the scheduler heartbeats the tries it watches.
        self.pods_heartbeat = settings.task_api_url is not None
        self._tokens = tokens
        self._clock = clock
        factory = api_factory or api_client_factory(settings)
        api = factory()
        self._batch = client.BatchV1Api(api)
        self._core = client.CoreV1Api(api)
        self._custom = client.CustomObjectsApi(api)
        self.watches = Watches(factory, self.replica)
        self._tries: dict[Key, _Try] = {}
        self._events: list[TaskEvent] = []
        self._to_delete: dict[tuple[str, str], str] = {}  # (namespace, Job name) -> why
        self._reads_blocked_until: datetime | None = None
        self.api = ApiCounts()
        # A pinned namespace is watched from the start; the namespaces of DAGs from the
        # first try there (this replica may have no rights in the others it could serve).
        if settings.job_namespace is not None:
            pinned = self.watches.scope(settings.job_namespace)
            if not pinned.cache.wait_synced(sync_timeout):
                log.warning(
                    "the Job and pod watches have not synced yet; tries are judged once they do",
                    namespace=pinned.namespace,
                )

    @property
    def cache(self) -> TryCache:
        """The pinned (else the default) namespace's cache, its watches started if not yet."""
        return self.watches.scope(self.settings.job_namespace or self.settings.namespace).cache

    def namespace_of(self, launch: TaskLaunch) -> str:
        """Where a try's Job runs: the pinned namespace, else its DAG's, else the default."""
        return self.settings.job_namespace or launch.namespace or self.settings.namespace

    def locate(self, external_id: str) -> tuple[str, str]:
        """(namespace, Job name) of a try from its external id (`<namespace>/<name>`; an id
        without a namespace, recorded before Jobs ran in their DAG's, is the pinned or
        default namespace's)."""
        namespace, _, name = external_id.rpartition("/")
        return namespace or self.settings.job_namespace or self.settings.namespace, name

    # -- starting -----------------------------------------------------------------------

    def planned_external_id(self, launch: TaskLaunch) -> str:
        """The try's namespace and Job name, known before it is created (recorded when the
        try is claimed)."""
        name = names.job_name(launch.dag_id, launch.run_id, launch.task_id, launch.try_number)
        return job_external_id(self.namespace_of(launch), name)

    def start(self, launches: Sequence[TaskLaunch]) -> None:
        for launch in launches:
            if launch.key in self._tries:
                continue
            timeout = launch.execution_timeout
            try:
                token = (
                    self._tokens(
                        launch.ti_id, launch.try_number, _token_life(timeout, self.settings)
                    )
                    if self._tokens is not None and self.settings.task_api_url is not None
                    else None
                )
                namespace = self.namespace_of(launch)
                body = build_job(
                    launch, replace(self._job_settings, namespace=namespace), token=token
                )
            except PodTemplateError as exc:
                self._fail(launch.key, f"the Job cannot be built: {exc}")
                continue
            entry = _Try(
                key=launch.key,
                namespace=namespace,
                job_name=body["metadata"]["name"],
                started=self._clock(),
                blind_at_start=self._blind_total(namespace),
                skip_on_exit_code=launch.skip_on_exit_code,
                timeout=None if timeout is None else timeout.total_seconds(),
                pending_body=body,
            )
            self._tries[launch.key] = entry
            self._create(entry)

    def _create(self, entry: _Try) -> None:
        body = entry.pending_body
        assert body is not None
        try:
            self.api.add("create")
            # POST /apis/batch/v1/namespaces/NS/jobs, the body as built: the typed
            # `create_namespaced_job` first validates it into the client's model classes
            # and converts it back, which costs twice what the request does.
            created: Any = self._custom.create_namespaced_custom_object(
                "batch",
                "v1",
                entry.namespace,
                "jobs",
                body,
                _preload_content=False,
                _request_timeout=(10, 30),
            )
            self._cache(entry).put_job(json.loads(created.data))
            entry.pending_body = None
            return
        except ApiException as exc:
            if exc.status == 409:
                self._adopt_existing(entry)
                return
            if _worth_retrying(exc):
                entry.last_error = _api_error(exc)
                # A 5xx may come after the API server stored the Job (a timeout behind it).
                entry.unanswered = entry.unanswered or (exc.status or 0) >= 500
                return  # retried at the next poll, until the pod start timeout
            entry.pending_body = None
            self._tries.pop(entry.key, None)
            self._fail(
                entry.key,
                f"the API server refused Job {entry.namespace}/{entry.job_name}: {_api_error(exc)}",
            )
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            # A timed-out or broken request may have been carried out all the same.
            entry.last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            entry.unanswered = True

    def _adopt_existing(self, entry: _Try) -> bool | None:
        """Read the try's Job by its name (a create found it there, or never got a clear
        answer). If it is this try's, it is watched from now on (moved into this replica's
        watches first, as its owner only, if another replica's label is on it); another
        try's fails this one. True: there was a Job; False: there is none; None: the API
        server could not say (asked again at the next poll)."""
        self.api.add("get")
        try:
            response: Any = self._batch.read_namespaced_job(
                entry.job_name, entry.namespace, _preload_content=False, _request_timeout=(5, 10)
            )
            found = json.loads(response.data)
        except ApiException as exc:
            if exc.status == 404:
                return False  # not (or no longer) there
            entry.last_error = _api_error(exc)
            return None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            entry.last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            return None
        annotations = found["metadata"].get("annotations") or {}
        if annotations.get(names.LABEL_PREFIX + "ti") == str(entry.key[0]) and annotations.get(
            names.LABEL_PREFIX + "try"
        ) == str(entry.key[1]):
            log.info(
                "job already exists: adopting it",
                namespace=entry.namespace,
                job=entry.job_name,
                ti=entry.key[0],
            )
            entry.pending_body = None
            if self._ours(found):
                self._cache(entry).put_job(found)
            else:
                # Another replica's label: it adopted the try while this one was taken for
                # dead (then this replica's fence releases it), or this replica claimed it
                # again after another's late create. Only the database can tell which.
                entry.adopted = entry.relabel = True
                self._relabel(entry)
            return True
        self._tries.pop(entry.key, None)
        self._fail(
            entry.key,
            f"Job {entry.job_name} already exists for another try "
            f"(ti {annotations.get(names.LABEL_PREFIX + 'ti')}, "
            f"try {annotations.get(names.LABEL_PREFIX + 'try')}); delete it and clear the task",
        )
        return True

    def _cache(self, entry: _Try) -> TryCache:
        return self.watches.scope(entry.namespace).cache

    def _blind_total(self, namespace: str) -> float:
        """The namespace's blind seconds so far; its watches start with its first Job (a
        namespace whose Jobs this replica may not create is never watched)."""
        scope = self.watches.get(namespace)
        return 0.0 if scope is None else scope.blind_total

    def _fail(self, key: Key, reason: str) -> None:
        log.warning("try failed to start", ti=key[0], try_number=key[1], reason=reason)
        self._events.append(TaskEvent(key[0], key[1], TaskState.FAILED, reason=reason))

    # -- watching -----------------------------------------------------------------------

    def poll(self) -> list[TaskEvent]:
        now = self._clock()
        for (namespace, name), why in list(self._to_delete.items()):
            if self._delete(namespace, name, why):
                del self._to_delete[(namespace, name)]
        handed = {
            (scope.namespace, name)
            for scope in self.watches.all()
            for name in scope.cache.take_handed_over()
        }
        for entry in list(self._tries.values()):
            if (entry.namespace, entry.job_name) in handed:
                # Another replica adopted it (this one was taken for dead): it reports now.
                log.info(
                    "try handed over to another replica",
                    namespace=entry.namespace,
                    job=entry.job_name,
                )
                del self._tries[entry.key]
                continue
            if entry.relabel:
                self._relabel(entry)
            elif entry.pending_body is not None:
                if (now - entry.started).total_seconds() >= self.settings.pod_start_timeout:
                    # A create that got no clear answer may have made the Job: look first,
                    # and take it as this try's (invariant 1: never a retry beside it).
                    if entry.unanswered and self._adopt_existing(entry) is not False:
                        continue  # found (taken, or failed as another try's), or cannot say
                    self._tries.pop(entry.key, None)
                    self._fail(
                        entry.key,
                        f"could not create Job {entry.namespace}/{entry.job_name} within the "
                        f"pod start timeout ({self.settings.pod_start_timeout:g}s): "
                        f"{entry.last_error}",
                    )
                else:
                    self._create(entry)
        events, self._events = self._events, []
        # Each namespace whose watches see it: the Jobs that changed since the last poll
        # (taken before the reads below: later changes come next), None for all of them.
        touched = {
            scope.namespace: scope.cache.take_touched()
            for scope in self.watches.all()
            if scope.look(now)
        }
        for key, entry in list(self._tries.items()):
            if entry.pending_body is not None or entry.relabel or entry.namespace not in touched:
                continue
            changed = touched[entry.namespace]
            scope = self.watches.scope(entry.namespace)
            unchanged = changed is not None and entry.job_name not in changed
            if (
                entry.adopted
                and not unchanged
                and scope.cache.newest_pod(entry.job_name) is None
                and _made_a_pod(scope.cache.job(entry.job_name))
            ):
                # A pod its Job made after the move still carries the old label: moved
                # like the rest (as the owner only), and judged once it is.
                entry.relabel = True
                self._relabel(entry)
                continue
            if entry.judged and unchanged and (entry.late_at is None or now < entry.late_at):
                continue  # the same objects, and not yet late: the same verdict
            verdict, entry.late_at = self._judge(entry, scope, now)
            entry.judged = True
            if verdict.phase != "ended":
                continue
            assert verdict.state is not None
            why = verdict.reason or ""
            if verdict.delete:
                # Only on the Job as judged: one moved since by the replica that now owns
                # the try (this one was taken for dead) is not this replica's to end.
                deleted: bool | None = False
                if verdict.keep_pod:
                    pod = scope.cache.newest_pod(entry.job_name)
                    deleted = self._stop_pods(
                        entry.namespace, [pod] if pod else [], why, conditional=True
                    )
                if deleted is False:
                    deleted = self._delete(
                        entry.namespace, entry.job_name, why, version=_version(scope, entry)
                    )
                if deleted is None:
                    entry.judged = False  # judged again at the next poll, on newer objects
                    continue
                if not deleted:
                    self._to_delete[(entry.namespace, entry.job_name)] = why
            del self._tries[key]
            ran_on = scope.cache.newest_pod(entry.job_name)
            events.append(
                TaskEvent(
                    key[0],
                    key[1],
                    verdict.state,
                    verdict.exit_code,
                    why or None,
                    pod=f"{entry.namespace}/{ran_on['metadata']['name']}" if ran_on else None,
                    node=(ran_on.get("spec") or {}).get("nodeName") if ran_on else None,
                )
            )
        return events

    def _judge(self, entry: _Try, scope: Scope, now: datetime) -> tuple[Verdict, datetime | None]:
        """The try's verdict, and when time alone may change it: for a try still starting,
        when its pod start timeout runs out (it only moves later, as the time the watches
        could not see is added); for one running, when its execution timeout does."""
        job = scope.cache.job(entry.job_name)
        unseen = timedelta(seconds=scope.blind_total - entry.blind_at_start)
        started = _created(job, entry.started) + unseen
        verdict = judge(
            job,
            scope.cache.newest_pod(entry.job_name),
            now=now,
            started=started,
            pod_start_timeout=self.settings.pod_start_timeout,
            skip_on_exit_code=entry.skip_on_exit_code,
            failed_create=scope.cache.failed_create(job),
            execution_timeout=entry.timeout,
        )
        late_at = None
        if verdict.phase == "starting":
            late_at = started + timedelta(seconds=self.settings.pod_start_timeout)
        elif (
            verdict.phase == "running"
            and verdict.running_since is not None
            and entry.timeout is not None
        ):
            late_at = verdict.running_since + timedelta(seconds=entry.timeout)
        return verdict, late_at

    def alive(self) -> list[Key]:
        return list(self._tries)

    def external_ids(self) -> dict[Key, str]:
        return {
            key: job_external_id(entry.namespace, entry.job_name)
            for key, entry in self._tries.items()
        }

    # -- other replicas' tries ----------------------------------------------------------

    def inspect(self, key: Key, external_id: str | None) -> Inspection:
        ours = self._tries.get(key)
        if external_id is not None:
            namespace, name = self.locate(external_id)
        elif ours is not None:
            namespace, name = ours.namespace, ours.job_name
        else:
            return Inspection(state="unknown")
        if ours is not None and ours.pending_body is not None:
            # Its create is still being tried (and one may have landed unheard): it starts
            # or fails by its pod start timeout, on this replica's word, never as a zombie.
            return Inspection(
                state="alive",
                running=False,
                evidence={"job": "being created", "last_error": ours.last_error},
            )
        if (
            ours is not None
            and not ours.relabel
            and (namespace, name)
            == (
                ours.namespace,
                ours.job_name,
            )
        ):
            cache = self.watches.scope(namespace).cache
            if not cache.synced:
                return Inspection(state="unreachable")
            job = cache.job(name)
            pod = cache.newest_pod(name)
            # Right after a relist (an API server outage) a pod that ended meanwhile still
            # looks running until its kubelet reports again: too soon to call it alive
            # and silent (the cluster chaos run killed such pods; issue 29).
            unsettled = cache.relisted_within(RESYNC_SETTLE)
            cached = True
        else:
            # Another replica's try: not in this replica's watches, so read it.
            seen = self._read_try(key, namespace, name)
            if seen is None:
                return Inspection(state="unreachable")
            job, pod = seen
            unsettled = cached = False
        now = self._clock()
        verdict = _alive_or_not(job, pod, now)
        if verdict.phase == "running" and cached:
            if unsettled:
                return Inspection(
                    state="unreachable", evidence={**verdict.evidence, "relisted": True}
                )
            # Asked about its own running try, the replica looks again rather than trust
            # its watches: a watch can stall without an error (an API server shutting down
            # held them open a minute, sending nothing) while the pod ends unseen. It is
            # asked only about tries whose heartbeat is stale, so this read is rare.
            seen = self._read_try(key, namespace, name)
            if seen is None:
                return Inspection(state="unreachable")
            job, pod = seen
            verdict = _alive_or_not(job, pod, now)
        if verdict.phase in ("starting", "running"):
            return Inspection(
                state="alive",
                running=verdict.phase == "running",
                evidence=verdict.evidence,
                running_since=verdict.running_since,
            )
        if verdict.phase == "ended":
            return Inspection(
                state="gone",
                exit_code=verdict.exit_code,
                reason=verdict.reason,
                failed=verdict.state == TaskState.FAILED,
                evidence=verdict.evidence,
            )
        if job is None and pod is None:
            # No Job under its deterministic name and no pod: a Job started for it would
            # still be here (it is kept ttlSecondsAfterFinished after it ends), unless a
            # person deleted it. The owner's replica died between the claim and the create.
            return Inspection(
                state="gone",
                evidence={
                    **verdict.evidence,
                    "namespace": namespace,
                    "job_name": name,
                    "started": False,
                },
                restartable_within=float(self.settings.ttl_seconds_after_finished),
            )
        return Inspection(state="gone", evidence=verdict.evidence)

    def adopt(
        self,
        key: Key,
        external_id: str,
        *,
        elapsed: float,
        timeout: float | None,
        skip_on_exit_code: frozenset[int],
    ) -> None:
        if key in self._tries:
            return
        namespace, name = self.locate(external_id)
        entry = _Try(
            key=key,
            namespace=namespace,
            job_name=name,
            started=self._clock() - timedelta(seconds=elapsed),
            blind_at_start=self.watches.scope(namespace).blind_total,
            skip_on_exit_code=skip_on_exit_code,
            timeout=timeout,
            adopted=True,
            relabel=True,
        )
        self._tries[key] = entry
        self._relabel(entry)

    def _relabel(self, entry: _Try) -> None:
        """Move a try's Job and pods into this replica's watches (its label on them), as
        the try's owner only (ADR 0033): read them; wait until the database confirms, in
        a transaction begun after that read, that this replica owns the try; then patch
        each with the version read as a precondition. A replica that lost the try before
        the confirmation never patches (its fence releases the try); one that lost it
        after finds the objects moved by the new owner, whose move follows its own
        compare-and-set, and its patch refused: it reads again and waits again. Until the
        move is done the try is not judged; a failed step is retried at the next poll."""
        try:
            if entry.move is None:
                entry.move = self._read_move(entry)
                return
            if entry.owned_at is None or entry.owned_at < entry.move.read_at:
                return  # not confirmed yet: the next heartbeat of this replica's tries says
            self._apply_move(entry, entry.move)
        except ApiException as exc:
            if exc.status == 409:
                entry.move = None  # changed since it was read: read again, confirm again
            entry.last_error = _api_error(exc)
            return
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            entry.last_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            return
        entry.relabel = False
        entry.move = None
        log.info(
            "adopted try moved into this replica's watches",
            namespace=entry.namespace,
            job=entry.job_name,
        )

    def _read_move(self, entry: _Try) -> _Move:
        self.api.add("get")
        try:
            response: Any = self._batch.read_namespaced_job(
                entry.job_name, entry.namespace, _preload_content=False, _request_timeout=(5, 10)
            )
            job = json.loads(response.data)
        except ApiException as exc:
            if exc.status != 404:
                raise
            job = None  # no Job: its pods may still be there (being deleted)
        pods = self._list_pods(entry.namespace, entry.key)
        return _Move(job, pods, read_at=time.monotonic())

    def _apply_move(self, entry: _Try, move: _Move) -> None:
        """Patch what is not yet this replica's, each on the version read; what moved is
        noted in `move`, so a retry after an error patches only the rest."""
        cache = self._cache(entry)
        if move.job is not None and not self._ours(move.job):
            self.api.add("patch")
            try:
                response: Any = self._batch.patch_namespaced_job(
                    entry.job_name,
                    entry.namespace,
                    self._conditional_label_patch(move.job),
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                    _request_timeout=(10, 30),
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
                move.job = None  # deleted since: its pods may still be there
            else:
                move.job = json.loads(response.data)
                cache.put_job(move.job)
        for index, pod in enumerate(move.pods):
            if self._ours(pod):
                continue
            self.api.add("patch")
            try:
                response = self._core.patch_namespaced_pod(
                    pod["metadata"]["name"],
                    entry.namespace,
                    self._conditional_label_patch(pod),
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                    _request_timeout=(10, 30),
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
                continue  # deleted meanwhile: nothing to move
            move.pods[index] = json.loads(response.data)
            cache.put_pod(move.pods[index])

    def _conditional_label_patch(self, obj: dict[str, Any]) -> dict[str, Any]:
        """This replica's label, only onto the version of `obj` read (else 409 Conflict)."""
        return {
            "metadata": {
                "resourceVersion": obj["metadata"]["resourceVersion"],
                "labels": {names.REPLICA_LABEL: self.replica},
            }
        }

    def _ours(self, obj: dict[str, Any] | None) -> bool:
        labels = (obj or {}).get("metadata", {}).get("labels") or {}
        return bool(labels.get(names.REPLICA_LABEL) == self.replica)

    def _list_pods(self, namespace: str, key: Key) -> list[dict[str, Any]]:
        self.api.add("list")
        response: Any = self._core.list_namespaced_pod(
            namespace,
            label_selector=names.try_selector(*key),
            _preload_content=False,
            _request_timeout=(10, 30),
        )
        return list(json.loads(response.data).get("items") or [])

    def _read_try(
        self, key: Key, namespace: str, name: str
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None] | None:
        """A try as the API server has it now (another replica's, or one of this replica's
        own it is asked about): its Job (None if there is none) and newest pod; None when
        the API server cannot be asked."""
        now = self._clock()
        if self._reads_blocked_until is not None and now < self._reads_blocked_until:
            return None
        try:
            self.api.add("get")
            try:
                response: Any = self._batch.read_namespaced_job(
                    name,
                    namespace,
                    _preload_content=False,
                    _request_timeout=(5, 10),
                )
                job = json.loads(response.data)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                job = None
            pods = self._list_pods(namespace, key)
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            log.warning(
                "cannot read another replica's try",
                namespace=namespace,
                job=name,
                error=str(exc)[:200],
            )
            self._reads_blocked_until = now + timedelta(seconds=READ_BACKOFF)
            return None
        pod = max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), default=None)
        return job, pod

    def heartbeats_recorded(self, keys: Sequence[tuple[int, int]], at: float) -> None:
        """The database confirmed at or after `at` that this replica owns these tries: a
        move read before then may go ahead (`_relabel`). (No lease: pods heartbeat.)"""
        for key in keys:
            entry = self._tries.get(key)
            if entry is not None and (entry.owned_at is None or entry.owned_at < at):
                entry.owned_at = at

    def release(self, key: Key) -> None:
        self._tries.pop(key, None)

    # -- stopping -----------------------------------------------------------------------

    def kill(self, key: Key, reason: str, external_id: str | None = None) -> None:
        """Stop the try: its Job, the one this replica tracks, else the one its external
        id names (a try this replica dropped or never had: after a restart, a hand-over).
        A Job that has already finished has nothing left to stop and is kept (its record
        and its pod's log live until its TTL): a try fenced after it ended (another
        replica saw its end while this one was adopting it) loses nothing. A pod running
        on a node is stopped and kept, for its log (`_stop_pods`); otherwise the Job is
        deleted."""
        entry = self._tries.pop(key, None)
        if entry is not None:
            where = (entry.namespace, entry.job_name)
        elif external_id is not None:
            where = self.locate(external_id)
        else:
            return
        if self._finished(*where):
            log.info("try fenced after its Job finished: Job kept", namespace=where[0],
                     job=where[1], reason=reason)  # fmt: skip
            return
        try:
            pods = self._list_pods(where[0], key)
        except (ApiException, urllib3.exceptions.HTTPError, OSError):
            pods = []  # cannot say: deleted, as a Job that may still run must be
        if self._stop_pods(where[0], pods, reason, conditional=False):
            return
        if not self._delete(*where, reason):
            self._to_delete[where] = reason

    def _stop_pods(
        self, namespace: str, pods: list[dict[str, Any]], why: str, *, conditional: bool
    ) -> bool | None:
        """Stop a try's pod and keep it, for its log (issue 30): `activeDeadlineSeconds:
        1` on a pod running on a node, and its kubelet stops every container at once and
        marks it Failed (DeadlineExceeded). The pod stays, and its log with it, for the
        archive; the Job (backoffLimit 0) fails with it, makes no other pod, and goes at
        its TTL. True when every pod has ended or was stopped so. False when there is no
        pod, a pod not yet running on a node (its deadline would count from a start still
        to come: it could run a moment), or a patch that failed: the caller deletes the
        Job then. With `conditional`, only the version of each pod given (as judged):
        None when one changed since (judged again on the newer objects)."""
        if not pods:
            return False
        running = []
        for pod in pods:
            status = pod.get("status") or {}
            if pod["metadata"].get("deletionTimestamp") or status.get("phase") in (
                "Succeeded",
                "Failed",
            ):
                continue  # ended, or going: nothing to stop
            if (
                status.get("phase") != "Running"
                or not status.get("startTime")
                or not (pod.get("spec") or {}).get("nodeName")
            ):
                return False
            running.append(pod)
        for pod in running:
            name = pod["metadata"]["name"]
            body: dict[str, Any] = {"spec": {"activeDeadlineSeconds": 1}}
            if conditional:
                body["metadata"] = {"resourceVersion": pod["metadata"]["resourceVersion"]}
            self.api.add("patch")
            try:
                self._core.patch_namespaced_pod(
                    name,
                    namespace,
                    body,
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                    _request_timeout=(10, 30),
                )
            except ApiException as exc:
                if exc.status == 404:
                    continue  # gone: nothing left to stop
                if exc.status == 409 and conditional:
                    return None
                log.warning("could not stop pod", namespace=namespace, pod=name,
                            error=_api_error(exc))  # fmt: skip
                return False
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                log.warning("could not stop pod", namespace=namespace, pod=name,
                            error=str(exc)[:200])  # fmt: skip
                return False
            log.info("stopped pod, kept for its log", namespace=namespace, pod=name, why=why)
        return True

    def _finished(self, namespace: str, name: str) -> bool:
        """Has the Job finished (Complete or Failed), as the API server has it now? False
        when it cannot say: then it is deleted, as a Job that may still run must be."""
        self.api.add("get")
        try:
            response: Any = self._batch.read_namespaced_job(
                name, namespace, _preload_content=False, _request_timeout=(5, 10)
            )
        except (ApiException, urllib3.exceptions.HTTPError, OSError):
            return False  # gone (404: the delete finds nothing), or unknown
        return job_finished(json.loads(response.data))

    def _delete(
        self, namespace: str, name: str, why: str, *, version: str | None = None
    ) -> bool | None:
        """Delete a Job and (foreground) its pods; True when done or already gone, False
        when it could not be (asked again later). With a `version`, only that version of
        the Job: None when it has changed since (409)."""
        self.api.add("delete")
        try:
            self._batch.delete_namespaced_job(
                name,
                namespace,
                propagation_policy="Foreground",
                body=None
                if version is None
                else client.V1DeleteOptions(
                    preconditions=client.V1Preconditions(resource_version=version)
                ),
                _request_timeout=(10, 30),
            )
        except ApiException as exc:
            if exc.status == 404:
                return True
            if exc.status == 409 and version is not None:
                log.info("Job changed since it was judged", namespace=namespace, job=name)
                return None
            log.warning(
                "could not delete Job", namespace=namespace, job=name, error=_api_error(exc)
            )
            return False
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            log.warning("could not delete Job", namespace=namespace, job=name, error=str(exc)[:200])
            return False
        log.info("deleted Job", namespace=namespace, job=name, why=why)
        return True

    def shutdown(self) -> None:
        self.watches.stop()

    def request_counts(self) -> dict[str, int]:
        """The API requests this executor made, by verb, watches excluded: its own
        creates, gets, patches, lists and deletes, and the watches' LISTs (the first and
        every relist)."""
        counts = dict(self.api.by_verb)
        stats = self.watches.stats()
        lists = stats.get("jobs_relists", 0) + stats.get("pods_relists", 0)
        lists += stats.get("events_relists", 0)
        if lists:
            counts["list"] = counts.get("list", 0) + lists
        return counts


def job_external_id(namespace: str, job_name: str) -> str:
    """A try's external id: where its Job is, `<namespace>/<name>`."""
    return f"{namespace}/{job_name}"


def _version(scope: Scope, entry: _Try) -> str | None:
    """The resourceVersion of the try's Job as this replica's cache has it."""
    job = scope.cache.job(entry.job_name)
    return None if job is None else job["metadata"].get("resourceVersion")


def _alive_or_not(job: dict[str, Any] | None, pod: dict[str, Any] | None, now: datetime) -> Verdict:
    """A try's verdict for `inspect`: starting tries are their owner's to time out, so
    only "does it still run?" matters here."""
    return judge(
        job,
        pod,
        now=now,
        started=_created(job, now),
        pod_start_timeout=float("inf"),
        skip_on_exit_code=frozenset(),
    )


def _made_a_pod(job: dict[str, Any] | None) -> bool:
    """Does the Job's status count a pod of its own (one this replica may not see yet)?"""
    status = (job or {}).get("status") or {}
    return any((status.get(k) or 0) > 0 for k in ("active", "succeeded", "failed", "terminating"))


def _created(job: dict[str, Any] | None, fallback: datetime) -> datetime:
    return k8s_time((job or {}).get("metadata", {}).get("creationTimestamp")) or fallback


UNBOUNDED_TRY_TOKEN_LIFE = 24 * 3600.0


def _token_life(timeout: timedelta | None, settings: KubernetesSettings) -> float:
    """A try's token outlives its pod's start, the sidecar's wait before its first post
    (one heartbeat interval) and its run time (a day without a timeout); the task API
    refreshes it while heartbeats flow, so expiry never stops a live try."""
    run = timeout.total_seconds() if timeout is not None else UNBOUNDED_TRY_TOKEN_LIFE
    return settings.pod_start_timeout + settings.heartbeat_interval + run + 300


def _worth_retrying(exc: ApiException) -> bool:
    """A refused create that says nothing about the Job itself, so the try is not failed
    for it: the API server busy or failing (5xx, 429); this replica's credentials refused
    (401: a bound service-account token stops working once its pod object is deleted, while
    the process still runs; another replica adopts the try if this one dies); a full
    ResourceQuota (403 "exceeded quota", which Airflow requeues too). Anything else (an
    invalid body, RBAC forbidding Jobs, no such namespace) fails the try at once."""
    status = exc.status or 0
    if status >= 500 or status in (401, 429):
        return True
    body = exc.body or b""  # bytes when the request did not preload its content
    return status == 403 and b"exceeded quota" in (
        body if isinstance(body, bytes) else str(body).encode()
    )


def _api_error(exc: ApiException) -> str:
    try:
        message = json.loads(exc.body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    return f"{exc.status} {exc.reason}: {message or ''}".rstrip(": ")
