"""Where a try's output is read from, while it can be: its pod's log, or its local file.

The archiver reads through one of these when a try has ended; `sluice logs`
reads through the same ones while a try runs (`follow`). Neither gives the task
any credential: the scheduler reads its pods' logs with its own rights
(`pods/log`), streamed in chunks, never all in memory.
"""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sluice.executors.kubernetes import names
from sluice.executors.kubernetes.manifest import MAIN

CHUNK = 64 * 1024
FOLLOW_READ_TIMEOUT = 86400.0


@dataclass(frozen=True)
class TryRef:
    """A try, as the database knows it."""

    ti_id: int
    try_number: int
    dag_id: str
    run_id: str
    task_id: str
    external_id: str | None  # where it ran (`try_location`); None: it never started
    # Its pod (namespace/name) and node when its executor saw it end (`task_try.pod`): read
    # by name, without listing the try's pods.
    pod: str | None = None
    node: str | None = None


@dataclass(frozen=True)
class Opened:
    """A try's output, being read: `where` names its source (pod, node; a file)."""

    chunks: Iterator[bytes]
    where: dict[str, str]


def try_location(
    executor: str | None,
    latest_external_id: str | None,
    ref: tuple[int, int, str, str, str],
) -> str | None:
    """Where a try ran, from what the database keeps: `task_try.external_id` names the
    executor that started it, and `task_instance.external_id` the latest try's own id (a
    Job's `<namespace>/<name>`; the namespace is the same for every try of a task
    instance, the Job's name is a function of the try). None: it never started."""
    ti_id, try_number, dag_id, run_id, task_id = ref
    if executor == "kubernetes":
        namespace = (latest_external_id or "").rpartition("/")[0]
        return f"{namespace}/{names.job_name(dag_id, run_id, task_id, try_number)}"
    if executor == "local":
        return f"local:try:{ti_id}:{try_number}"
    return None


class LogGone(Exception):
    """The try's output can no longer be read, for good: the reason says why."""


class LogUnavailable(Exception):
    """The try's output cannot be read now (the API server did not answer): try later."""


class LogSource(Protocol):
    def open(self, ref: TryRef, *, follow: bool = False, tail: int | None = None) -> Opened:
        """The try's output from its start (its last `tail` lines), going on as it is
        written with `follow`; raises LogGone or LogUnavailable."""


class PodLogs:
    """A try's pod's `main` container log, through the API server (`pods/log`)."""

    def __init__(
        self, core: client.CoreV1Api, *, timeout: float = 60.0, default_namespace: str = "default"
    ) -> None:
        self.core = core
        self.timeout = timeout
        # Where Jobs ran whose external id has no namespace (recorded before ADR 0032).
        self.default_namespace = default_namespace

    def open(self, ref: TryRef, *, follow: bool = False, tail: int | None = None) -> Opened:
        if not ref.external_id or "/" not in ref.external_id:
            raise LogGone("the try has no Job to read its log from (it never started)")
        namespace = ref.external_id.split("/", 1)[0] or self.default_namespace
        if ref.pod is not None and not follow:
            pod_namespace, _, pod_name = ref.pod.partition("/")
            where = {"pod": ref.pod, "node": ref.node or ""}
            return self._read(pod_namespace or namespace, pod_name, where, False, tail)
        try:
            listed: Any = self.core.list_namespaced_pod(
                namespace,
                label_selector=names.try_selector(ref.ti_id, ref.try_number),
                _preload_content=False,
                _request_timeout=(10, 30),
            )
            pods = json.loads(listed.data).get("items") or []
        except ApiException as exc:
            raise LogUnavailable(f"cannot list the try's pods: {exc.status} {exc.reason}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise LogUnavailable(f"cannot list the try's pods: {exc}") from exc
        if not pods:
            raise LogGone(
                f"the pod of Job {ref.external_id} was deleted before its log could be read"
            )
        pod = max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))
        name = pod["metadata"]["name"]
        where = {"pod": f"{namespace}/{name}", "node": pod["spec"].get("nodeName") or ""}
        return self._read(namespace, name, where, follow, tail)

    def _read(
        self, namespace: str, name: str, where: dict[str, str], follow: bool, tail: int | None
    ) -> Opened:
        try:
            response: Any = self.core.read_namespaced_pod_log(
                name,
                namespace,
                container=MAIN,
                follow=follow,
                tail_lines=tail,
                _preload_content=False,
                # Following, the output may pause for long: a day between two chunks.
                _request_timeout=(10, FOLLOW_READ_TIMEOUT if follow else self.timeout),
            )
        except ApiException as exc:
            if exc.status == 404:
                raise LogGone(
                    f"pod {namespace}/{name} was deleted before its log could be read"
                ) from exc
            if exc.status == 400:  # "container main ... is waiting to start"
                raise LogGone(f"its container has not started: {_message(exc)}") from exc
            raise LogUnavailable(f"cannot read pod {namespace}/{name}'s log: {exc.status}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise LogUnavailable(f"cannot read pod {namespace}/{name}'s log: {exc}") from exc
        return Opened(_stream(response), where)


def _stream(response: Any) -> Iterator[bytes]:
    try:
        yield from response.stream(CHUNK, decode_content=True)
    finally:
        response.release_conn()


def _message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)


class FileLogs:
    """A local try's log file (the local executor's, `--log-dir`). With `follow`, it is
    read as it grows until `running()` says the try has ended (then to its end)."""

    def __init__(
        self,
        path_of: Callable[[TryRef], Path],
        *,
        running: Callable[[TryRef], bool] | None = None,
        poll: float = 0.5,
    ) -> None:
        self.path_of = path_of
        self.running = running
        self.poll = poll

    def open(self, ref: TryRef, *, follow: bool = False, tail: int | None = None) -> Opened:
        path = self.path_of(ref)
        try:
            handle = path.open("rb")
        except FileNotFoundError as exc:
            raise LogGone(
                f"its log file {path} is not there (deleted, or on another machine)"
            ) from exc
        return Opened(self._read(handle, ref, follow, tail), {"file": str(path)})

    def _read(self, handle: Any, ref: TryRef, follow: bool, tail: int | None) -> Iterator[bytes]:
        with handle:
            if tail is not None:
                yield b"".join(collections.deque(handle, maxlen=tail))
            while True:
                chunk = handle.read(CHUNK)
                if chunk:
                    yield chunk
                    continue
                if not follow or self.running is None or not self.running(ref):
                    tail_end = handle.read()  # what came between the last read and the end
                    if tail_end:
                        yield tail_end
                    return
                time.sleep(self.poll)
