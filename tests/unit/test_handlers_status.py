"""Status patches: the Ready condition, observedGeneration, and messages with field paths."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sluice.handlers import status
from sluice.spec.errors import SpecIssue

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_ready_true_with_generation_and_extra_fields() -> None:
    patch = status.ready_status(
        None, ok=True, reason="Accepted", message="ok", generation=3, now=NOW, extra={"version": 2}
    )
    assert patch == {
        "version": 2,
        "observedGeneration": 3,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Accepted",
                "message": "ok",
                "lastTransitionTime": "2026-12-01T12:00:00Z",
                "observedGeneration": 3,
            }
        ],
    }


def test_transition_time_moves_only_when_status_changes() -> None:
    first = status.ready_status(None, ok=True, reason="A", message="", generation=1, now=NOW)
    later = NOW + timedelta(minutes=5)
    same = status.ready_status(first, ok=True, reason="A", message="", generation=2, now=later)
    assert same["conditions"][0]["lastTransitionTime"] == "2026-12-01T12:00:00Z"
    assert same["conditions"][0]["observedGeneration"] == 2
    flipped = status.ready_status(first, ok=False, reason="B", message="", generation=2, now=later)
    assert flipped["conditions"][0]["lastTransitionTime"] == "2026-12-01T12:05:00Z"


def test_other_conditions_are_kept_in_place() -> None:
    previous = {"conditions": [{"type": "Other", "status": "True"}, {"type": "Ready"}]}
    patch = status.ready_status(
        previous, ok=False, reason="X", message="", generation=None, now=NOW
    )
    assert [c["type"] for c in patch["conditions"]] == ["Other", "Ready"]
    assert "observedGeneration" not in patch
    assert "observedGeneration" not in patch["conditions"][1]


def test_issues_message_lists_paths_and_what_keeps_running() -> None:
    issues = [SpecIssue("spec.tasks[1].retryDelay", "bad duration"), SpecIssue("spec.x", "y")]
    message = status.issues_message(issues, kept_version=4)
    assert message.splitlines() == [
        "2 issues in the spec:",
        "- spec.tasks[1].retryDelay: bad duration",
        "- spec.x: y",
        "The scheduler keeps running version 4 until this is fixed.",
    ]
    assert "Nothing is scheduled" in status.issues_message(issues[:1], kept_version=None)


def test_issues_message_says_when_the_kept_version_is_broken() -> None:
    reason = "DAG 'd' version 4 (dag_version.id 9) cannot be loaded: spec.tasks: must be a list"
    message = status.issues_message([SpecIssue("spec.x", "y")], kept_version=4, kept_broken=reason)
    assert message.splitlines()[-1] == (
        f"The current version 4 is broken: {reason}. "
        "Nothing is scheduled for this DAG until this is fixed."
    )
    assert "keeps running" not in message


def test_long_messages_are_clipped() -> None:
    issues = [SpecIssue(f"spec.tasks[{i}].image", "x" * 100) for i in range(200)]
    message = status.issues_message(issues)
    patch = status.ready_status(None, ok=False, reason="R", message=message, generation=1, now=NOW)
    assert len(patch["conditions"][0]["message"]) == status.MAX_MESSAGE
    assert patch["conditions"][0]["message"].endswith("(truncated)")
    event = status.event_message(message)
    assert len(event) <= status.MAX_EVENT_MESSAGE
    assert "\n" not in event
