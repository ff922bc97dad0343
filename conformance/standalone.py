"""`python -m conformance standalone`: the in-process Sluice side against `sluice standalone`.

`make conformance` computes Sluice's side with the scheduler's own functions, at
each case's `now`, without a database. This checks that shortcut once against
the whole product: every case whose runs do not depend on the clock (the same at
its `now` and at the real one; no manual runs; the single `work` task) is run
by `sluice standalone DIR --until-idle --output json` on an embedded Postgres,
and the runs it made (logical dates from its JSON, data intervals from what
each task printed of `SLUICE_DATA_INTERVAL_*`) must be the ones `sluice_side`
computed. It starts Postgres and runs about a hundred tasks: a minute or two,
so it is not part of `make conformance`.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conformance import cases, sluice_side
from sluice.spec.compiled import CompiledDag

_INTERVAL = re.compile(r" for (\S+) \.\. (\S+)")


def eligible(case: cases.Case, now: datetime) -> bool:
    if case.now is None:  # an executed case: `make conformance` runs it with standalone
        return False
    if (
        case.manual_runs
        or case.last_run
        or [task.name for task in case.manifest.spec.tasks] != ["work"]
    ):
        return False
    compiled = CompiledDag(case.name, 0, case.manifest.spec)
    at_case_now = sluice_side.schedule(compiled, case.now)["scheduled"]
    return bool(at_case_now == sluice_side.schedule(compiled, now)["scheduled"])


def sluice_command() -> list[str]:
    """The `sluice` CLI of this Python (whatever is on PATH may be another install)."""
    return [
        sys.executable,
        "-c",
        "import sys; from sluice.cli import main; sys.argv[0] = 'sluice'; main()",
    ]


def run_standalone(
    selected: Sequence[cases.Case],
    workdir: Path,
    *,
    database_url: str | None = None,
    failed_runs_ok: bool = False,
    stop_after: float | None = None,
    during: tuple[float, Callable[[], None]] | None = None,
) -> list[dict[str, Any]]:
    """`sluice standalone` over the cases' manifests until idle: the runs its JSON lists.

    Its own embedded Postgres in `workdir` unless `database_url` is given. It exits 1
    when a run failed; `failed_runs_ok` when that is what some cases expect. With
    `stop_after`, it runs that many seconds instead and is stopped with SIGTERM (it then
    prints the runs as they are, ended or not). With `during` (SECONDS, ACTION), ACTION
    is called that many seconds after it started, while it runs, unless it was idle
    before."""
    dags = workdir / "dags"
    dags.mkdir(parents=True)
    for case in selected:
        shutil.copy(case.path, dags / case.path.name)
    database = ["--database-url", database_url] if database_url else []
    until = ["--until-idle"] if stop_after is None else []
    process = subprocess.Popen(
        [
            *sluice_command(),
            "standalone",
            str(dags),
            *until,
            "--output",
            "json",
            "--state-dir",
            str(workdir / "state"),
            "--tick-interval",
            "0.2",
            *database,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if during is not None:
            try:
                stdout, stderr = process.communicate(timeout=during[0])
            except subprocess.TimeoutExpired:
                try:
                    during[1]()
                except BaseException:
                    process.kill()
                    process.communicate()
                    raise
                stdout, stderr = process.communicate(timeout=900)
        else:
            stdout, stderr = process.communicate(timeout=stop_after or 900)
    except subprocess.TimeoutExpired:
        if stop_after is None:
            process.kill()
            raise
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=120)
    failed_runs = process.returncode == 1 and stderr.rstrip().endswith("run(s) failed")
    if process.returncode and not (failed_runs_ok and failed_runs):
        raise RuntimeError(f"sluice standalone exited {process.returncode}:\n{stderr}")
    runs: list[dict[str, Any]] = json.loads(stdout)["runs"]
    return runs


def observed_runs(
    runs: Sequence[dict[str, Any]], logs: Path
) -> dict[str, list[tuple[str | None, ...]]]:
    """(logical date, interval start, interval end, state) per DAG, from the JSON and task logs."""
    by_dag: dict[str, list[tuple[str | None, ...]]] = {}
    for run in sorted(runs, key=lambda r: (r["dag"], r["logical_date"])):
        safe_run = run["run_id"].replace(":", "_").replace("+", "_")
        log = logs / run["dag"] / safe_run / "work" / "1.log"
        found = _INTERVAL.search(log.read_text()) if log.exists() else None
        start, end = (_utc(found[1]), _utc(found[2])) if found else (None, None)
        logical = _utc(run["logical_date"])
        by_dag.setdefault(run["dag"], []).append((logical, start, end, run["state"]))
    return by_dag


def _utc(text: str) -> str | None:
    return cases.instant(datetime.fromisoformat(text))


def expected_runs(case: cases.Case) -> list[tuple[str | None, ...]]:
    assert case.now is not None, "only schedule cases are eligible"
    compiled = CompiledDag(case.name, 0, case.manifest.spec)
    return [
        (run["logical_date"], run["data_interval_start"], run["data_interval_end"], "success")
        for run in sluice_side.schedule(compiled, case.now)["scheduled"]
    ]


def main(selected: Sequence[cases.Case]) -> int:
    now = datetime.now(UTC)
    chosen = [case for case in selected if eligible(case, now)]
    with tempfile.TemporaryDirectory(prefix="sluice-conformance-standalone-") as tmp:
        runs = run_standalone(chosen, Path(tmp))
        observed = observed_runs(runs, Path(tmp) / "state" / "logs")
    failed = 0
    for case in chosen:
        expected = expected_runs(case)
        got = observed.get(case.name, [])
        if got == expected:
            print(f"ok   {case.area}/{case.name}: sluice standalone made the {len(got)} run(s)")
            continue
        failed += 1
        print(f"FAIL {case.area}/{case.name}: sluice standalone made other runs")
        print("\n".join(f"    - {row}" for row in expected if row not in got))
        print("\n".join(f"    + {row}" for row in got if row not in expected))
    total = sum(len(observed.get(case.name, [])) for case in chosen)
    print(
        f"standalone {'FAILED' if failed else 'passed'}: {len(chosen)} of {len(selected)} cases "
        f"(the ones the clock does not change), {total} runs, {failed} differ"
    )
    return 1 if failed else 0
