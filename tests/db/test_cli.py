"""The `sluice` command against a real Postgres: exit codes, output formats, clear errors.

Every command that needs a database gets the per-test `db_url`, so no test starts
an embedded Postgres of its own. `standalone` runs as a real process (it installs
signal handlers and configures logging for the whole interpreter).
"""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner, Result

from sluice.cli import app
from sluice.db.dags import sync_dag
from sluice.db.models import Backfill, Dag, DagRun
from sluice.spec.models import DagManifest
from tests.manifests import BAD, GOOD
from tests.support import manifest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SLUICE = Path(sys.executable).parent / "sluice"


FAILING = """\
apiVersion: sluice.io/v1alpha1
kind: DAG
metadata: {name: failing}
spec:
  schedule: null
  defaults: {image: busybox:1.36, command: [sh, -c], retries: 0}
  tasks:
    - {name: boom, args: ['echo failing on purpose; exit 1']}
    - {name: after, args: [echo never], dependsOn: [boom]}
"""

TWO_DAGS = """\
apiVersion: sluice.io/v1alpha1
kind: DAG
metadata: {name: first}
spec:
  defaults: {image: busybox:1.36, command: [sh, -c]}
  tasks: [{name: a, args: [echo first]}]
---
apiVersion: sluice.io/v1alpha1
kind: DAG
metadata: {name: second}
spec:
  defaults: {image: busybox:1.36, command: [sh, -c]}
  tasks: [{name: a, args: [echo second]}]
"""

ISSUE_LINE = re.compile(r"^(?P<file>[^:]+): DAG/(?P<dag>[^:]+): (?P<field>[^:]+): (?P<msg>.+)$")


@pytest.fixture(autouse=True)
def _no_ambient_database(monkeypatch: pytest.MonkeyPatch) -> None:
    """No SLUICE_DATABASE_URL from the shell, and no embedded Postgres started by a command."""
    monkeypatch.delenv("SLUICE_DATABASE_URL", raising=False)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the command started an embedded Postgres despite --database-url")

    monkeypatch.setattr("sluice.runtime.start_embedded_postgres", refuse)


def sluice(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"SLUICE_DATABASE_URL": None})


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def runs_json(result: Result) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = json.loads(result.stdout)["runs"]
    return runs


def task_fields(run: dict[str, Any], field: str) -> dict[str, Any]:
    return {t["task"]: t[field] for t in run["tasks"]}


# --- dags validate ------------------------------------------------------------------------


def test_validate_good_file_exits_0_with_a_summary_on_stderr(tmp_path: Path) -> None:
    result = sluice("dags", "validate", str(write(tmp_path, "good.yaml", GOOD)))
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "1 valid, 0 invalid DAG document(s)" in result.stderr


def test_validate_the_examples(tmp_path: Path) -> None:
    files = sorted(str(p) for p in EXAMPLES.glob("*.yaml"))
    result = sluice("dags", "validate", *files)
    assert result.exit_code == 0, result.output
    assert f"{len(files)} valid, 0 invalid" in result.stderr


def test_validate_bad_file_exits_1_with_one_line_per_issue(tmp_path: Path) -> None:
    good, bad = write(tmp_path, "good.yaml", GOOD), write(tmp_path, "bad.yaml", BAD)
    result = sluice("dags", "validate", str(good), str(bad))
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines == [
        f"{bad}: DAG/bad: spec.tasks[0].dependsOn[0]: dependency 'z' not defined; tasks are: a, b",
        f"{bad}: DAG/bad: spec.tasks[1].retries: must be at least 0, got -1",
    ]
    assert all(ISSUE_LINE.match(line) for line in lines)
    assert "1 valid, 1 invalid DAG document(s)" in result.stderr


def test_validate_missing_file_is_an_issue_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = sluice("dags", "validate", str(missing))
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [f"{missing}: DAG/?: <file>: file not found"]


# --- dags test ----------------------------------------------------------------------------


def test_dags_test_hello_succeeds(db_url: str) -> None:
    result = sluice(
        "dags", "test", str(EXAMPLES / "hello.yaml"), "--output", "json", "--database-url", db_url
    )
    assert result.exit_code == 0, result.output
    (run,) = runs_json(result)
    assert run["dag"] == "hello"
    assert run["run_type"] == "manual"
    assert run["state"] == "success"
    assert task_fields(run, "state") == {
        "extract": "success",
        "transform-words": "success",
        "transform-numbers": "success",
        "load": "success",
    }
    assert set(task_fields(run, "try_number").values()) == {1}


