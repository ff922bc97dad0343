"""The watch cache's pods and FailedCreate Events by Job: a try's pod, or the refusal of
its pod, is found without scanning every cached object."""

from __future__ import annotations

from typing import Any

from sluice.executors.kubernetes.watch import TryCache


def pod(name: str, job: str, created: str, version: int = 1, uid: str = "") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": uid or name,
            "resourceVersion": str(version),
            "creationTimestamp": created,
            "labels": {"batch.kubernetes.io/job-name": job, "sluice.io/ti": "1"},
        }
    }


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def test_newest_pod_follows_adds_updates_and_deletes() -> None:
    cache = TryCache(lambda: None, "ns")  # type: ignore[arg-type,return-value]
    pods = cache._kinds["pods"]
    cache._apply(pods, event("ADDED", pod("a-1", "a", "2026-12-03T10:00:00Z")))
    cache._apply(pods, event("ADDED", pod("b-1", "b", "2026-12-03T10:00:01Z")))
    cache._apply(pods, event("ADDED", pod("a-2", "a", "2026-12-03T10:00:05Z")))
    newest = cache.newest_pod("a")
    assert newest is not None
    assert newest["metadata"]["name"] == "a-2"
    cache._apply(pods, event("MODIFIED", pod("a-2", "a", "2026-12-03T10:00:05Z", version=2)))
    newest = cache.newest_pod("a")
    assert newest is not None
    assert newest["metadata"]["resourceVersion"] == "2"
    cache._apply(pods, event("DELETED", pod("a-2", "a", "2026-12-03T10:00:05Z", version=3)))
    newest = cache.newest_pod("a")
    assert newest is not None
    assert newest["metadata"]["name"] == "a-1"
    cache._apply(pods, event("DELETED", pod("a-1", "a", "2026-12-03T10:00:00Z", version=4)))
    assert cache.newest_pod("a") is None
    assert pods.by_job == {"b": {"b-1"}}
    assert cache.newest_pod("nobody") is None


def test_a_pod_with_the_older_label_or_none_is_indexed_as_it_can_be() -> None:
    cache = TryCache(lambda: None, "ns")  # type: ignore[arg-type,return-value]
    pods = cache._kinds["pods"]
    old_style = pod("c-1", "c", "2026-12-03T10:00:00Z")
    old_style["metadata"]["labels"] = {"job-name": "c"}
    orphan = pod("d-1", "d", "2026-12-03T10:00:00Z")
    orphan["metadata"]["labels"] = {}
    cache._apply(pods, event("ADDED", old_style))
    cache._apply(pods, event("ADDED", orphan))
    found = cache.newest_pod("c")
    assert found is not None
    assert found["metadata"]["name"] == "c-1"
    assert cache.newest_pod("d") is None
    assert cache.stats()["pods_cached"] == 2


def test_a_try_leaving_the_selection_with_another_replicas_label_is_handed_over() -> None:
    cache = TryCache(lambda: None, "ns", replica="r1")  # type: ignore[arg-type,return-value]
    assert cache.selector == "sluice.io/ti,sluice.io/replica=r1"
    pods = cache._kinds["pods"]
    mine = pod("a-1", "a", "2026-12-03T10:00:00Z")
    mine["metadata"]["labels"]["sluice.io/replica"] = "r1"
    cache._apply(pods, event("ADDED", mine))
    moved = pod("a-1", "a", "2026-12-03T10:00:00Z", version=2)
    moved["metadata"]["labels"]["sluice.io/replica"] = "r2"
    cache._apply(pods, event("DELETED", moved))
    assert cache.newest_pod("a") is None
    assert cache.take_handed_over() == {"a"}
    assert cache.take_handed_over() == set()
    gone = pod("b-1", "b", "2026-12-03T10:00:00Z")
    gone["metadata"]["labels"]["sluice.io/replica"] = "r1"
    cache._apply(pods, event("ADDED", gone))
    cache._apply(pods, event("DELETED", gone))  # deleted for real: its own label
    assert cache.take_handed_over() == set()


def failed_create(job: str, uid: str, message: str, at: str, version: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{job}.{version}",
            "uid": f"e{version}",
            "resourceVersion": str(version),
        },
        "involvedObject": {"kind": "Job", "name": job, "uid": uid},
        "reason": "FailedCreate",
        "message": message,
        "lastTimestamp": at,
    }


def test_a_jobs_newest_failed_create_event_of_its_own_uid_is_its_refusal() -> None:
    cache = TryCache(lambda: None, "ns")  # type: ignore[arg-type,return-value]
    events = cache._kinds["events"]
    job = {"metadata": {"name": "a", "uid": "uid-a"}}
    assert cache.failed_create(job) is None
    cache._apply(
        events, event("ADDED", failed_create("a", "uid-a", "first", "2026-12-03T10:00:01Z", 1))
    )
    cache._apply(
        events, event("ADDED", failed_create("a", "uid-a", "second", "2026-12-03T10:00:09Z", 2))
    )
    cache._apply(
        events,
        event("ADDED", failed_create("a", "uid-old", "older Job", "2026-12-03T10:00:30Z", 3)),
    )
    cache._apply(
        events, event("ADDED", failed_create("b", "uid-b", "other Job", "2026-12-03T10:00:40Z", 4))
    )
    assert cache.failed_create(job) == "second"
    assert cache.take_touched() is None  # nothing taken yet: everything
    cache._apply(
        events, event("DELETED", failed_create("a", "uid-a", "second", "2026-12-03T10:00:09Z", 2))
    )
    assert cache.take_touched() == {"a"}  # the try is judged again
    assert cache.failed_create(job) == "first"
    assert cache.failed_create(None) is None


def test_the_events_watch_does_not_decide_whether_the_cache_is_synced() -> None:
    """A replica without the right to list Events still judges its tries."""
    cache = TryCache(lambda: None, "ns")  # type: ignore[arg-type,return-value]
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "1"}}}
    cache._apply(cache._kinds["jobs"], bookmark)
    assert not cache.synced
    cache._apply(cache._kinds["pods"], bookmark)
    assert cache.synced
    assert cache._selection("events") == {
        "field_selector": "involvedObject.kind=Job,reason=FailedCreate"
    }
    assert cache._selection("pods") == {"label_selector": "sluice.io/ti"}
