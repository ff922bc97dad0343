"""Each conformance case's Airflow DAG file converts to the case's own spec.

The conformance suite (tests/conformance/test_converted.py, `make conformance`)
runs the converted manifests against the recorded Airflow observations; this is
the fast check beside it: the converter reads the generated file (the one the
recorded Airflows ran) back into exactly the DAG the case declares, every spec
field and every task field, with defaults applied.
"""

from __future__ import annotations

import pytest

from conformance import cases, converted

CASES = cases.load_all()


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_airflow_dag_converts_back_to_the_case(case: cases.Case) -> None:
    subject = converted.converted(case)
    assert converted.equivalence(case, subject) == []


def test_a_difference_is_named_field_by_field() -> None:
    case = next(case for case in CASES if case.name == "generated-dag-fields")
    subject = converted.converted(case)
    tasks = [task.model_copy(update={"retries": 7}) for task in subject.manifest.spec.tasks]
    spec = subject.manifest.spec.model_copy(update={"tasks": tasks, "catchup": False})
    changed = subject.manifest.model_copy(update={"spec": spec})
    differences = converted.equivalence(
        case, type(subject)(**{**vars(subject), "manifest": changed})
    )
    assert "spec.catchup: case True, converted False" in differences
    assert "tasks.extract.retries: case 2, converted 7" in differences