def test_dags_test_failing_task_exits_1(db_url: str, tmp_path: Path) -> None:
    file = write(tmp_path, "failing.yaml", FAILING)
    result = sluice("dags", "test", str(file), "--output", "json", "--database-url", db_url)
    assert result.exit_code == 1, result.output
    (run,) = runs_json(result)
    assert run["state"] == "failed"
    assert task_fields(run, "state") == {"boom": "failed", "after": "upstream_failed"}
    assert task_fields(run, "try_number")["boom"] == 1


def test_dags_test_needs_dag_when_the_file_has_several(db_url: str, tmp_path: Path) -> None:
    file = write(tmp_path, "two.yaml", TWO_DAGS)
    result = sluice("dags", "test", str(file), "--database-url", db_url)
    assert result.exit_code == 2
    assert "error:" in result.stderr
    assert "--dag" in result.stderr
    assert "first" in result.stderr
    assert "second" in result.stderr


def test_dags_test_unknown_dag(db_url: str, tmp_path: Path) -> None:
    file = write(tmp_path, "two.yaml", TWO_DAGS)
    result = sluice("dags", "test", str(file), "--dag", "third", "--database-url", db_url)
    assert result.exit_code == 2
    assert "no DAG named 'third'" in result.stderr
    assert "first, second" in result.stderr


def test_dags_test_picks_the_named_dag(db_url: str, tmp_path: Path) -> None:
    file = write(tmp_path, "two.yaml", TWO_DAGS)
    result = sluice(
        "dags", "test", str(file), "--dag", "second", "-o", "json", "--database-url", db_url
    )
    assert result.exit_code == 0, result.output
    (run,) = runs_json(result)
    assert (run["dag"], run["state"]) == ("second", "success")


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ("[1, 2]", "--conf must be a JSON object"),
        ('"text"', "--conf must be a JSON object"),
        ("{not json", "--conf is not valid JSON"),
    ],
)
def test_dags_test_conf_must_be_a_json_object(db_url: str, conf: str, message: str) -> None:
    result = sluice(
        "dags", "test", str(EXAMPLES / "hello.yaml"), "--conf", conf, "--database-url", db_url
    )
    assert result.exit_code == 2
    assert message in result.stderr


def test_dags_test_conf_reaches_the_task(db_url: str, tmp_path: Path) -> None:
    out = tmp_path / "conf.json"
    file = write(
        tmp_path,
        "conf.yaml",
        f"""\
apiVersion: sluice.io/v1alpha1
kind: DAG
metadata: {{name: with-conf}}
spec:
  defaults: {{image: busybox:1.36, command: [sh, -c]}}
  tasks:
    - name: show
      args: ['printf "%s" "$SLUICE_CONF" > {out}']
""",
    )
    result = sluice(
        "dags", "test", str(file), "--conf", '{"a": 1}', "-o", "json", "--database-url", db_url
    )
    assert result.exit_code == 0, result.output
    assert runs_json(result)[0]["state"] == "success"
    assert json.loads(out.read_text()) == {"a": 1}


# --- standalone ---------------------------------------------------------------------------


def _wait_out_the_hour_boundary() -> None:
    """The example DAGs are hourly: a run that crosses an hour would make a second run due."""
    now = datetime.now(UTC)
    left = 3600 - (now.minute * 60 + now.second)
    if left < 30:
        time.sleep(left + 1)


