"""`make conformance`: every case's Sluice observations against Airflow's recorded ones.

Needs no Airflow: the Sluice side is computed (`sluice_side`: in-process for the
schedule area, one `sluice standalone` run for the executed areas), Airflow's
side is read from `expected/`, one record per Airflow version. Prints each case
against each version (the diff under one that differs) and a summary line; the
exit status is 0 only if every case matches every version or differs from it as
a deviation docs/semantics.md documents.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from conformance import cases as case_files
from conformance import converted, records, sluice_side
from conformance.compare import Outcome, documented_deviations, judge, render, summary

# Where the deviations are documented, and the suite's numbers stated.
SEMANTICS = case_files.ROOT.parent / "docs" / "semantics.md"
# How a converted case's result is labelled beside the case's own.
CONVERTED = ", converted by sluice convert"


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
    subject: case_files.Case | None = None,
) -> list[Checked]:
    """The case against each Airflow version's record; `subject`: observe this instead
    (the case's Airflow DAG converted back, `converted`), judged by the case's records."""
    recorded = records.load(case, expected)
    observed = sluice_side.observe_all([subject or case])[case.name]
    suffix = CONVERTED if subject is not None else ""
    checked = []
    for version in versions:
        record = recorded.get(version)
        if record is None:
            outcome = judge(case.name, None, observed)
            checked.append(Checked(case, version + suffix, f"Airflow {version}{suffix}", outcome))
            continue
        outcome = judge(
            case.name,
            record.observations,
            observed,
            deviation=case.deviation_for(version),
            documented=documented,
            stale=records.staleness(case, record, dags),
        )
        checked.append(Checked(case, version + suffix, record.label + suffix, outcome))
    return checked


def check_all(
    selected: Sequence[case_files.Case], semantics: Path = SEMANTICS, with_converted: bool = True
) -> list[Checked]:
    """Every case, then (`with_converted`) every case's Airflow DAG as `sluice convert`
    converts it, against the same records."""
    documented = documented_deviations(semantics.read_text())
    sluice_side.observe_all(selected)  # the executed cases together, in one standalone run
    checked = [item for case in selected for item in check_case(case, documented)]
    if not with_converted:
        return checked
    subjects = {case.name: converted.converted(case) for case in selected}
    sluice_side.observe_all(list(subjects.values()))  # likewise, in standalones of their own
    checked.extend(
        item
        for case in selected
        for item in check_case(case, documented, subject=subjects[case.name])
    )
    return checked


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
