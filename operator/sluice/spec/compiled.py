"""A DAG spec prepared for the scheduler: graph maps, priorities and timetable, computed once.

The scheduler reads a DAG version's spec from the database and keeps the
compiled form in memory keyed by version id (versions are immutable, so the
cache never goes stale).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from sluice.spec import graph
from sluice.spec.models import DagSpec, TaskSpec
from sluice.spec.timetables import RunInfo, Timetable, timetable_for


@dataclass(frozen=True)
class CompiledDag:
    dag_id: str
    version_id: int
    spec: DagSpec

    @cached_property
    def tasks(self) -> dict[str, TaskSpec]:
        return {t.name: t for t in self.spec.tasks}

    @cached_property
    def order(self) -> list[str]:
        return graph.topological_order(self.spec)

    @cached_property
    def priority_weights(self) -> dict[str, int]:
        return graph.priority_weights(self.spec)

    @cached_property
    def downstream(self) -> dict[str, list[str]]:
        result: dict[str, list[str]] = {name: [] for name in self.tasks}
        for task in self.spec.tasks:
            for upstream in task.depends_on:
                result[upstream].append(task.name)
        return {name: sorted(children) for name, children in result.items()}

    @cached_property
    def leaves(self) -> frozenset[str]:
        return frozenset(name for name, children in self.downstream.items() if not children)

    @cached_property
    def timetable(self) -> Timetable:
        return timetable_for(self.spec.schedule, self.spec.timezone)

    def next_run(self, last: RunInfo | None, now: datetime) -> RunInfo | None:
        """The scheduled run after `last` that the schedule, dates and catchup call for."""
        spec = self.spec
        return self.timetable.next_run(
            last,
            now=now,
            catchup=spec.catchup,
            start_date=spec.start_date,
            end_date=spec.end_date,
        )

    @cached_property
    def instance_columns(self) -> dict[str, list[Any]]:
        """What each task's instance starts as in every run of this version, column by
        column, in topological order (lists of names as JSON text); computed once."""
        tasks = [self.tasks[name] for name in self.order]
        weights = self.priority_weights
        return {
            "task": [t.name for t in tasks],
            "max_tries": [t.retries for t in tasks],
            "weight": [weights[t.name] for t in tasks],
            "pool": [t.pool for t in tasks],
            "slots": [t.pool_slots for t in tasks],
            "rule": [t.trigger_rule.value for t in tasks],
            "up": [json.dumps(sorted(t.depends_on)) for t in tasks],
            "down": [json.dumps(self.downstream[t.name]) for t in tasks],
            # Roots are ready to be looked at; the rest wait for their counters to move.
            "ready": [not t.depends_on for t in tasks],
            "past": [t.depends_on_past or t.wait_for_downstream for t in tasks],
            "wait": [t.wait_for_downstream for t in tasks],
        }

    @cached_property
    def has_past_dependencies(self) -> bool:
        """Does any task wait on its own previous run (dependsOnPast, waitForDownstream)?"""
        return any(t.depends_on_past or t.wait_for_downstream for t in self.spec.tasks)
