"""`sluice convert`: what it writes, where, and its exit status."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sluice.cli import app
from sluice.spec.models import DagManifest
from sluice.spec.validation import load_dag_documents

CLEAN = """\
from datetime import datetime
from airflow import DAG
from airflow.operators.bash import BashOperator
with DAG("clean", schedule="@daily", start_date=datetime(2026, 1, 1), catchup=False):
    BashOperator(task_id="a", bash_command="echo {{ ds }}")
"""
WITH_GAP = CLEAN.replace("clean", "gappy") + (
    "    from airflow.operators.python import PythonOperator\n"
    "    PythonOperator(task_id='b', python_callable=print)\n"
)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {}
    for name, text in (("clean", CLEAN), ("gappy", WITH_GAP)):
        paths[name] = tmp_path / f"{name}.py"
        paths[name].write_text(text)
    return paths


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["convert", *args])
    return result.exit_code, result.stdout, result.stderr


def test_a_clean_file_prints_valid_manifests_on_stdout(files: dict[str, Path]) -> None:
    code, out, err = run(str(files["clean"]))
    assert code == 0
    (parsed,) = load_dag_documents(out)
    assert isinstance(parsed, DagManifest)
    assert parsed.metadata.name == "clean"
    assert "1 manifest(s) written; 0 gap(s)" in err


def test_a_gap_fails_and_writes_nothing(files: dict[str, Path], tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    code, out, err = run(str(files["gappy"]), "-o", str(out_dir))
    assert code == 1
    assert out == ""
    assert not out_dir.exists()
    assert f"{files['gappy']}:7: DAG 'gappy' task 'b' gap: PythonOperator runs a Python" in err
    assert "--partial" in err


def test_partial_writes_each_dag_with_its_gaps_marked(
    files: dict[str, Path], tmp_path: Path
) -> None:
    out_dir = tmp_path / "out"
    code, _, err = run(str(tmp_path), "--partial", "-o", str(out_dir), "--image", "alpine:3.20")
    assert code == 0
    assert sorted(path.name for path in out_dir.iterdir()) == ["clean.yaml", "gappy.yaml"]
    text = (out_dir / "gappy.yaml").read_text()
    assert "    # GAP line 7: PythonOperator runs a Python callable" in text
    assert "image: alpine:3.20" in text
    (parsed,) = load_dag_documents(text)
    assert isinstance(parsed, DagManifest)
    assert parsed.spec.task("b").args[0].endswith("exit 1")
    assert "2 manifest(s) written" in err


def test_unreadable_python_names_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n")
    code, out, err = run(str(bad))
    assert code == 1
    assert out == ""
    assert f"error: {bad}:1:" in err
    assert "invalid Python" in err
