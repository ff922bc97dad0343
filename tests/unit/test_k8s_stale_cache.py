"""A replica's own tries are judged from its watch cache; a cache that may be stale does
not vouch for a try (issue 29's cluster chaos run: pods that ended during an API server
outage looked running, and were killed as silent)."""

from __future__ import annotations

import copy
import time

import pytest

from sluice.executors.kubernetes.namespaces import RESYNC_SETTLE
from tests.unit.test_k8s_stop_keeps_log import KEY, _running, _started


def test_a_try_seen_running_right_after_a_relist_is_not_vouched_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After an API server outage the cache LISTs again and shows what kubelets reported
    before it: a pod that ended meanwhile still looks running. For RESYNC_SETTLE seconds
    the executor says it cannot tell (no zombie on a stale heartbeat), then alive again."""
    executor, api, _, job = _started(monkeypatch)
    pod = _running(api, job)
    executor.cache._apply(executor.cache._kinds["pods"], {"type": "ADDED", "object": pod})
    external_id = f"work/{job['metadata']['name']}"
    seen = executor.inspect(KEY, external_id)
    assert (seen.state, seen.running) == ("alive", True)
    executor.cache._kinds["pods"].relisted_at = time.monotonic()
    assert executor.inspect(KEY, external_id).state == "unreachable"
    executor.cache._kinds["pods"].relisted_at = time.monotonic() - RESYNC_SETTLE - 1
    seen = executor.inspect(KEY, external_id)
    assert (seen.state, seen.running) == ("alive", True)


@pytest.mark.parametrize("fresh", ["ended", "unreadable"])
def test_a_running_try_is_looked_at_again_before_it_is_vouched_for(
    monkeypatch: pytest.MonkeyPatch, fresh: str
) -> None:
    """Its watch stalled (no error, nothing sent), the cache still shows the pod running;
    the API server has it ended: the executor says so. If the API server cannot be asked,
    it cannot tell."""
    executor, api, _, job = _started(monkeypatch)
    pod = _running(api, job)
    seen_then = copy.deepcopy(pod)  # what the watch delivered before it stalled
    executor.cache._apply(executor.cache._kinds["pods"], {"type": "ADDED", "object": seen_then})
    if fresh == "ended":
        pod["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 0}}
        pod["status"]["phase"] = "Succeeded"
    else:
        api.fail_next["read_job"] = [503]
    seen = executor.inspect(KEY, f"work/{job['metadata']['name']}")
    if fresh == "ended":
        assert (seen.state, seen.exit_code) == ("gone", 0)
    else:
        assert seen.state == "unreachable"
