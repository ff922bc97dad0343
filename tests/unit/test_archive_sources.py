"""Reading a try's pod log through the API server: what is gone for good, what may pass."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from sluice.executors.logsources import LogGone, LogUnavailable, PodLogs, TryRef

REF = TryRef(7, 2, "etl", "manual__1", "load", "team-a/etl-load-2-abc")


@dataclass
class _Data:
    data: bytes


@dataclass
class _Stream:
    chunks: list[bytes]
    released: bool = False

    def stream(self, amt: int, decode_content: bool = True) -> Any:
        yield from self.chunks

    def release_conn(self) -> None:
        self.released = True


@dataclass
class FakeCore:
    pods: list[dict[str, Any]] = field(default_factory=list)
    read_error: int | None = None
    list_error: int | None = None
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    stream: _Stream = field(default_factory=lambda: _Stream([b"a\n", b"b\n"]))

    def list_namespaced_pod(self, namespace: str, **kw: Any) -> _Data:
        self.calls.append(("list", {"namespace": namespace, **kw}))
        if self.list_error:
            raise ApiException(status=self.list_error, reason="test")
        return _Data(json.dumps({"items": self.pods}).encode())

    def read_namespaced_pod_log(self, name: str, namespace: str, **kw: Any) -> _Stream:
        self.calls.append(("read", {"name": name, "namespace": namespace, **kw}))
        if self.read_error:
            exc = ApiException(status=self.read_error, reason="test")
            exc.body = json.dumps({"message": 'container "main" is waiting to start'})
            raise exc
        return self.stream


def _pod(name: str, created: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": {"nodeName": "n1"}}


def test_the_newest_pod_of_the_try_is_streamed_from_its_main_container() -> None:
    core = FakeCore(pods=[_pod("old", "2026-12-01T00:00:00Z"), _pod("new", "2026-12-01T00:01:00Z")])
    opened = PodLogs(core).open(REF, follow=True, tail=5)  # type: ignore[arg-type]
    assert b"".join(opened.chunks) == b"a\nb\n"
    assert core.stream.released
    assert opened.where == {"pod": "team-a/new", "node": "n1"}
    (_, listed), (_, read) = core.calls
    assert listed["namespace"] == "team-a"
    assert listed["label_selector"] == "sluice.io/ti=7,sluice.io/try=2"
    assert (read["name"], read["container"], read["follow"], read["tail_lines"]) == (
        "new",
        "main",
        True,
        5,
    )
    assert listed["_request_timeout"] is not None
    assert read["_request_timeout"][0] is not None


@pytest.mark.parametrize(
    ("core", "error", "words"),
    [
        (FakeCore(), LogGone, "was deleted before its log could be read"),
        (FakeCore(pods=[_pod("p", "")], read_error=404), LogGone, "was deleted"),
        (FakeCore(pods=[_pod("p", "")], read_error=400), LogGone, "has not started: container"),
        (FakeCore(pods=[_pod("p", "")], read_error=503), LogUnavailable, "cannot read pod"),
        (FakeCore(list_error=500), LogUnavailable, "cannot list the try's pods"),
    ],
)
def test_what_is_gone_for_good_and_what_may_pass(core: FakeCore, error: type, words: str) -> None:
    with pytest.raises(error, match=words):
        PodLogs(core).open(REF)  # type: ignore[arg-type]


def test_a_try_that_never_started_has_no_pod_to_read() -> None:
    with pytest.raises(LogGone, match="never started"):
        PodLogs(FakeCore()).open(TryRef(1, 1, "d", "r", "t", None))  # type: ignore[arg-type]


def test_where_a_try_ran_follows_from_its_executor_and_the_latest_tries_id() -> None:
    from sluice.executors.kubernetes import names
    from sluice.executors.logsources import try_location

    ref = (7, 1, "etl", "manual__1", "load")
    job = names.job_name("etl", "manual__1", "load", 1)
    # Try 1's Job, read when try 3 is the latest: same namespace, its own name.
    assert try_location("kubernetes", "team-a/etl-load-3-xyz", ref) == f"team-a/{job}"
    assert try_location("local", "local:v:try:7:3", ref) == "local:try:7:1"
    assert try_location(None, None, ref) is None
    assert try_location("noop", "noop", ref) is None


def test_a_pod_its_executor_saw_end_is_read_by_name_without_a_list() -> None:
    """`task_try.pod` (migration 0018): one request per archived log, not two."""
    core = FakeCore()
    ref = TryRef(7, 2, "etl", "manual__1", "load", "team-a/etl-load-2-abc",
                 pod="team-a/etl-load-2-abc-x1", node="n2")  # fmt: skip
    opened = PodLogs(core).open(ref)  # type: ignore[arg-type]
    assert b"".join(opened.chunks) == b"a\nb\n"
    assert opened.where == {"pod": "team-a/etl-load-2-abc-x1", "node": "n2"}
    ((call, read),) = core.calls
    assert (call, read["name"], read["namespace"], read["container"]) == (
        "read",
        "etl-load-2-abc-x1",
        "team-a",
        "main",
    )
    gone = FakeCore(read_error=404)
    with pytest.raises(LogGone, match="team-a/etl-load-2-abc-x1 was deleted before"):
        PodLogs(gone).open(ref)  # type: ignore[arg-type]
