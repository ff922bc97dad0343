"""The converter over a corpus of realistic Airflow DAG files, against checked-in output.

Each `convert_corpus/NAME.py` converts (as `sluice convert --partial` would) to
`convert_corpus/expected/NAME.txt`: the findings as printed, then the manifests.
Every manifest written must pass the same validation as `sluice dags validate`.
After a deliberate change, rewrite the expected files with
`SLUICE_UPDATE_CONVERT_CORPUS=1 pytest tests/unit/test_convert_corpus.py` and
read the diff before committing it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sluice.convert import Conversion, convert_source
from sluice.spec.models import DagManifest
from sluice.spec.validation import load_dag_documents

CORPUS = Path(__file__).parent / "convert_corpus"
EXPECTED = CORPUS / "expected"
FILES = sorted(CORPUS.glob("*.py"))


def rendered(conversion: Conversion) -> str:
    lines = [finding.render() for finding in conversion.all_findings]
    documents = "---\n".join(doc.text for doc in conversion.documents if doc.valid)
    return "\n".join(lines) + "\n==== manifests\n" + documents


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_each_file_converts_to_its_expected_output(path: Path) -> None:
    conversion = convert_source(path.read_text(), path.name)
    text = rendered(conversion)
    expected = EXPECTED / f"{path.stem}.txt"
    if os.environ.get("SLUICE_UPDATE_CONVERT_CORPUS"):
        EXPECTED.mkdir(exist_ok=True)
        expected.write_text(text)
    assert text == expected.read_text()


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_every_manifest_written_is_valid(path: Path) -> None:
    conversion = convert_source(path.read_text(), path.name)
    for document in conversion.documents:
        results = load_dag_documents(document.text)
        assert document.valid == all(isinstance(r, DagManifest) for r in results)
        if document.valid:
            assert len(results) == 1


def test_the_corpus_covers_what_issue_34_names() -> None:
    """A guard against the corpus shrinking: each construct is in some file."""
    text = "\n".join(path.read_text() for path in FILES)
    for construct in [
        "with DAG(", "@dag", "DAG(\n", "default_args", "schedule_interval=", "timedelta(hours=6)",
        "CronDataIntervalTimetable", "@hourly", "catchup=", "pendulum.datetime", "tz=",
        "end_date=", "max_active_runs", "max_active_tasks", ">>", "set_upstream",
        "set_downstream", "chain(", "cross_downstream", "TriggerRule.", "trigger_rule=",
        "retries", "retry_delay", "retry_exponential_backoff", "max_retry_delay",
        "execution_timeout", "pool=", "pool_slots", "priority_weight", "weight_rule",
        "depends_on_past", "wait_for_downstream", "BashOperator", "append_env", "env=",
        "skip_on_exit_code", "{{ ds }}", "{{ ts }}", "{{ run_id }}", "logical_date",
        "data_interval_start", "data_interval_end", "{{ dag.dag_id }}", "ti.try_number",
        "params.", "dag_run.conf", "ds_nodash", "| ds", "KubernetesPodOperator", "cmds=",
        "arguments=", "env_vars=", "container_resources", "EmptyOperator", "DummyOperator",
        "PythonOperator", "Sensor", "xcom_pull", ".expand(", "Variable.get", "days_ago",
        "TaskGroup", "for ", " for ",
    ]:  # fmt: skip
        assert construct in text, construct
