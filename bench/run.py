"""The benchmark CLI: `python -m bench.run --smoke|--quick|--compare|--scale [filters]`.

--smoke    Sluice only, tiny workloads, 1 and 2 replicas (under a minute; CI runs it).
--quick    Sluice only: every shape at 100x10 and 10x100, tis/query 16 and 512,
           1-3 replicas; 3 trials at 1 replica (the headline), 1 trial otherwise.
--compare  the same scenarios on both sides (installs Airflow 2.10.5 on first use).
--scale    the scheduler alone with 10,000 DAGs and 100,000 task instances.

Results go to bench/results/<mode>-<time>.json (rewritten after every trial, so an
interrupted run keeps what it measured) and .png (copied to <mode>-latest.json and
<mode>-tasks-per-s.png). `--render FILE.json [FILE.json ...]` reprints saved runs,
merged; `FILE.json:airflow` (or `:sluice`) takes one side's trials only, so a new
run of one side renders against a saved run of the other. With `--markdown`, as
the README's headline table. Figures come from database timestamps.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from bench import report
from bench.common import RESULTS, Knobs, Postgres
from bench.metrics import Trial, failed_trial
from bench.shapes import AIRFLOW_SHAPES, SHAPES, Workload

SIZES = {"100x10": (100, 10), "10x100": (10, 100)}
NO_CHART = "none (no trials, or matplotlib missing: `make bench-deps`)"
Runner = Callable[[Postgres, Workload, Knobs, int, int], Trial]


def plan(
    shapes: list[str], sizes: list[str], tis: list[int], replicas: list[int], trials: int
) -> list[tuple[Workload, int, int, int]]:
    """(workload, tis, replicas, trial); full trials at 1 replica, one trial beyond."""
    steps = []
    for t in tis:
        for size in sizes:
            dags, tasks = SIZES[size] if size in SIZES else map(int, size.split("x"))
            for shape in shapes:
                for r in replicas:
                    for trial in range(trials if r == min(replicas) else 1):
                        steps.append((Workload(shape, dags, tasks), t, r, trial))
    return steps


def _saved_run(arg: str) -> tuple[dict[str, Any], list[Trial]]:
    """A saved results file, and its trials (of one side, for `FILE.json:SIDE`)."""
    path, _, side = arg.partition(":")
    if side and side not in ("sluice", "airflow"):
        raise SystemExit(f"--render {arg}: the side after ':' is sluice or airflow, not {side!r}")
    saved = json.loads(Path(path).read_text())
    trials = [Trial.from_dict(t) for t in saved["trials"] if not side or t["side"] == side]
    return saved, trials


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    for name in ("smoke", "quick", "compare", "scale"):
        mode.add_argument(f"--{name}", action="store_true")
    mode.add_argument(
        "--render",
        nargs="+",
        metavar="FILE.json[:SIDE]",
        help="print the tables and chart of saved results (several files are merged)",
    )
    parser.add_argument("--shapes", default=",".join(AIRFLOW_SHAPES), help=f"of {','.join(SHAPES)}")
    parser.add_argument("--sizes", default=",".join(SIZES), help="e.g. 100x10,10x100,5x8")
    parser.add_argument("--tis", default="16,512", help="tasks per critical-section query")
    parser.add_argument("--replicas", default="1,2,3")
    parser.add_argument("--trials", type=int, default=3, help="trials at the lowest replica count")
    parser.add_argument("--sides", default=None, help="sluice,airflow (default: by mode)")
    parser.add_argument(
        "--markdown", action="store_true", help="with --render: the README's headline table"
    )
    args = parser.parse_args(argv)
    # A cancelled run (CI, Ctrl-C) still stops its replicas and its Postgres server.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    console = Console(width=int(os.environ.get("COLUMNS", "200")))
    RESULTS.mkdir(parents=True, exist_ok=True)

    if args.scale:
        from bench.scale import run_scale

        return run_scale(console)
    if args.render:
        sources = [_saved_run(arg) for arg in args.render]
        rendered = [trial for _, trials in sources for trial in trials]
        cores = max(saved["cores"] for saved, _ in sources)
        for (saved, _), arg in zip(sources, args.render, strict=True):
            done = "" if saved.get("complete", True) else ", interrupted"
            side = f" ({arg.rpartition(':')[2]} side)" if ":" in arg else ""
            print(f"`{saved['command']}`{side} ({saved['when']}, {saved['cores']} cores{done})")
        if args.markdown:
            print()
            print(report.markdown(rendered))
            return 0
        report.print_report(rendered, console, cores)
        png = report.chart(rendered, Path(args.render[0].partition(":")[0]).with_suffix(".png"))
        console.print(f"chart: {png or NO_CHART}")
        return 0

    name = next(n for n in ("smoke", "quick", "compare") if getattr(args, n))
    sides = (args.sides or ("sluice,airflow" if args.compare else "sluice")).split(",")
    if args.smoke:
        # Every shape once at 1 replica, and one shape at 2: under a minute on 2 cores.
        steps = plan(args.shapes.split(","), ["5x8"], [16], [1], 1)
        steps += plan(["grid"], ["5x8"], [16], [2], 1)
    else:
        steps = plan(
            args.shapes.split(","),
            args.sizes.split(","),
            [int(x) for x in args.tis.split(",")],
            [int(x) for x in args.replicas.split(",")],
            args.trials,
        )
    runners: dict[str, Runner] = {}
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    command = "python -m bench.run " + " ".join(sys.argv[1:] if argv is None else argv)
    saved = RESULTS / f"{name}-{stamp}.json"

    def save(trials: list[Trial], *, complete: bool) -> None:
        """Written after every trial too, so an interrupted run keeps what it measured."""
        payload = {
            "mode": name,
            "command": command,
            "when": stamp,
            "complete": complete,
            "cores": os.cpu_count(),
            "loadavg_at_end": os.getloadavg(),
            "knobs": Knobs().__dict__,
            "trials": [t.as_dict() for t in trials],
        }
        saved.write_text(json.dumps(payload, indent=1, default=str))

    pg = Postgres(statements=True)
    try:
        knobs = Knobs()
        if "sluice" in sides:
            from bench import sluice_side

            sluice_side.prepare_template(pg, knobs)
            runners["sluice"] = sluice_side.run_trial
        if "airflow" in sides:
            from bench import airflow_side

            console.print("Airflow 2.10.5: checking the venv (the first install takes minutes)")
            airflow_side.ensure_airflow(RESULTS / "logs" / "airflow-install.log")
            airflow_side.prepare_template(pg, knobs)
            runners["airflow"] = airflow_side.run_trial
        trials = _run(steps, runners, pg, knobs, console, lambda t: save(t, complete=False))
    finally:
        pg.stop()

    save(trials, complete=True)
    shutil.copyfile(saved, RESULTS / f"{name}-latest.json")
    report.print_report(trials, console, os.cpu_count() or 1)
    png = report.chart(trials, RESULTS / f"{name}-{stamp}.png")
    if png is not None:
        shutil.copyfile(png, RESULTS / f"{name}-tasks-per-s.png")
    console.print(f"results: {saved}; chart: {png or NO_CHART}")
    return 0 if all(t.ok for t in trials) else 1


def _run(
    steps: list[tuple[Workload, int, int, int]],
    runners: dict[str, Runner],
    pg: Postgres,
    knobs: Knobs,
    console: Console,
    progress: Callable[[list[Trial]], None],
) -> list[Trial]:
    trials: list[Trial] = []
    total = len(steps) * len(runners)
    done = 0
    for workload, tis, replicas, trial in steps:
        for side, runner in runners.items():
            done += 1
            started = time.monotonic()
            try:
                result = runner(
                    pg, workload, replace(knobs, max_tis_per_query=tis), replicas, trial
                )
            except Exception as exc:  # kept as an `error` trial: every trial counts
                result = failed_trial(
                    side=side,
                    workload=workload,
                    replicas=replicas,
                    max_tis_per_query=tis,
                    trial=trial,
                    error=f"{type(exc).__name__}: {str(exc)[:500]}",
                )
            trials.append(result)
            progress(trials)
            console.print(
                f"[{done}/{total}] {side:7} {workload.label:18} tis={tis:<3} x{replicas} "
                f"#{trial} {result.status}: {result.tasks_per_s:>7.0f} tasks/s, "
                f"makespan {result.makespan_s:.2f}s, lag p50 {result.lag_p50_ms:.0f} ms, "
                f"CPU {result.cpu_ms_per_task:.2f} ms/task ({time.monotonic() - started:.0f}s)"
                + (f" ERR {result.errors}" if result.errors else ""),
                highlight=False,
            )
    return trials


if __name__ == "__main__":
    sys.exit(main())
