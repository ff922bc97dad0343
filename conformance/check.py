"""`make conformance`: every case's Sluice observations against Airflow's recorded ones.

Needs no Airflow: the Sluice side is computed (`sluice_side`: in-process for the
schedule area, one `sluice standalone` run for the executed areas), Airflow's
side is read from `expected/`, one record per Airflow version. Prints each case
against each version (the diff under one that differs) and a summary line; the
exit status is 0 only if every case matches every version or differs from it as
a deviation the README documents.
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
    airflow: str  # the version
    label: str  # the version and when it was recorded
    outcome: Outcome


def check_case(
    case: case_files.Case,
    documented: frozenset[str],
    expected: Path = records.EXPECTED,
    dags: Path = records.AIRFLOW_DAGS,
    versions: Sequence[str] = records.AIRFLOW_VERSIONS,
) -> list[Checked]:
    """The case against each Airflow version's record."""
    recorded = records.load(case, expected)
    observed = sluice_side.observe_all([case])[case.name]
    checked = []
    for version in versions:
        record = recorded.get(version)
        if record is None:
            outcome = judge(case.name, None, observed)
            checked.append(Checked(case, version, f"Airflow {version}", outcome))
            continue
        outcome = judge(
            case.name,
            record.observations,
            observed,
            deviation=case.deviation_for(version),
            documented=documented,
            stale=records.staleness(case, record, dags),
        )
        checked.append(Checked(case, version, record.label, outcome))
    return checked


def check_all(selected: Sequence[case_files.Case], readme: Path = README) -> list[Checked]:
    documented = documented_deviations(readme.read_text())
    sluice_side.observe_all(selected)  # the executed cases together, in one standalone run
    return [item for case in selected for item in check_case(case, documented)]


def report(checked: Sequence[Checked], write: Callable[[str], None] = print) -> bool:
    """Print every case against every version, and the summary; True if the suite passed."""
    for item in checked:
        for line in render(item.outcome, item.case.area, item.case.about, item.airflow):
            write(line)
    by_label: dict[str, list[Outcome]] = {}
    for item in checked:
        by_label.setdefault(item.label, []).append(item.outcome)
    write(summary(by_label, len({item.case.name for item in checked})))
    return all(item.outcome.status.passes for item in checked)
