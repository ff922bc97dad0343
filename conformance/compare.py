"""Judging one case: Airflow's recorded observations against Sluice's, as a diff a person reads.

Pure: it takes both sides' observations (plain JSON-shaped dicts) and what is
known about the case (its documented deviation, whether the record is stale)
and returns an Outcome. Each section is rendered as lines (one run per line,
one definition field per line, one line per executed run and per task of it)
and the two renderings are diffed, `-` for Airflow and `+` for Sluice, so a
shifted run shows as one line each side rather than as a cascade of
index-wise mismatches.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# The schedule area's sections, then the executed areas' (`runs`: how each run ended;
# `order`: the waves tasks ran in, where the case asks; `triggers`: manual runs asked
# for before the DAG runs, created or refused).
SECTIONS = ("definition", "scheduled", "next", "manual", "triggers", "runs", "order")


class Status(StrEnum):
    MATCH = "match"
    DEVIATION = "documented deviation"
    DIFFERS = "differs"
    UNDOCUMENTED = "deviation not documented"
    NO_LONGER_DIFFERS = "deviation no longer differs"
    STALE = "stale record"
    UNRECORDED = "not recorded"

    @property
    def passes(self) -> bool:
        return self in (Status.MATCH, Status.DEVIATION)


@dataclass(frozen=True)
class Outcome:
    case: str
    status: Status
    diff: tuple[str, ...] = ()
    note: str = ""


def judge(
    case: str,
    airflow: Mapping[str, Any] | None,
    sluice: Mapping[str, Any],
    *,
    deviation: str | None = None,
    documented: frozenset[str] = frozenset(),
    stale: str | None = None,
) -> Outcome:
    """The case's outcome; `stale` is why Airflow's record no longer fits the case, if so."""
    if airflow is None:
        return Outcome(case, Status.UNRECORDED, note="run `make conformance-refresh`")
    if stale is not None:
        return Outcome(case, Status.STALE, note=f"{stale}; run `make conformance-refresh`")
    diff = tuple(diff_observations(airflow, sluice))
    if not diff:
        if deviation is not None:
            note = (
                f"drop the deviation annotation {deviation!r}"
                " (and its docs/semantics.md entry if unused)"
            )
            return Outcome(case, Status.NO_LONGER_DIFFERS, note=note)
        return Outcome(case, Status.MATCH)
    if deviation is None:
        return Outcome(case, Status.DIFFERS, diff)
    if deviation not in documented:
        note = f"{deviation!r} is not among docs/semantics.md's documented deviations"
        return Outcome(case, Status.UNDOCUMENTED, diff, note)
    return Outcome(case, Status.DEVIATION, diff, f"deviation {deviation!r} (docs/semantics.md)")


def diff_observations(airflow: Mapping[str, Any], sluice: Mapping[str, Any]) -> list[str]:
    """`-` Airflow / `+` Sluice lines for every section that differs; [] when all agree."""
    lines: list[str] = []
    for section in SECTIONS:
        if section not in airflow and section not in sluice:
            continue
        theirs = section_lines(section, airflow.get(section))
        ours = section_lines(section, sluice.get(section))
        if theirs == ours:
            continue
        lines.append(f"{section}:")
        lines.extend(_unified(theirs, ours))
    return lines


def section_lines(section: str, value: Any) -> list[str]:
    if section == "definition":
        return [f"{path} = {leaf!r}" for path, leaf in flatten(value or {})]
    if section == "next":
        return [run_line(value) if value else "none"]
    if section == "runs":
        return [line for run in value or [] for line in executed_run_lines(run)]
    if section == "order":
        return order_lines(value)
    if section == "triggers":
        return [
            f"trigger {item.get('logical_date')}: "
            + ("created" if item.get("created") else "refused")
            for item in value or []
        ]
    return [run_line(run) for run in value or []]


def executed_run_lines(run: Mapping[str, Any]) -> list[str]:
    """An executed run: its state, then each task's final state and try number."""
    lines = [f"run {run.get('logical_date')}: {run.get('state')}"]
    for name, task in sorted((run.get("tasks") or {}).items()):
        lines.append(f"  {name}: {task.get('state')}, try {task.get('try_number')}")
    return lines


