"""The benchmark CLI: `python -m bench.run --smoke|--quick|--compare|--scale [filters]`.

--smoke    Sluice only, tiny workloads, 1 and 2 replicas (under a minute; CI runs it).
--quick    Sluice only, at its defaults: Airflow's five shapes at 100x10 and 10x100,
           tis/query 16 and 512, 1-3 replicas; 3 trials at 1 replica, 1 otherwise.
--compare  the same scenarios in six arms, interleaved: Sluice like-for-like,
           Airflow 2.10.5 and Airflow 3.3.2 (each installed on first use) like-for-like
           and at their defaults (one arm where the two are one setting), Sluice at its
           defaults; 5 trials of each at 1 replica (the headline), 1 otherwise. Each
           Airflow is judged at the faster of its two arms in each scenario.
--scale    the scheduler alone with 10,000 DAGs and 100,000 task instances.

An arm is SIDE:VARIANT (`--arms`; sides: sluice, airflow (2.10.5), airflow3
(3.3.2); variants: like-for-like, defaults; see `common.for_variant`). Within a
scenario the arms take turns, trial by trial (A/B/C/D/A/B/C/D...), so that a drift
of the machine reaches every arm alike.

Results go to bench/results/<mode>-<time>.json (rewritten after every trial, so an
interrupted run keeps what it measured) and .png (copied to <mode>-latest.json and
<mode>-tasks-per-s.png); `--publish NAME` also writes the JSON to
bench/published/NAME.json, which is committed. Each JSON carries the commit, the
versions and the machine. `--render FILE.json [FILE.json ...]` reprints saved
runs, merged; `FILE.json:airflow` (or `:sluice`, `:airflow3`) takes one side's
trials only, so a new run of one side renders against a saved run of the other. With
`--markdown`, as the README's tables. Figures come from database timestamps.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from sqlalchemy import text

from bench import report
from bench.common import RESULTS, Knobs, Postgres, for_variant, git
from bench.metrics import (
    AIRFLOW_SIDES,
    DEFAULTS,
    LIKE_FOR_LIKE,
    PRODUCTION,
    SIDES,
    VARIANTS,
    Trial,
    failed_trial,
    side_label,
)
from bench.shapes import AIRFLOW_SHAPES, SHAPES, Workload

SIZES = {"100x10": (100, 10), "10x100": (10, 100)}
NO_CHART = "none (no trials, or matplotlib missing: `make bench-deps`)"
PUBLISHED = Path(__file__).parent / "published"
REPO = Path(__file__).resolve().parent.parent
Runner = Callable[[Postgres, Workload, Knobs, int, int], Trial]
ARMS = {
    "smoke": f"sluice:{LIKE_FOR_LIKE}",
    "quick": f"sluice:{DEFAULTS}",
    # Each Airflow at both settings of runs examined per loop (like-for-like: every run
    # in flight, as Sluice; defaults: 20, which is faster where its loop is the pace):
    # it is judged at the faster of the two in each scenario (`report.peer_arm`).
    "compare": (
        f"sluice:{LIKE_FOR_LIKE},airflow:{LIKE_FOR_LIKE},airflow3:{LIKE_FOR_LIKE},"
        f"airflow:{DEFAULTS},airflow3:{DEFAULTS},sluice:{DEFAULTS}"
    ),
}
TRIALS = {"smoke": 1, "quick": 3, "compare": 5}


@dataclass(frozen=True)
class Step:
    workload: Workload
    tis: int
    replicas: int
    trial: int
    side: str
    variant: str


def parse_arms(value: str, codes: dict[str, Path] | None = None) -> list[tuple[str, str]]:
    """SIDE:VARIANT[@CODE],...: `@CODE` runs a Sluice arm's replicas on the code tree
    `--code CODE=DIR` names (an A/B of two commits, interleaved like any arms)."""
    arms = []
    for item in value.split(","):
        side, _, variant = item.partition(":")
        variant = variant or LIKE_FOR_LIKE
        base, _, code = variant.partition("@")
        if side not in SIDES or base not in VARIANTS:
            raise SystemExit(
                f"--arms {item!r}: SIDE:VARIANT with SIDE one of {', '.join(SIDES)}"
                f" and VARIANT one of {', '.join(VARIANTS)}"
            )
        if code and (side != "sluice" or code not in (codes or {})):
            raise SystemExit(
                f"--arms {item!r}: @{code} names a code tree, for a Sluice arm, given as"
                f" --code {code}=DIR"
            )
        if base == PRODUCTION and side != "sluice":
            raise SystemExit(
                f"--arms {item!r}: {PRODUCTION} is Sluice's own (status capture and"
                f" publishing); use sluice:{PRODUCTION}"
            )
        arms.append((side, variant))
    return arms


def parse_codes(values: list[str]) -> dict[str, Path]:
    """`--code LABEL=DIR`: a checkout (a `git worktree` of another commit) whose
    `operator/sluice` an arm's replicas import; the harness and `bench.replica` stay this
    checkout's, so both arms are measured by the same code."""
    codes: dict[str, Path] = {}
    for value in values:
        label, _, path = value.partition("=")
        directory = Path(path).resolve()
        if not label or "," in label or not (directory / "operator" / "sluice").is_dir():
            raise SystemExit(f"--code {value!r}: LABEL=DIR, DIR a checkout with operator/sluice")
        codes[label] = directory
    return codes


