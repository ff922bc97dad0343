"""`sluice convert` against the recorded Airflow observations (issue 34).

Every case's generated Airflow DAG (`conformance/airflow_dags/`, the file the
recorded Airflows ran) is converted, and the converted manifest is observed as
the case's own is (the executed areas in standalone runs of their own) and
judged against the same records: a converted DAG must behave as Airflow did,
or differ only as the case's documented deviation. Run by `make conformance`.
"""

from __future__ import annotations

import pytest

from conformance import cases, check, converted, sluice_side
from conformance.compare import documented_deviations, render

CASES = cases.load_all()
DOCUMENTED = documented_deviations(check.SEMANTICS.read_text())


@pytest.fixture(scope="module")
def subjects() -> dict[str, cases.Case]:
    """Every case converted; the executed ones then run together, apart from the cases'."""
    found = {case.name: converted.converted(case) for case in CASES}
    sluice_side.observe_all(list(found.values()))
    return found


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_converted_dag_behaves_as_airflow_did(
    case: cases.Case, subjects: dict[str, cases.Case]
) -> None:
    subject = subjects[case.name]
    assert subject.path != case.path
    failed = [
        "\n".join(render(item.outcome, case.area, case.about, item.airflow))
        for item in check.check_case(case, DOCUMENTED, subject=subject)
        if not item.outcome.status.passes
    ]
    assert not failed, "\n".join(failed)
