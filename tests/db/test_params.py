"""A DAG's params reach its tasks under each run's conf, on Postgres, as real processes see them.

The params are resolved when a try is claimed, from the run's own DAG version and
conf (`scheduler.dispatch`), and reach the task as SLUICE_PARAMS and SLUICE_PARAM_*
(`spec.params`); the local executor's processes are what a DAG author's command sees.
"""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner, Result

from sluice.cli import app
from tests.support import FakeClock, ScriptedExecutor, make_loop, manifest, register, run_until_idle
from tests.support import trigger as trigger_run

DAG = """\
apiVersion: sluice.io/v1alpha1
kind: DAG
metadata: {{name: with-params}}
spec:
  params:
    mode: full
    limit: 1000
    dry_run: false
    tables: [orders, users]
    with space: kept
  defaults: {{image: busybox:1.36, command: [sh, -c]}}
  tasks:
    - name: show
      args:
        - |
          printf '%s\\n' "$SLUICE_PARAMS" "$SLUICE_PARAM_MODE" "$SLUICE_PARAM_LIMIT" \\
            "$SLUICE_PARAM_DRY_RUN" "${{SLUICE_PARAM_TABLES-unset}}" \\
            "${{SLUICE_PARAM_EXTRA-unset}}" "$SLUICE_CONF" > {out}
"""


def sluice(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"SLUICE_DATABASE_URL": None})


def run_once(db_url: str, file: Path, out: Path, *conf: str) -> list[str]:
    result = sluice("dags", "test", str(file), *conf, "-o", "json", "--database-url", db_url)
    assert result.exit_code == 0, result.output
    (run,) = json.loads(result.stdout)["runs"]
    assert run["state"] == "success", run
    return out.read_text().splitlines()


def test_a_run_s_tasks_see_the_params_under_its_conf(db_url: str, tmp_path: Path) -> None:
    out = tmp_path / "seen.txt"
    file = tmp_path / "dag.yaml"
    file.write_text(DAG.format(out=out))

    params, mode, limit, dry_run, tables, extra, conf = run_once(db_url, file, out)
    assert json.loads(params) == {
        "mode": "full",
        "limit": 1000,
        "dry_run": False,
        "tables": ["orders", "users"],
        "with space": "kept",
    }
    assert (mode, limit, dry_run) == ("full", "1000", "False")  # as Airflow's Jinja renders them
    assert (tables, extra) == ("unset", "unset")  # a list has no variable of its own
    assert conf == "{}"

    override = '{"limit": 5, "dry_run": true, "tables": "orders", "extra": "x y"}'
    params, mode, limit, dry_run, tables, extra, conf = run_once(
        db_url, file, out, "--conf", override
    )
    assert json.loads(params) == {
        "mode": "full",
        "limit": 5,
        "dry_run": True,
        "tables": "orders",
        "with space": "kept",
        "extra": "x y",  # a conf key that is no param is added, as on Airflow
    }
    assert (mode, limit, dry_run, tables, extra) == ("full", "5", "True", "orders", "x y")
    assert json.loads(conf) == json.loads(override)  # the conf itself is unchanged


def test_each_run_takes_the_params_of_its_own_dag_version(
    sessions: sessionmaker[Session],
) -> None:
    """A run made before the DAG changed keeps its version's params, as its tasks keep
    theirs; a later run gets the new ones."""
    clock = FakeClock()
    tasks = [{"name": "t"}]
    register(sessions, manifest("versions", tasks, params={"mode": "full"}), clock.now)
    trigger_run(sessions, "versions", clock.now, run_id="before", conf={"limit": 1})
    clock.advance(minutes=1)
    register(sessions, manifest("versions", tasks, params={"mode": "delta"}), clock.now)
    trigger_run(sessions, "versions", clock.now, run_id="after")
    executor = ScriptedExecutor()
    run_until_idle(make_loop(sessions, executor, clock))
    seen = {launch.run_id: launch for launch in executor.started}
    assert seen["before"].dag_params == {"mode": "full"}
    assert seen["after"].dag_params == {"mode": "delta"}
    assert json.loads(seen["before"].context_env()["SLUICE_PARAMS"]) == {
        "mode": "full",
        "limit": 1,
    }
    assert seen["after"].context_env()["SLUICE_PARAM_MODE"] == "delta"
