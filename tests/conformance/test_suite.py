"""The conformance suite as tests: every case, Sluice against Airflow's recorded observations.

A case fails when Sluice decides otherwise than Airflow did, unless the case names a
deviation the README documents; the failure message is the case's readable diff.
Run by `make conformance` (not by `make test`): no Airflow is needed.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from conformance import cases, check
from conformance.compare import Status, documented_deviations, render

CASES = cases.load_all()
DOCUMENTED = documented_deviations(check.README.read_text())


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_case(case: cases.Case) -> None:
    outcome = check.check_case(case, DOCUMENTED).outcome
    assert outcome.status.passes, "\n".join(render(outcome, case.area, case.about))


def test_the_readme_states_the_suite_s_numbers() -> None:
    """The README says how many cases there are and how many match; keep it true."""
    statuses = Counter(check.check_case(case, DOCUMENTED).outcome.status for case in CASES)
    found = re.search(
        r"(\d+) cases, (\d+) match and (\d+) differ as", " ".join(check.README.read_text().split())
    )
    assert found, "the README's Semantics section states the conformance numbers"
    assert tuple(int(n) for n in found.groups()) == (
        len(CASES),
        statuses[Status.MATCH],
        statuses[Status.DEVIATION],
    )
