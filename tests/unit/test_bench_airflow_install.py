"""How the benchmark and the conformance suite install Airflow, and the no-op executors'
bookkeeping: no Airflow, no network, no install is run here."""

from __future__ import annotations

import contextlib
import io
import json
import urllib.error
import urllib.request
from collections import namedtuple
from datetime import UTC, datetime
from pathlib import Path

import pytest
from bench.airflow_install import (
    PINS,
    RECORD,
    Constraints,
    check_reuse,
    constraints_url,
    find_constraints,
    install_command,
    install_record,
    looks_like_constraints,
    pin_for,
)
from bench.airflow_plugin.noop_batch import SUCCEED_BY_ID, SUCCEED_BY_KEY, Started

HEADER = (
    "\n#\n# This constraints file was automatically generated on 2025-02-10T00:00:00\n"
    '# via `uv pip install --resolution highest` for the "v2-10-test" branch of Airflow.\n#\n'
)
PINNED = "".join(f"package-{i}==1.{i}\n" for i in range(60))


def _write(folder: Path, version: str, text: str) -> Path:
    path = folder / f"constraints-{version}" / "constraints-3.11.txt"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def test_the_constraints_url_is_airflows_for_the_version_and_python() -> None:
    assert constraints_url("2.10.5") == (
        "https://raw.githubusercontent.com/apache/airflow/constraints-2.10.5/constraints-3.11.txt"
    )


def test_only_a_generated_constraints_file_is_taken() -> None:
    assert looks_like_constraints(HEADER + PINNED)
    assert not looks_like_constraints(PINNED)  # no header: not Airflow's file
    assert not looks_like_constraints(HEADER + "package-0==1.0\n")  # too few pins
    assert not looks_like_constraints(HEADER + PINNED + "loose>=1\n")  # a range, not a pin


def test_a_local_copy_is_used_before_a_download(tmp_path: Path) -> None:
    first, second = tmp_path / "repo", tmp_path / "cache"
    path = _write(second, "2.10.5", HEADER + PINNED)
    found = find_constraints("2.10.5", dirs=[first, second], download=False)
    assert found.path == path
    assert found.source == f"local copy {path}"
    assert len(found.sha256) == 64
    # A file that is not Airflow's is passed over, and the reason kept.
    _write(first, "2.10.5", "not constraints\n")
    assert find_constraints("2.10.5", dirs=[first, second], download=False).path == path
    missing = find_constraints("3.3.2", dirs=[first, second], download=False)
    assert missing.path is None
    assert missing.source == "no local copy of constraints-3.3.2/constraints-3.11.txt"


def test_a_download_is_kept_in_the_last_folder_or_says_why_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(url: str, timeout: float) -> object:
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(urllib.request, "urlopen", unreachable)
    missing = find_constraints("2.10.5", dirs=[tmp_path / "a", tmp_path / "b"])
    assert missing.path is None
    assert missing.source == (
        "no local copy of constraints-2.10.5/constraints-3.11.txt, and"
        f" {constraints_url('2.10.5')} could not be read: Name or service not known"
    )
    assert missing.as_dict() == {"file": None, "unavailable": missing.source}

    def answers(body: str) -> object:
        return lambda url, timeout: contextlib.nullcontext(io.BytesIO(body.encode()))

    monkeypatch.setattr(urllib.request, "urlopen", answers("<html>rate limited</html>"))
    refused = find_constraints("2.10.5", dirs=[tmp_path / "a", tmp_path / "b"])
    assert refused.path is None
    assert refused.source.endswith("did not answer with an Airflow constraints file")
    monkeypatch.setattr(urllib.request, "urlopen", answers(HEADER + PINNED))
    found = find_constraints("2.10.5", dirs=[tmp_path / "a", tmp_path / "b"])
    assert found.path == tmp_path / "b" / "constraints-2.10.5" / "constraints-3.11.txt"
    assert found.source == constraints_url("2.10.5")
    assert found.path.read_text() == HEADER + PINNED


def test_the_install_uses_the_constraints_file_or_says_it_fell_back(tmp_path: Path) -> None:
    pin = PINS["3.3.2"]
    path = _write(tmp_path, "3.3.2", HEADER + PINNED)
    pinned = Constraints(path, "local copy", "ab" * 32)
    assert install_command("uv", pin, pinned) == [
        "uv", "pip", "install", "apache-airflow==3.3.2", "psycopg2-binary", "--constraint",
        str(path),
    ]  # fmt: skip
    none = Constraints(None, "no local copy")
    assert install_command("uv", pin, none)[-2:] == ["--exclude-newer", pin.exclude_newer]


def test_both_suites_install_each_airflow_the_same_way() -> None:
    pin = PINS["2.10.5"]
    assert pin_for("2.10.5", None, None) == pin
    assert pin_for("2.10.5", pin.venv, pin.exclude_newer) == pin
    with pytest.raises(ValueError, match="installed one way"):
        pin_for("2.10.5", pin.venv.parent / "elsewhere", None)
    with pytest.raises(ValueError, match="installed one way"):
        pin_for("3.3.2", None, "2030-01-01T00:00:00Z")
    with pytest.raises(ValueError, match="no pin"):
        pin_for("1.10.15", None, None)


