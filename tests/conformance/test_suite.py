"""The conformance suite as tests: every case, Sluice against Airflow's recorded observations.

A case fails when Sluice decides otherwise than Airflow did, unless the case names a
deviation docs/semantics.md documents; the failure message is the case's readable diff.
Run by `make conformance` (not by `make test`): no Airflow is needed. The executed
areas' cases run first, all together, in one `sluice standalone` (seconds).
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from conformance import cases, check, records, sluice_side
from conformance.compare import Status, documented_deviations, render

CASES = cases.load_all()
DOCUMENTED = documented_deviations(check.SEMANTICS.read_text())


@pytest.fixture(scope="module", autouse=True)
def _executed_cases_run_once() -> None:
    """Every executed case in one standalone run; each test then reads its runs."""
    sluice_side.observe_all(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_case(case: cases.Case) -> None:
    failed = [
        "\n".join(render(item.outcome, case.area, case.about, item.airflow))
        for item in check.check_case(case, DOCUMENTED)
        if not item.outcome.status.passes
    ]
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("version", records.AIRFLOW_VERSIONS)
def test_the_docs_state_the_suite_s_numbers(version: str) -> None:
    """docs/semantics.md and the README's summary of it say how many cases match each
    Airflow; keep both true."""
    statuses = Counter(
        item.outcome.status
        for case in CASES
        for item in check.check_case(case, DOCUMENTED, versions=[version])
    )
    for path in (check.SEMANTICS, check.SEMANTICS.parents[1] / "README.md"):
        text = " ".join(path.read_text().split())
        found = re.search(
            rf"against Airflow {re.escape(version)}, (\d+) cases, (\d+) match and (\d+) differ",
            text,
        )
        assert found, f"{path.name} states the numbers against Airflow {version}"
        assert tuple(int(n) for n in found.groups()) == (
            len(CASES),
            statuses[Status.MATCH],
            statuses[Status.DEVIATION],
        ), path.name