def test_standalone_until_idle_runs_every_example_once(db_url: str) -> None:
    _wait_out_the_hour_boundary()
    env = {k: v for k, v in os.environ.items() if k != "SLUICE_DATABASE_URL"}
    proc = subprocess.run(
        [
            *(str(SLUICE), "standalone", str(EXAMPLES), "--until-idle"),
            *("--output", "json", "--database-url", db_url),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    runs = json.loads(proc.stdout)["runs"]
    assert sorted(r["dag"] for r in runs) == ["branching", "etl-retries", "hello"]
    by_dag = {r["dag"]: r for r in runs}
    assert {dag: r["state"] for dag, r in by_dag.items()} == {
        "branching": "success",
        "etl-retries": "success",
        "hello": "success",
    }
    assert all(r["run_type"] == "scheduled" for r in runs)

    assert set(task_fields(by_dag["hello"], "state").values()) == {"success"}

    etl = by_dag["etl-retries"]
    assert set(task_fields(etl, "state").values()) == {"success"}
    assert task_fields(etl, "try_number") == {
        "extract": 2,
        "transform": 1,
        "load": 1,
        "cleanup": 1,
    }

    # Even hours of the logical date take the full path, odd hours the quick one.
    branching = by_dag["branching"]
    hour = datetime.fromisoformat(branching["logical_date"]).astimezone(UTC).hour
    taken, not_taken = ("full", "quick") if hour % 2 == 0 else ("quick", "full")
    refresh = {"full": "full-refresh", "quick": "quick-update"}
    assert task_fields(branching, "state") == {
        "start": "success",
        f"check-{taken}": "success",
        refresh[taken]: "success",
        f"check-{not_taken}": "skipped",
        refresh[not_taken]: "skipped",
        "join": "success",
    }


# --- backfill -----------------------------------------------------------------------------


def _daily_manifest() -> DagManifest:
    return manifest(
        "daily",
        [{"name": "a", "command": ["sh", "-c"], "args": ["echo a"]}],
        schedule="@daily",
        startDate="2026-11-01T00:00:00Z",
    )


@pytest.fixture
def daily(sessions: sessionmaker[Session]) -> str:
    with sessions() as session:
        sync_dag(session, _daily_manifest(), datetime.now(UTC))
        session.commit()
    return "daily"


def _backfill(db_url: str, dag: str, start: str, end: str) -> Result:
    return sluice("backfill", dag, "--start", start, "--end", end, "--database-url", db_url)


def test_backfill_creates_a_run_per_day_inclusive(
    db_url: str, daily: str, sessions: sessionmaker[Session]
) -> None:
    result = _backfill(db_url, daily, "2026-11-01T00:00:00Z", "2026-11-03T00:00:00Z")
    assert result.exit_code == 0, result.output
    assert re.fullmatch(r"backfill \d+: 3 new run\(s\), 0 rerun, 0 skipped\n", result.stdout), (
        result.stdout
    )
    with sessions() as session:
        runs = session.execute(
            select(DagRun).where(DagRun.dag_id == daily).order_by(DagRun.logical_date)
        ).scalars()
        rows = [(r.run_type, r.state, r.logical_date.day, r.backfill_id) for r in runs]
        (backfill,) = session.execute(select(Backfill)).scalars()
    assert rows == [
        ("backfill", "queued", 1, backfill.id),
        ("backfill", "queued", 2, backfill.id),
        ("backfill", "queued", 3, backfill.id),
    ]


def test_backfill_again_skips_every_date(
    db_url: str, daily: str, sessions: sessionmaker[Session]
) -> None:
    assert _backfill(db_url, daily, "2026-11-01T00:00:00Z", "2026-11-03T00:00:00Z").exit_code == 0
    result = _backfill(db_url, daily, "2026-11-01T00:00:00Z", "2026-11-03T00:00:00Z")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert re.fullmatch(r"backfill \d+: 0 new run\(s\), 0 rerun, 3 skipped", lines[0])
    assert lines[1:] == [
        f"  skipped 2026-11-0{day}T00:00:00+00:00: "
        f"run backfill__2026-11-0{day}T00:00:00+00:00 exists (queued)"
        for day in (1, 2, 3)
    ]
    with sessions() as session:
        assert len(session.execute(select(DagRun.id)).all()) == 3


@pytest.mark.parametrize(
    ("dag", "start", "end", "message"),
    [
        ("daily", "2026-11-03T00:00:00Z", "2026-11-01T00:00:00Z", "is after --end"),
        ("nope", "2026-11-01T00:00:00Z", "2026-11-03T00:00:00Z", "'nope' is not registered"),
        ("daily", "2026-11-01T00:00:00", "2026-11-03T00:00:00Z", "--start '2026-11-01T00:00:00'"),
        ("daily", "2026-11-01T00:00:00Z", "2026-11-03", "--end '2026-11-03' has no timezone"),
        ("daily", "yesterday", "2026-11-03T00:00:00Z", "is not an ISO 8601 date-time"),
    ],
)
def test_backfill_errors_exit_2(
    db_url: str,
    daily: str,
    sessions: sessionmaker[Session],
    dag: str,
    start: str,
    end: str,
    message: str,
) -> None:
    result = _backfill(db_url, dag, start, end)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ")
    assert message in result.stderr
    with sessions() as session:
        assert session.execute(select(DagRun.id)).first() is None


def test_backfill_max_active_runs_must_be_positive(db_url: str, daily: str) -> None:
    result = sluice(
        "backfill",
        daily,
        "--start",
        "2026-11-01T00:00:00Z",
        "--end",
        "2026-11-03T00:00:00Z",
        "--max-active-runs",
        "0",
        "--database-url",
        db_url,
    )
    assert result.exit_code == 2
    assert "--max-active-runs must be at least 1" in result.stderr


def test_backfill_needs_a_cron_schedule(db_url: str, sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        sync_dag(session, manifest("by-hand", [{"name": "a"}], schedule=None), datetime.now(UTC))
        session.commit()
    result = _backfill(db_url, "by-hand", "2026-11-01T00:00:00Z", "2026-11-03T00:00:00Z")
    assert result.exit_code == 2
    assert "backfill needs a cron schedule" in result.stderr


def test_backfill_naive_datetime_message_says_timezone(db_url: str, daily: str) -> None:
    result = _backfill(db_url, daily, "2026-11-01T00:00:00", "2026-11-03T00:00:00")
    assert result.exit_code == 2
    assert "has no timezone" in result.stderr


# --- dags trigger -------------------------------------------------------------------------


def test_trigger_creates_a_manual_run(
    db_url: str, daily: str, sessions: sessionmaker[Session]
) -> None:
    result = sluice(
        "dags",
        "trigger",
        daily,
        "--run-id",
        "by-hand",
        "--conf",
        '{"k": "v"}',
        "--database-url",
        db_url,
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == "created run by-hand\n"
    with sessions() as session:
        (run,) = session.execute(select(DagRun)).scalars()
        assert (run.dag_id, run.run_id, run.run_type, run.state) == (
            "daily",
            "by-hand",
            "manual",
            "queued",
        )
        assert run.conf == {"k": "v"}


def test_trigger_default_run_id(db_url: str, daily: str) -> None:
    result = sluice(
        "dags", "trigger", daily, "--logical-date", "2026-11-05T12:00:00Z", "--database-url", db_url
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == "created run manual__2026-11-05T12:00:00+00:00\n"


def test_trigger_duplicate_run_id_is_a_clear_error(
    db_url: str, daily: str, sessions: sessionmaker[Session]
) -> None:
    args = ["dags", "trigger", daily, "--run-id", "twice", "--database-url", db_url]
    assert sluice(*args).exit_code == 0
    result = sluice(*args)
    assert result.exit_code == 2
    assert "already has a run with run_id 'twice'" in result.stderr
    with sessions() as session:
        assert len(session.execute(select(DagRun.id)).all()) == 1


def test_trigger_conf_must_be_an_object(db_url: str, daily: str) -> None:
    result = sluice("dags", "trigger", daily, "--conf", "[1]", "--database-url", db_url)
    assert result.exit_code == 2
    assert "--conf must be a JSON object" in result.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["dags", "trigger", "daily"],
        ["backfill", "daily", "--start", "2026-11-01T00:00:00Z", "--end", "2026-11-02T00:00:00Z"],
    ],
)
def test_a_dag_whose_version_cannot_be_loaded_is_a_clear_error(
    db_url: str, daily: str, sessions: sessionmaker[Session], command: list[str]
) -> None:
    with sessions() as session:
        session.execute(text("UPDATE dag_version SET spec = '{\"tasks\": 1}'"))
        session.commit()
    result = sluice(*command, "--database-url", db_url)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: DAG 'daily' version 1 (dag_version.id 1) cannot be")
    assert "spec.tasks: must be a list" in result.stderr
    assert "apply the DAG's manifest again" in result.stderr


def test_trigger_unknown_dag(db_url: str) -> None:
    result = sluice("dags", "trigger", "nope", "--database-url", db_url)
    assert result.exit_code == 2
    assert "'nope' is not registered" in result.stderr


# --- dags pause / unpause -----------------------------------------------------------------


def _paused(sessions: sessionmaker[Session], dag: str) -> bool:
    with sessions() as session:
        return bool(session.execute(select(Dag.is_paused).where(Dag.dag_id == dag)).scalar_one())


def test_pause_and_unpause(db_url: str, daily: str, sessions: sessionmaker[Session]) -> None:
    result = sluice("dags", "pause", daily, "--database-url", db_url)
    assert result.exit_code == 0, result.output
    assert result.stdout == "DAG 'daily' is paused\n"
    assert _paused(sessions, daily)
    # The same manifest synced again (the operator's resume, `scheduler --dags`) keeps it.
    with sessions() as session:
        sync_dag(session, _daily_manifest(), datetime.now(UTC))
        session.commit()
    assert _paused(sessions, daily)
    result = sluice("dags", "unpause", daily, "--database-url", db_url)
    assert result.exit_code == 0, result.output
    assert result.stdout == "DAG 'daily' is unpaused\n"
    assert not _paused(sessions, daily)


@pytest.mark.parametrize("command", ["pause", "unpause"])
def test_pause_unknown_dag(db_url: str, command: str) -> None:
    result = sluice("dags", command, "nope", "--database-url", db_url)
    assert result.exit_code == 2
    assert result.stderr == "error: DAG 'nope' is not registered; apply its manifest first\n"


# --- scheduler --dags ---------------------------------------------------------------------

TEAM_DAILY = """\
apiVersion: sluice.io/v1alpha1
kind: DAG
metadata: {name: daily%s}
spec:
  schedule: "@hourly"
  startDate: 2026-11-01T00:00:00Z
  defaults: {image: busybox:1.36}
  tasks: [{name: other}]
"""


@pytest.fixture
def owned_by_team_a(sessions: sessionmaker[Session]) -> tuple[str | None, int | None]:
    from sluice.handlers.store import apply_dag

    m = _daily_manifest()
    m = m.model_copy(update={"metadata": m.metadata.model_copy(update={"namespace": "team-a"})})
    with sessions() as session:
        apply_dag(session, m, datetime.now(UTC))
        session.commit()
    return _owner(sessions)


def _owner(sessions: sessionmaker[Session]) -> tuple[str | None, int | None]:
    with sessions() as session:
        row = session.execute(
            select(Dag.namespace, Dag.current_version_id).where(Dag.dag_id == "daily")
        ).one()
        return row.namespace, row.current_version_id


def _scheduler_until_the_loop(db_url: str, dags: Path, monkeypatch: pytest.MonkeyPatch) -> Result:
    """`sluice scheduler --dags DIR`, stopped where the loop would start."""
    from sluice.cli import scheduler as scheduler_cli

    def no_loop(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the loop would start here")

    monkeypatch.setattr(scheduler_cli, "Waker", no_loop)
    return sluice("scheduler", "--dags", str(dags), "--database-url", db_url, "--no-migrate")


def test_scheduler_dags_does_not_take_a_namespace_s_dag(
    db_url: str,
    tmp_path: Path,
    sessions: sessionmaker[Session],
    owned_by_team_a: tuple[str | None, int | None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write(tmp_path, "daily.yaml", TEAM_DAILY % "")
    write(tmp_path, "good.yaml", GOOD)
    result = _scheduler_until_the_loop(db_url, tmp_path, monkeypatch)
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        "error: metadata.name: DAG name 'daily' is already used by namespace 'team-a'; DAG names"
        " are unique across the cluster (they are the DAG id in the database): rename this DAG,"
        f" or leave it out of --dags {tmp_path} (nothing was synced)\n"
    )
    assert _owner(sessions) == owned_by_team_a
    with sessions() as session:  # all or nothing: the other file was not synced either
        assert session.get(Dag, "good") is None


def test_scheduler_dags_syncs_a_dag_of_its_own_namespace(
    db_url: str,
    tmp_path: Path,
    sessions: sessionmaker[Session],
    owned_by_team_a: tuple[str | None, int | None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write(tmp_path, "daily.yaml", TEAM_DAILY % ", namespace: team-a")
    result = _scheduler_until_the_loop(db_url, tmp_path, monkeypatch)
    assert str(result.exception) == "the loop would start here"
    namespace, version = _owner(sessions)
    assert namespace == "team-a"
    assert version != owned_by_team_a[1]  # the file's spec is the new version


def test_scheduler_freezes_its_startup_heap_before_the_loop(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full collection would walk everything set up before the loop (the Kubernetes
    client's models among it) inside the critical section (ADR 0052)."""
    from sluice.cli import scheduler as scheduler_cli

    frozen_at_run: list[int] = []

    def run(self: object, until: object) -> None:
        frozen_at_run.append(gc.get_freeze_count())

    monkeypatch.setattr(scheduler_cli.SchedulerLoop, "run", run)
    gc.unfreeze()
    try:
        result = sluice("scheduler", "--executor", "noop", "--database-url", db_url, "--no-migrate")
    finally:
        gc.unfreeze()
    assert result.exit_code == 0, result.output
    assert len(frozen_at_run) == 1
    assert frozen_at_run[0] > 0


def test_standalone_does_not_take_a_namespace_s_dag(
    db_url: str,
    tmp_path: Path,
    sessions: sessionmaker[Session],
    owned_by_team_a: tuple[str | None, int | None],
) -> None:
    write(tmp_path, "daily.yaml", TEAM_DAILY % "")
    env = {k: v for k, v in os.environ.items() if k != "SLUICE_DATABASE_URL"}
    proc = subprocess.run(
        [str(SLUICE), "standalone", str(tmp_path), "--until-idle", "--database-url", db_url],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(
        "error: metadata.name: DAG name 'daily' is already used by namespace 'team-a'"
    )
    assert proc.stderr.endswith(f"rename this DAG, or leave it out of {tmp_path}\n")
    assert _owner(sessions) == owned_by_team_a


# --- db and configuration -----------------------------------------------------------------


def test_db_upgrade_on_a_migrated_database(db_url: str) -> None:
    result = sluice("db", "upgrade", "--database-url", db_url)
    assert result.exit_code == 0, result.output
    assert "newest schema" in result.stdout


def test_database_url_from_the_environment(db_url: str) -> None:
    result = CliRunner().invoke(app, ["db", "upgrade"], env={"SLUICE_DATABASE_URL": db_url})
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "args",
    [
        ["db", "upgrade"],
        ["dags", "trigger", "hello"],
        ["dags", "pause", "hello"],
        ["dags", "unpause", "hello"],
        ["backfill", "hello", "--start", "2026-11-01T00:00:00Z", "--end", "2026-11-02T00:00:00Z"],
    ],
)
def test_missing_database_url_names_the_variable(args: list[str]) -> None:
    result = sluice(*args)
    assert result.exit_code == 2
    assert "SLUICE_DATABASE_URL" in result.stderr
    assert "--database-url" in result.stderr


@pytest.mark.parametrize(
    "option",
    [
        "--max-tis-per-query",
        "--critical-batches-per-tick",
        "--runs-examined-per-tick",
        "--runs-created-per-batch",
    ],
)
def test_scheduler_batch_knobs_must_be_positive(db_url: str, option: str) -> None:
    result = sluice("scheduler", option, "0", "--database-url", db_url, "--no-migrate")
    assert result.exit_code == 2
    assert f"{option} must be at least 1 (got 0)" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--heartbeat-interval", "10", "--zombie-threshold", "5"],
            "--zombie-threshold (5.0s) must be longer than --heartbeat-interval (10.0s)",
        ),
        (
            ["--heartbeat-interval", "10", "--scheduler-dead-after", "10"],
            "--scheduler-dead-after (10.0s) must be longer than --heartbeat-interval (10.0s)",
        ),
        (["--tick-interval", "0"], "--tick-interval must be more than 0 seconds (got 0.0)"),
        (
            ["--heartbeat-interval", "-1"],
            "--heartbeat-interval must be more than 0 seconds (got -1.0)",
        ),
        (["--runs-phase-budget", "0"], "--runs-phase-budget must be more than 0 seconds"),
        (["--quiet-round-interval", "0"], "--quiet-round-interval must be more than 0 seconds"),
    ],
)
def test_scheduler_intervals_must_make_sense(db_url: str, args: list[str], message: str) -> None:
    result = sluice("scheduler", *args, "--database-url", db_url, "--no-migrate")
    assert result.exit_code == 2
    assert message in result.stderr


def test_scheduler_phase_knobs_reach_the_loop(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from sluice.cli import scheduler as scheduler_cli
    from sluice.scheduler.config import SchedulerConfig

    seen: list[SchedulerConfig] = []

    def loop(sessions: object, executor: object, config: SchedulerConfig, **_: object) -> None:
        seen.append(config)
        raise RuntimeError("stop before the loop runs")

    monkeypatch.setattr(scheduler_cli, "SchedulerLoop", loop)
    result = sluice(
        "scheduler",
        *("--runs-created-per-batch", "100", "--runs-phase-budget", "0.25"),
        *("--no-wake-at-next-due", "--quiet-round-interval", "60"),
        *("--database-url", db_url, "--no-migrate"),
    )
    assert isinstance(result.exception, RuntimeError), result.output
    (config,) = seen
    assert (
        config.runs_created_per_batch,
        config.runs_phase_budget,
        config.wake_at_next_due,
        config.quiet_round_interval,
    ) == (100, 0.25, False, 60.0)


@pytest.mark.parametrize(("flag", "prepared"), [([], True), (["--no-prepared-statements"], False)])
def test_scheduler_prepares_statements_unless_told_not_to(
    db_url: str, monkeypatch: pytest.MonkeyPatch, flag: list[str], prepared: bool
) -> None:
    from sluice.cli import scheduler as scheduler_cli

    seen: dict[str, object] = {}

    def make_engine(url: str, **options: object) -> None:
        seen.update(options)
        raise RuntimeError("stop before the loop")

    monkeypatch.setattr(scheduler_cli, "make_engine", make_engine)
    result = sluice("scheduler", *flag, "--database-url", db_url, "--no-migrate")
    assert isinstance(result.exception, RuntimeError)
    assert seen == {"prepare_statements": prepared}


# --- dags list ----------------------------------------------------------------------------


def test_dags_list_shows_a_broken_dag_and_why(
    db_url: str, daily: str, sessions: sessionmaker[Session]
) -> None:
    with sessions() as session:
        sync_dag(session, manifest("bad-spec", [{"name": "a"}], schedule=None), datetime.now(UTC))
        session.execute(
            text(
                "UPDATE dag SET broken_reason = 'version 1 cannot be loaded: spec.tasks: bad',"
                " broken_at = '2026-12-01T00:00:00Z' WHERE dag_id = 'bad-spec'"
            )
        )
        session.commit()
    result = sluice("dags", "list", "-o", "json", "--database-url", db_url)
    assert result.exit_code == 0, result.output
    listed = {d["dag"]: d for d in json.loads(result.stdout)["dags"]}
    assert list(listed) == ["bad-spec", "daily"]
    assert listed["bad-spec"]["broken_reason"] == "version 1 cannot be loaded: spec.tasks: bad"
    assert listed["bad-spec"]["broken_at"] == "2026-12-01T00:00:00+00:00"
    assert listed["daily"] == {
        "dag": "daily",
        "namespace": None,
        "version": 1,
        "schedule": "@daily",
        "paused": False,
        "active": True,
        "next_run_after": listed["daily"]["next_run_after"],
        "broken_reason": None,
        "broken_at": None,
    }
    table = sluice("dags", "list", "--database-url", db_url)
    assert table.exit_code == 0, table.output
    rows = {line.split("│")[1].strip(): line for line in table.stdout.splitlines() if "│" in line}
    assert rows["bad-spec"].split("│")[7].strip() == "broken"
    assert rows["daily"].split("│")[7].strip() == "active"
    assert table.stdout.splitlines()[-1] == (
        "bad-spec: broken since 2026-12-01T00:00:00+00:00: "
        "version 1 cannot be loaded: spec.tasks: bad"
    )


def test_dags_list_needs_a_database_url() -> None:
    result = sluice("dags", "list")
    assert result.exit_code == 2
    assert "SLUICE_DATABASE_URL" in result.stderr


# --- dags runs ------------------------------------------------------------------------------


def test_dags_runs_shows_each_tasks_job_and_reason(
    db_url: str, sessions: sessionmaker[Session]
) -> None:
    """What a user reads after a try failed: its external id (a Job name) and the reason."""
    from sluice.db.models import TaskInstance

    with sessions() as session:
        sync_dag(session, manifest("shown", [{"name": "a"}, {"name": "b"}]), datetime.now(UTC))
        session.commit()
    assert (
        sluice("dags", "trigger", "shown", "--run-id", "r1", "--database-url", db_url).exit_code
        == 0
    )
    with sessions() as session:
        (a,) = session.execute(select(TaskInstance).where(TaskInstance.task_id == "a")).scalars()
        a.state, a.try_number, a.external_id = "failed", 1, "shown-a-1-0123456789"
        a.reason = "ImagePullBackOff for 300s (pod start timeout 300s): Back-off pulling image"
        a.evidence = {"pod_phase": "Pending"}
        session.commit()

    listed = sluice("dags", "runs", "shown", "--database-url", db_url)
    assert listed.exit_code == 0, listed.output
    assert "r1" in listed.stdout
    detail = sluice("dags", "runs", "shown", "--run", "r1", "--database-url", db_url)
    assert detail.exit_code == 0, detail.output
    assert (
        "a try 1 (shown-a-1-0123456789): failed: ImagePullBackOff for 300s (pod start timeout"
        " 300s): Back-off pulling image" in detail.stdout.splitlines()
    )
    data = json.loads(
        sluice(
            "dags", "runs", "shown", "--run", "r1", "--output", "json", "--database-url", db_url
        ).stdout
    )
    (run,) = data["runs"]
    tasks = {t["task"]: t for t in run["tasks"]}
    assert tasks["a"]["external_id"] == "shown-a-1-0123456789"
    assert tasks["a"]["reason"].startswith("ImagePullBackOff")
    assert tasks["a"]["evidence"] == {"pod_phase": "Pending"}
    assert tasks["b"]["reason"] is None

    missing = sluice("dags", "runs", "shown", "--run", "nope", "--database-url", db_url)
    assert missing.exit_code == 2
    assert "has no run 'nope'" in missing.stderr


@pytest.mark.parametrize(
    ("options", "reprocess"),
    [
        ([], "none"),
        (["--rerun-failed"], "failed"),
        (["--reprocess", "failed"], "failed"),
        (["--reprocess", "failed", "--rerun-failed"], "failed"),
        (["--reprocess", "completed"], "completed"),
    ],
)
def test_backfill_records_what_it_reprocesses(
    db_url: str, daily: str, sessions: sessionmaker[Session], options: list[str], reprocess: str
) -> None:
    result = sluice(
        "backfill",
        daily,
        "--start",
        "2026-11-01T00:00:00Z",
        "--end",
        "2026-11-01T00:00:00Z",
        *options,
        "--database-url",
        db_url,
    )
    assert result.exit_code == 0, result.output
    with sessions() as session:
        (backfill,) = session.execute(select(Backfill)).scalars()
    assert (backfill.reprocess, backfill.rerun_failed) == (reprocess, reprocess == "failed")


def test_backfill_rerun_failed_contradicting_reprocess_is_refused(db_url: str, daily: str) -> None:
    result = sluice(
        "backfill",
        daily,
        "--start",
        "2026-11-01T00:00:00Z",
        "--end",
        "2026-11-03T00:00:00Z",
        "--reprocess",
        "completed",
        "--rerun-failed",
        "--database-url",
        db_url,
    )
    assert result.exit_code == 2
    assert "--rerun-failed is --reprocess failed; it contradicts --reprocess completed" in (
        result.stderr
    )


# --- -o yaml: the same document as -o json -------------------------------------------------


def test_yaml_output_is_the_json_document(db_url: str, daily: str) -> None:
    listed = {
        output: sluice("dags", "list", "-o", output, "--database-url", db_url)
        for output in ("json", "yaml")
    }
    assert all(r.exit_code == 0 for r in listed.values()), listed
    assert yaml.safe_load(listed["yaml"].stdout) == json.loads(listed["json"].stdout)
    assert listed["yaml"].stdout.startswith("dags:\n")
    tested = sluice(
        "dags", "test", str(EXAMPLES / "hello.yaml"), "-o", "yaml", "--database-url", db_url
    )
    assert tested.exit_code == 0, tested.output
    (run,) = yaml.safe_load(tested.stdout)["runs"]
    assert (run["dag"], run["state"]) == ("hello", "success")
    runs = {
        output: sluice("dags", "runs", "hello", "-o", output, "--database-url", db_url)
        for output in ("json", "yaml")
    }
    assert yaml.safe_load(runs["yaml"].stdout) == json.loads(runs["json"].stdout)


def test_an_unknown_output_format_is_refused(db_url: str) -> None:
    result = sluice("dags", "list", "-o", "xml", "--database-url", db_url)
    assert result.exit_code == 2
    assert "--output 'xml' is not supported; use table, json or yaml" in result.stderr
