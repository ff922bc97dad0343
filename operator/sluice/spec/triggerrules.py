"""Trigger rules evaluated over the upstream counters kept on each task instance.

Readiness is event-driven (see docs/architecture.md): every task instance carries
how many of its upstream instances ended in each terminal state, so deciding
whether it may run is this pure function over one row, never a query. The
semantics are Airflow's `TriggerRuleDep` with `flag_upstream_failed` on: a rule
that can no longer be met settles the task as `skipped` or `upstream_failed`
as soon as the counters prove it, without waiting for every upstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from sluice.spec.models import TriggerRule
from sluice.spec.states import TaskState


@dataclass(frozen=True, slots=True)
class UpstreamCounts:
    """How many direct upstream task instances ended in each terminal state."""

    total: int
    success: int = 0
    failed: int = 0
    skipped: int = 0
    upstream_failed: int = 0

    @property
    def done(self) -> int:
        return self.success + self.failed + self.skipped + self.upstream_failed

    @property
    def failures(self) -> int:
        return self.failed + self.upstream_failed


class Verdict(Enum):
    """What the scheduler does with a task instance in state `none`."""

    WAIT = "wait"
    RUN = "run"
    SKIP = "skip"
    UPSTREAM_FAILED = "upstream_failed"

    @property
    def settles_as(self) -> TaskState | None:
        """The terminal state this verdict writes without running the task."""
        return _SETTLED.get(self)


_SETTLED = {Verdict.SKIP: TaskState.SKIPPED, Verdict.UPSTREAM_FAILED: TaskState.UPSTREAM_FAILED}


def evaluate(rule: TriggerRule, c: UpstreamCounts) -> Verdict:
    """Decide what a task whose upstream counters are `c` should do now."""
    if c.total == 0 or rule is TriggerRule.ALWAYS:
        return Verdict.RUN
    all_done = c.done >= c.total
    match rule:
        case TriggerRule.ALL_SUCCESS:
            if c.failures:
                return Verdict.UPSTREAM_FAILED
            if c.skipped:
                return Verdict.SKIP
            return Verdict.RUN if c.success >= c.total else Verdict.WAIT
        case TriggerRule.ALL_FAILED:
            if c.success or c.skipped:
                return Verdict.SKIP
            return Verdict.RUN if c.failures >= c.total else Verdict.WAIT
        case TriggerRule.ALL_DONE:
            return Verdict.RUN if all_done else Verdict.WAIT
        case TriggerRule.ALL_SKIPPED:
            if c.success or c.failures:
                return Verdict.SKIP
            return Verdict.RUN if c.skipped >= c.total else Verdict.WAIT
        case TriggerRule.ONE_SUCCESS:
            if c.success:
                return Verdict.RUN
            if all_done:
                return Verdict.SKIP if c.skipped == c.done else Verdict.UPSTREAM_FAILED
            return Verdict.WAIT
        case TriggerRule.ONE_FAILED:
            if c.failures:
                return Verdict.RUN
            return Verdict.SKIP if all_done else Verdict.WAIT
        case TriggerRule.ONE_DONE:
            if c.success or c.failed:
                return Verdict.RUN
            return Verdict.SKIP if all_done else Verdict.WAIT
        case TriggerRule.NONE_FAILED:
            if c.failures:
                return Verdict.UPSTREAM_FAILED
            return Verdict.RUN if all_done else Verdict.WAIT
        case TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS:
            if c.failures:
                return Verdict.UPSTREAM_FAILED
            if not all_done:
                return Verdict.WAIT
            return Verdict.SKIP if c.skipped >= c.total else Verdict.RUN
        case TriggerRule.NONE_SKIPPED:
            if c.skipped:
                return Verdict.SKIP
            return Verdict.RUN if all_done else Verdict.WAIT
    raise ValueError(f"unknown trigger rule {rule!r}")  # pragma: no cover - enum is closed
