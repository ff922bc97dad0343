"""Status patches for Sluice objects: conditions with observedGeneration, built without I/O.

Every kind has one condition, `Ready`. `True` means the object's spec is in the
database as written; `False` says why not in `reason` (CamelCase, the same as
the Event's reason) and `message` (every issue with its field path). A
condition's `lastTransitionTime` moves only when its status changes, as
Kubernetes conventions ask.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sluice.spec.errors import SpecIssue

READY = "Ready"
# Reasons (CamelCase; also used for Events).
ACCEPTED = "Accepted"
INVALID_SPEC = "InvalidSpec"
NAME_CONFLICT = "NameConflict"
TRIGGERED = "Triggered"
TRIGGER_FAILED = "TriggerFailed"
BACKFILL_STARTED = "Started"
MARKED = "Marked"
MARK_REFUSED = "MarkRefused"
BACKFILL_FAILED = "BackfillFailed"
POOL_SYNCED = "Synced"
TASKS_CLEARED = "TasksCleared"
TASKS_MARKED = "TasksMarked"
ACTION_FAILED = "ActionFailed"
DEFAULT_POOL_PROTECTED = "DefaultPoolProtected"

# The CRDs cap condition messages at 32768 characters; Events at 1024 bytes.
MAX_MESSAGE = 8000
MAX_EVENT_MESSAGE = 1000


def timestamp(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(
    type_: str,
    ok: bool,
    reason: str,
    message: str,
    generation: int | None,
    now: datetime,
    previous: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """One condition; keeps the previous lastTransitionTime if the status did not change."""
    status = "True" if ok else "False"
    since = timestamp(now)
    for old in previous:
        if old.get("type") == type_ and old.get("status") == status:
            since = str(old.get("lastTransitionTime") or since)
    found: dict[str, Any] = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": clip(message, MAX_MESSAGE),
        "lastTransitionTime": since,
    }
    if generation is not None:
        found["observedGeneration"] = generation
    return found


def merge_conditions(
    previous: Sequence[Mapping[str, Any]], new: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """`previous` with the condition of the same type replaced by `new` (kept in place)."""
    merged = [dict(old) for old in previous if old.get("type") != new["type"]]
    position = next(
        (i for i, old in enumerate(previous) if old.get("type") == new["type"]), len(merged)
    )
    merged.insert(position, dict(new))
    return merged


def ready_status(
    body_status: Mapping[str, Any] | None,
    *,
    ok: bool,
    reason: str,
    message: str,
    generation: int | None,
    now: datetime,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole `status` patch: Ready condition, observedGeneration, and kind-specific fields."""
    previous = list((body_status or {}).get("conditions") or [])
    ready = condition(READY, ok, reason, message, generation, now, previous)
    patch: dict[str, Any] = dict(extra or {})
    patch["conditions"] = merge_conditions(previous, ready)
    if generation is not None:
        patch["observedGeneration"] = generation
    return patch


def issues_message(
    issues: Iterable[SpecIssue],
    *,
    kept_version: int | None = None,
    kept_broken: str | None = None,
) -> str:
    """Every issue as `path: message`, one per line, and what the scheduler runs meanwhile.

    `kept_broken` is why the kept version cannot be loaded (`dag.broken_reason`): then
    the scheduler creates no runs from it either.
    """
    found = list(issues)
    count = len(found)
    lines = [f"{count} issue{'s' if count != 1 else ''} in the spec:"]
    lines.extend(f"- {issue}" for issue in found)
    if kept_version is not None and kept_broken is not None:
        lines.append(
            f"The current version {kept_version} is broken: {kept_broken}. "
            "Nothing is scheduled for this DAG until this is fixed."
        )
    elif kept_version is not None:
        lines.append(f"The scheduler keeps running version {kept_version} until this is fixed.")
    else:
        lines.append("Nothing is scheduled for this DAG until this is fixed.")
    return "\n".join(lines)


def event_message(message: str) -> str:
    """An Event's message on one line, short enough for the API server."""
    return clip(" ".join(message.split()), MAX_EVENT_MESSAGE)


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = " ... (truncated)"
    return text[: limit - len(marker)] + marker
