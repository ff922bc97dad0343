"""`make conformance`: every case's Sluice observations against Airflow's recorded ones.

Needs no Airflow: the Sluice side runs in-process (`sluice_side`), Airflow's
side is read from `expected/`. Prints each case (the diff under a case that
differs) and a summary line; the exit status is 0 only if every case matches
or differs as a deviation the README documents.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from conformance import cases as case_files
from conformance import records, sluice_side
from conformance.compare import Outcome, documented_deviations, judge, render, summary

README = case_files.ROOT.parent / "README.md"


@dataclass(frozen=True)
class Checked:
    case: case_files.Case
    outcome: Outcome
    airflow: str | None


def check_case(
    case: case_files.Case,
    documented: frozenset[str],
    expected: Path = records.EXPECTED,
    dags: Path = records.AIRFLOW_DAGS,
) -> Checked:
    record = records.load(case, expected)
    observed = sluice_side.observe(case)
    if record is None:
        return Checked(case, judge(case.name, None, observed), None)
    outcome = judge(
        case.name,
        record.observations,
        observed,
        deviation=case.deviation,
        documented=documented,
        stale=records.staleness(case, record, dags),
    )
    return Checked(case, outcome, record.airflow_label)


def check_all(selected: Sequence[case_files.Case], readme: Path = README) -> list[Checked]:
    documented = documented_deviations(readme.read_text())
    return [check_case(case, documented) for case in selected]


def report(checked: Sequence[Checked], write: Callable[[str], None] = print) -> bool:
    """Print every case and the summary; True if the suite passed."""
    for item in checked:
        for line in render(item.outcome, item.case.area, item.case.about):
            write(line)
    labels = sorted({item.airflow for item in checked if item.airflow})
    write(summary([item.outcome for item in checked], ", ".join(labels) or "Airflow"))
    return all(item.outcome.status.passes for item in checked)