def code_trees(codes: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """Each code tree's path, commit and whether it had uncommitted changes (the JSON's)."""
    return {
        label: {
            "path": str(directory),
            "commit": git("-C", str(directory), "rev-parse", "HEAD"),
            "dirty": bool(
                git("-C", str(directory), "status", "--porcelain", "--untracked-files=no")
            ),
        }
        for label, directory in codes.items()
    }


def plan(
    shapes: list[str],
    sizes: list[str],
    tis: list[int],
    replicas: list[int],
    trials: int,
    arms: list[tuple[str, str]],
) -> list[Step]:
    """Every trial to run, in order: scenario by scenario, and within one the arms in
    turn (A/B/A/B...); `trials` of each at the lowest replica count, one beyond.

    An Airflow arm whose settings are an earlier arm's for that workload (both
    variants examine 20 runs per loop when there are at most 20 DAGs) is not run
    twice: the earlier one stands for both.
    """
    steps = []
    for t in tis:
        for size in sizes:
            dags, tasks = SIZES[size] if size in SIZES else map(int, size.split("x"))
            distinct = _distinct_arms(arms, t, dags)
            for shape in shapes:
                for r in replicas:
                    for trial in range(trials if r == min(replicas) else 1):
                        for side, variant in distinct:
                            steps.append(
                                Step(Workload(shape, dags, tasks), t, r, trial, side, variant)
                            )
    return steps


def _distinct_arms(arms: list[tuple[str, str]], tis: int, dags: int) -> list[tuple[str, str]]:
    """`arms` less the Airflow arms that would run an earlier arm's settings: an Airflow
    side reads only the knobs it has (`airflow_side.knob_env`), not Sluice's."""
    from bench.airflow_side import knob_env

    kept: list[tuple[str, str]] = []
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for side, variant in arms:
        if side in AIRFLOW_SIDES:
            knobs = for_variant(Knobs(max_tis_per_query=tis), variant, dags)
            key = (side, tuple(sorted(knob_env(knobs).items())))
            if key in seen:
                continue
            seen.add(key)
        kept.append((side, variant))
    return kept


def _saved_run(arg: str) -> tuple[dict[str, Any], list[Trial]]:
    """A saved results file, and its trials (of one side, for `FILE.json:SIDE`)."""
    path, _, side = arg.partition(":")
    if side and side not in SIDES:
        raise SystemExit(
            f"--render {arg}: the side after ':' is one of {', '.join(SIDES)}, not {side!r}"
        )
    saved = json.loads(Path(path).read_text())
    trials = [Trial.from_dict(t) for t in saved["trials"] if not side or t["side"] == side]
    return saved, trials


def scheduler_code() -> Path:
    """The `sluice` package this interpreter imports, and so the replicas too (they are
    started with its environment): a checkout of another commit measures its own code
    only with `PYTHONPATH=operator:.`, or an editable install elsewhere wins."""
    import sluice

    return Path(sluice.__file__).resolve().parent


def provenance(pg: Postgres | None, airflow: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The commit, versions and machine a run was measured on (in every results JSON);
    `airflow`: each Airflow side's install record (`airflow_install.install_record`)."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        memory = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    except OSError:
        memory = "unknown"
    postgres = "unknown"
    if pg is not None:
        with pg.admin.connect() as conn:
            postgres = str(conn.execute(text("SHOW server_version")).scalar_one())
    return {
        "commit": git("rev-parse", "HEAD"),
        "scheduler_code": str(scheduler_code()),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        # Sluice-only replica switches for A/B runs (bench/replica.py, sluice_side.py).
        "sluice_replica_args": os.environ.get("SLUICE_BENCH_REPLICA_ARGS", ""),
        "versions": {
            "python": platform.python_version(),
            "postgres": postgres,
            "airflow": {side: record.get("version") for side, record in airflow.items()},
            "statements": "" if pg is None else pg.statements_unavailable or "pg_stat_statements",
        },
        "airflow_installs": airflow,
        "machine": {
            "cpu": cpu,
            "cores": os.cpu_count(),
            "memory": memory,
            "kernel": platform.release(),
        },
    }


def measured_on(saved: dict[str, Any]) -> str:
    """A saved run's time, machine and commit, as its rendered tables are headed: files
    rendered together may come from different machines, so each names its CPU."""
    cpu = saved.get("machine", {}).get("cpu")
    machine = f"{saved['cores']} cores" + (f" {cpu}" if cpu else "")
    commit = f", commit {saved['commit'][:10]}" if "commit" in saved else ""
    done = "" if saved.get("complete", True) else ", interrupted"
    return f"{saved['when']}, {machine}{commit}{done}"


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
    parser.add_argument(
        "--trials",
        type=int,
        default=None,
        help="trials of each arm at the lowest replica count (default: compare 5, quick 3)",
    )
    parser.add_argument(
        "--arms",
        default=None,
        help=f"SIDE:VARIANT,... (default by mode; compare: {ARMS['compare']})",
    )
    parser.add_argument(
        "--sides", default=None, help=f"keep only these sides' arms: {','.join(SIDES)}"
    )
    parser.add_argument("--publish", metavar="NAME", help="also write bench/published/NAME.json")
    parser.add_argument(
        "--code",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="a code tree for arms SIDE:VARIANT@LABEL (A/B runs; bench/README.md)",
    )
    parser.add_argument(
        "--markdown", action="store_true", help="with --render: the README's tables"
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
        return _render(args.render, markdown=args.markdown, console=console)

    if args.publish and scheduler_code() != REPO / "operator" / "sluice":
        # The JSON names this checkout's commit: the code measured must be that commit's.
        raise SystemExit(
            f"--publish: the scheduler code imported is {scheduler_code()}, not this "
            f"checkout's {REPO / 'operator' / 'sluice'}; run with PYTHONPATH=operator:."
        )
    name = next(n for n in ("smoke", "quick", "compare") if getattr(args, n))
    codes = parse_codes(args.code)
    arms = parse_arms(args.arms or ARMS[name], codes)
    if args.sides:
        arms = [arm for arm in arms if arm[0] in args.sides.split(",")]
    for shape in args.shapes.split(","):
        if shape not in SHAPES:
            raise SystemExit(f"--shapes: {shape!r} is not one of {', '.join(SHAPES)}")
    knobs = Knobs()
    if args.smoke:
        # Every shape once at 1 replica like for like, and one shape at 2 at Sluice's
        # defaults: both code paths, under a minute on 2 cores.
        knobs = replace(knobs, settle_s=0.5)
        steps = plan(args.shapes.split(","), ["5x8"], [16], [1], 1, arms)
        steps += plan(["grid"], ["5x8"], [16], [2], 1, [("sluice", DEFAULTS)])
    else:
        steps = plan(
            args.shapes.split(","),
            args.sizes.split(","),
            [int(x) for x in args.tis.split(",")],
            [int(x) for x in args.replicas.split(",")],
            args.trials or TRIALS[name],
            arms,
        )
    sides = {step.side for step in steps}
    runners: dict[str, Runner] = {}
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    command = "python -m bench.run " + " ".join(sys.argv[1:] if argv is None else argv)
    saved = RESULTS / f"{name}-{stamp}.json"
    about: dict[str, Any] = {}

    def save(trials: list[Trial], *, complete: bool) -> None:
        """Written after every trial too, so an interrupted run keeps what it measured."""
        payload = {
            "mode": name,
            "command": command,
            "when": stamp,
            "complete": complete,
            "cores": os.cpu_count(),
            "loadavg_at_end": os.getloadavg(),
            **about,
            "knobs": asdict(knobs),
            "arms": [f"{side}:{variant}" for side, variant in arms],
            "trials": [t.as_dict() for t in trials],
        }
        saved.write_text(json.dumps(payload, indent=1, default=str))

    pg = Postgres(statements=True)
    try:
        installs: dict[str, dict[str, Any]] = {}
        if "sluice" in sides:
            from bench import sluice_side

            sluice_side.prepare_template(pg, knobs)
            runners["sluice"] = sluice_side.run_trial
        for side in AIRFLOW_SIDES:
            if side not in sides:
                continue
            from bench import airflow_side

            console.print(
                f"{side_label(side)}: checking the venv (the first install takes minutes)"
            )
            installs[side] = airflow_side.prepare(side, pg, knobs)
            constraints = installs[side].get("constraints") or {}
            console.print(
                f"{side_label(side)}: installed by {installs[side]['method']}"
                + (
                    f" ({constraints['source']}, sha256 {constraints['sha256'][:12]})"
                    if constraints.get("file")
                    else f" ({constraints['unavailable']})"
                    if constraints
                    else ""
                ),
                highlight=False,
                soft_wrap=True,
            )
            runners[side] = airflow_side.runner(side)
        about.update(provenance(pg, installs))
        if pg.statements_unavailable:
            console.print(f"[yellow]statements n/a: {pg.statements_unavailable}[/yellow]")
        if codes:
            about["code_trees"] = code_trees(codes)
        trials = _run(steps, runners, pg, knobs, console, lambda t: save(t, complete=False), codes)
    finally:
        pg.stop()

    save(trials, complete=True)
    shutil.copyfile(saved, RESULTS / f"{name}-latest.json")
    if args.publish:
        PUBLISHED.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(saved, PUBLISHED / f"{args.publish}.json")
        console.print(f"published: {PUBLISHED / args.publish}.json")
    report.print_report(trials, console, os.cpu_count() or 1)
    png = report.chart(trials, RESULTS / f"{name}-{stamp}.png")
    if png is not None:
        shutil.copyfile(png, RESULTS / f"{name}-tasks-per-s.png")
    console.print(f"results: {saved}; chart: {png or NO_CHART}")
    return 0 if all(t.ok for t in trials) else 1


def _render(files: list[str], *, markdown: bool, console: Console) -> int:
    sources = [_saved_run(arg) for arg in files]
    rendered = [trial for _, trials in sources for trial in trials]
    cores = max(saved["cores"] for saved, _ in sources)
    for (saved, _), arg in zip(sources, files, strict=True):
        side = f" ({arg.rpartition(':')[2]} side)" if ":" in arg else ""
        print(f"`{saved['command']}`{side} ({measured_on(saved)})")
    if markdown:
        print()
        print(report.markdown_tables(rendered))
        return 0
    report.print_report(rendered, console, cores)
    png = report.chart(rendered, Path(files[0].partition(":")[0]).with_suffix(".png"))
    console.print(f"chart: {png or NO_CHART}")
    return 0


def _run(
    steps: list[Step],
    runners: dict[str, Runner],
    pg: Postgres,
    knobs: Knobs,
    console: Console,
    progress: Callable[[list[Trial]], None],
    codes: dict[str, Path] | None = None,
) -> list[Trial]:
    trials: list[Trial] = []
    for done, step in enumerate(steps, start=1):
        workload, side = step.workload, step.side
        variant, _, code = step.variant.partition("@")
        arm_knobs = for_variant(replace(knobs, max_tis_per_query=step.tis), variant, workload.dags)
        if code:  # an A/B arm: another tree's code, under its own label in the tables
            arm_knobs = replace(arm_knobs, variant=step.variant, code=str((codes or {})[code]))
        started = time.monotonic()
        try:
            result = runners[side](pg, workload, arm_knobs, step.replicas, step.trial)
        except Exception as exc:  # kept as an `error` trial: every trial counts
            result = failed_trial(
                side=side,
                workload=workload,
                replicas=step.replicas,
                max_tis_per_query=step.tis,
                trial=step.trial,
                error=f"{type(exc).__name__}: {str(exc)[:500]}",
                variant=step.variant,
                knobs=asdict(arm_knobs),
            )
        trials.append(result)
        progress(trials)
        console.print(
            f"[{done}/{len(steps)}] {side:8} {step.variant:13} {workload.label:18} "
            f"tis={step.tis:<3} x{step.replicas} #{step.trial} {result.status}: "
            f"{result.tasks_per_s:>7.0f} tasks/s, makespan {result.makespan_s:.2f}s "
            f"(first action {result.first_action_ms:.0f} ms after t0, settle "
            f"{result.settle_s:.2f}s), "
            f"lag p50 {result.lag_p50_ms:.0f} ms, CPU {result.total_cpu_ms_per_task:.2f} ms/task "
            f"({time.monotonic() - started:.0f}s)"
            + (f" ERR {result.errors}" if result.errors else ""),
            highlight=False,
        )
    return trials


if __name__ == "__main__":
    sys.exit(main())