def order_lines(order: Mapping[str, Any] | None) -> list[str]:
    """One line per wave (the tasks in it, by logical date), then how many ran at once."""
    if not order:
        return ["none"]
    lines = [
        f"wave {number}: {', '.join(names)}"
        for number, names in enumerate(order.get("waves") or [], 1)
    ]
    lines.append(
        f"at most {order.get('runs_at_once')} run(s) and {order.get('tasks_at_once')} "
        "task(s) at once"
    )
    return lines


def run_line(run: Mapping[str, Any]) -> str:
    text = (
        f"{run.get('logical_date')}  interval {run.get('data_interval_start')} .. "
        f"{run.get('data_interval_end')}  after {run.get('run_after')}"
    )
    return f"triggered {run['triggered_at']}: {text}" if "triggered_at" in run else text


def flatten(value: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    """(dotted path, leaf) pairs in key order; lists are leaves."""
    if isinstance(value, Mapping):
        for key in sorted(value):
            yield from flatten(value[key], f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, value


def _unified(theirs: Sequence[str], ours: Sequence[str]) -> list[str]:
    matcher = difflib.SequenceMatcher(a=theirs, b=ours, autojunk=False)
    out: list[str] = []
    for group in matcher.get_grouped_opcodes(1):
        out.append("  @@")
        for tag, a0, a1, b0, b1 in group:
            if tag == "equal":
                out.extend(f"      {line}" for line in theirs[a0:a1])
                continue
            out.extend(f"    - {line}" for line in theirs[a0:a1])
            out.extend(f"    + {line}" for line in ours[b0:b1])
    return out


_DEVIATION_ITEM = re.compile(r"^\s*- \*\*Deviation `([a-z0-9-]+)`\*\*", re.MULTILINE)
_HEADING = re.compile(r"^(#+) (.*)$", re.MULTILINE)


def documented_deviations(text: str) -> frozenset[str]:
    """Deviation ids listed in a markdown file's Semantics section (`- **Deviation `id`**:
    ...`): from the first heading that starts with "Semantics" (docs/semantics.md's title)
    to the next heading of its level or above; its subsections are in it."""
    headings = list(_HEADING.finditer(text))
    for index, heading in enumerate(headings):
        if not heading.group(2).startswith("Semantics"):
            continue
        level = len(heading.group(1))
        end = next(
            (later.start() for later in headings[index + 1 :] if len(later.group(1)) <= level),
            len(text),
        )
        return frozenset(_DEVIATION_ITEM.findall(text[heading.end() : end]))
    return frozenset()


def render(outcome: Outcome, area: str, about: str, airflow: str) -> list[str]:
    mark = "ok  " if outcome.status.passes else "FAIL"
    head = f"{mark} {area}/{outcome.case} vs Airflow {airflow}: {outcome.status.value}"
    lines = [head + (f" - {outcome.note}" if outcome.note else "")]
    if outcome.diff:
        lines.append(f"     {about}")
        lines.append("     (- Airflow, + Sluice)")
        lines.extend(f"   {line}" for line in outcome.diff)
    return lines


def summary(by_airflow: Mapping[str, Sequence[Outcome]], cases: int) -> str:
    """One line: the verdict, then each Airflow's counts."""
    parts = []
    failed = False
    for label, outcomes in by_airflow.items():
        counts = Counter(outcome.status for outcome in outcomes)
        failed = failed or any(not status.passes for status in counts)
        shown = [
            f"{counts[Status.MATCH]} match",
            f"{counts[Status.DEVIATION]} documented deviation(s)",
        ]
        shown.extend(
            f"{counts[status]} {status.value}"
            for status in Status
            if not status.passes and counts[status]
        )
        parts.append(f"{label}: {', '.join(shown)}")
    verdict = "FAILED" if failed else "passed"
    return f"conformance {verdict}: {cases} cases; {'; '.join(parts)}"
