"""Every API request the Job executor and its watches make has a timeout: a request on a
dead connection (a blackholed API server, a silent network partition) without one hangs
the scheduler's loop, or a watch thread, for ever."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sluice.executors.kubernetes.watch import TryCache
from tests.unit.test_k8s_executor_poll import Clock, FakeApi, make_executor
from tests.unit.test_k8s_jobs import launch


def test_every_request_of_the_executor_has_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeApi()
    owner = make_executor(monkeypatch, Clock(), api, replica="r0")
    owner.start([launch()])
    job = api.created[0]
    api.add_pod(job, {"running": {}})
    name = owner.planned_external_id(launch())

    # Another replica: a create that finds the Job (read), inspect (read, list), adopt
    # (read, list, patches), kill (delete).
    other = make_executor(monkeypatch, Clock(), api, replica="r1")
    other.start([launch()])
    other.inspect(launch().key, name)
    other.release(launch().key)
    other.adopt(launch().key, name, elapsed=1.0, timeout=None, skip_on_exit_code=frozenset())
    other.heartbeats_recorded([launch().key], float("inf"))
    other.poll()
    other.kill(launch().key, "fenced")

    assert {"create_job", "read_job", "list_pods", "patch_job", "patch_pod", "delete_job"} <= set(
        api.calls
    )
    assert api.untimed == []


@pytest.mark.parametrize("kind", ["jobs", "pods", "events"])
def test_every_request_of_the_watches_has_a_timeout(kind: str) -> None:
    cache = TryCache(lambda: None, "work", replica="r1")  # type: ignore[arg-type,return-value]
    seen: list[dict[str, Any]] = []

    class Listed:
        data = json.dumps({"metadata": {"resourceVersion": "5"}, "items": []}).encode()
        status = 200

        def stream(self, *_: Any, **__: Any) -> Any:
            return iter(())

        def close(self) -> None: ...

        def release_conn(self) -> None: ...

    def list_fn(*_: Any, **kwargs: Any) -> Listed:
        seen.append(kwargs)
        return Listed()

    cache._list_fn = lambda api, kind: list_fn  # type: ignore[method-assign]
    state = cache._kinds[kind]
    cache._relist(None, state)  # type: ignore[arg-type]
    list(cache._watch(None, state))  # type: ignore[arg-type]
    assert len(seen) == 2
    assert all(kw.get("_request_timeout") is not None for kw in seen), seen