def test_a_venv_is_reused_only_as_an_install_now_would_make_it(tmp_path: Path) -> None:
    pin = PINS["2.10.5"]
    pinned = Constraints(tmp_path / "c.txt", "local copy", "ab" * 32)
    none = Constraints(None, "no local copy")
    made = {"version": "2.10.5", "method": "constraints", "constraints": pinned.as_dict()}
    check_reuse(pin, made, pinned)
    check_reuse(pin, made, none)  # the file went away: what is installed stays pinned
    with pytest.raises(RuntimeError, match=r"has Airflow 2\.10\.4, not 2\.10\.5"):
        check_reuse(pin, {**made, "version": "2.10.4"}, pinned)
    with pytest.raises(RuntimeError, match="remove the venv"):
        check_reuse(pin, made, Constraints(pinned.path, "local copy", "cd" * 32))
    fallback = {"version": "2.10.5", "method": "exclude-newer", "constraints": none.as_dict()}
    check_reuse(pin, fallback, none)
    with pytest.raises(RuntimeError, match="reinstall it pinned"):
        check_reuse(pin, fallback, pinned)


def test_the_install_record_carries_the_packages_installed(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    for name in ("apache_airflow-2.10.5", "psycopg2_binary-2.9.10", "SQLAlchemy-1.4.54"):
        (site / f"{name}.dist-info").mkdir(parents=True)
    legacy = install_record(tmp_path)
    assert legacy["version"] == "2.10.5"
    assert legacy["method"].startswith("unknown: no install record")
    assert legacy["packages"] == {
        "apache-airflow": "2.10.5",
        "psycopg2-binary": "2.9.10",
        "sqlalchemy": "1.4.54",
    }
    (tmp_path / RECORD).write_text(json.dumps({"version": "2.10.5", "method": "constraints"}))
    assert install_record(tmp_path)["method"] == "constraints"


Key = namedtuple("Key", "dag_id task_id run_id try_number map_index")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_executors_end_every_try_handed_over_once_guarded_by_its_try() -> None:
    started: Started[Key] = Started()
    a, b = Key("d", "t0", "r", 1, -1), Key("d", "t1", "r", 2, -1)
    started.add(a)
    started.add(b)
    assert len(started) == 2
    statement, params, keys = started.take(NOW)
    assert statement == SUCCEED_BY_KEY
    assert "try_number = :try_number AND state IN ('queued', 'running')" in statement
    assert keys == [a, b]
    assert params[1] == {
        "now": NOW, "dag_id": "d", "task_id": "t1", "run_id": "r", "map_index": -1,
        "try_number": 2,
    }  # fmt: skip
    assert len(started) == 0
    assert started.take(NOW)[1:] == ([], [])


def test_airflow_3s_executor_ends_tries_by_task_instance_id() -> None:
    started: Started[Key] = Started()
    key = Key("d", "t0", "r", 3, -1)
    started.add(key, "0193-uuid")
    statement, params, keys = started.take(NOW)
    assert statement == SUCCEED_BY_ID
    assert params == [{"now": NOW, "id": "0193-uuid", "try_number": 3}]
    assert keys == [key]
    started.add(key, "0193-uuid")
    started.add(Key("d", "t1", "r", 1, -1))
    with pytest.raises(ValueError, match="every try handed over has an id"):
        started.take(NOW)
    started.add(key)
    started.clear()
    assert len(started) == 0


def test_each_airflow_gets_the_same_dag_and_knobs_in_its_own_dialect() -> None:
    from bench.airflow_side import PEERS, airflow_env, dag_source
    from bench.common import Knobs
    from bench.shapes import Workload

    workload = Workload("grid", 2, 6)
    knobs = Knobs(max_tis_per_query=512, runs_examined=100)
    two, three = PEERS["airflow"], PEERS["airflow3"]
    assert (two.version, three.version) == ("2.10.5", "3.3.2")
    sources = {peer.major: dag_source(peer, workload, "grid-0", knobs) for peer in (two, three)}
    for source in sources.values():
        compile(source, "dag.py", "exec")  # valid Python, whichever Airflow reads it
        assert f"UPSTREAM: dict[str, list[str]] = {workload.graph()!r}" in source
    assert "from airflow.operators.bash import BashOperator" in sources[2]
    assert "from airflow.sdk import DAG" in sources[3]
    assert "from airflow.providers.standard.operators.bash import BashOperator" in sources[3]
    # Apart from the imports and the header, the same text on both.
    body = [s.split("UPSTREAM", 1)[1] for s in sources.values()]
    assert body[0] == body[1]

    envs = {p.major: airflow_env(p, "postgresql://h/db", knobs, Path("/d")) for p in (two, three)}
    for peer, env in zip((two, three), envs.values(), strict=True):
        assert env["AIRFLOW__CORE__EXECUTOR"] == peer.executor
        assert env["AIRFLOW__SCHEDULER__MAX_TIS_PER_QUERY"] == "512"
        assert env["AIRFLOW__SCHEDULER__MAX_DAGRUNS_PER_LOOP_TO_SCHEDULE"] == "100"
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == "postgresql+psycopg2://h/db"
        # Not the folder holding the executors: Airflow imports every plugin module.
        assert env["AIRFLOW__CORE__PLUGINS_FOLDER"] != env["PYTHONPATH"]
    assert envs[2]["AIRFLOW__SCHEDULER__STANDALONE_DAG_PROCESSOR"] == "True"
    assert "AIRFLOW__SCHEDULER__STANDALONE_DAG_PROCESSOR" not in envs[3]
    assert len(envs[3]["AIRFLOW__API_AUTH__JWT_SECRET"]) >= 64
    assert two.executor == "bench_noop_executor.BenchNoopExecutor"
    assert three.executor == "bench_noop_executor3.BenchNoopExecutor"
    assert two.base_template != three.base_template
