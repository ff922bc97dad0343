"""`python -m tests.chaos.run [--short | --minutes N] [--seed S] [--replicas N]`.

Starts Postgres and the replicas, injects faults for the window, waits for
every run to end, stops everything, checks the invariants and prints a table.
Exits 1 if any invariant was violated (or nothing ran), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tests.chaos.checker import Checker
from tests.chaos.harness import ChaosRun, Fault


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--short", action="store_true", help="about three minutes (CI)")
    parser.add_argument("--minutes", type=float, default=None, help="fault window (soak)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None, help="keep logs here")
    args = parser.parse_args(argv)
    fault_seconds = 60.0 if args.short or args.minutes is None else args.minutes * 60
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="sluice-chaos-"))
    console = Console()
    run = ChaosRun(workdir, args.replicas, fault_seconds, args.seed)
    console.print(
        f"[bold]chaos[/bold]: {args.replicas} replicas, {fault_seconds:g}s of faults, "
        f"seed {args.seed}, logs in {workdir}"
    )
    try:
        run.start()
        run.inject_faults()
        settled = run.settle()
        checked_at = datetime.now(UTC)
        run.stop()
        assert run.sampler is not None
        checker = Checker(
            run.url,
            run.event_log,
            [run.replica_log(i) for i in range(args.replicas)],
            settled,
            run.started_at,
            checked_at,
            samples=run.sampler.samples,
            exits=run.exits,
        )
        results = checker.all()
        limits = checker.limits()
        paths = checker.paths()
        # Everything needed to look into a violation once Postgres is gone.
        (workdir / "report.json").write_text(
            json.dumps(
                {
                    "faults": [vars(f) for f in run.faults],
                    "exits": run.exits,
                    "zombies": checker.zombies,
                    "tries": checker.tries,
                    "limits": limits,
                    "paths": paths,
                    "violations": results,
                },
                indent=1,
                default=str,
            )
        )
    finally:
        run.stop()
        run.close()

    faults = Table(title="Faults injected")
    faults.add_column("kind")
    faults.add_column("count", justify="right")
    faults.add_column("targets and outcomes")
    by_kind: dict[str, list[Fault]] = {}
    for fault in run.faults:
        by_kind.setdefault(fault.kind, []).append(fault)
    for kind, found in sorted(by_kind.items()):
        notes = Counter(f"{f.target}{': ' + f.detail if f.detail else ''}" for f in found)
        faults.add_row(
            kind,
            str(len(found)),
            "; ".join(f"{n}x {note}" if n > 1 else note for note, n in notes.items())[:300],
        )
    console.print(faults)
    states = Counter(r["state"] for r in checker.runs)
    tries = len(checker.attempts)
    settle = (
        (run.settled_at - run.faults_ended_at).total_seconds()
        if run.settled_at and run.faults_ended_at
        else None
    )
    console.print(
        f"runs: {dict(states)}; task attempts seen: {tries}; database samples: "
        f"{run.sampler.samples.taken} ({run.sampler.samples.failed} failed while Postgres was "
        "down); "
        + (
            f"settled {settle:.1f}s after faults stopped"
            if settle is not None
            else "did not settle"
        )
    )
    exercised = Table(title="Recovery paths exercised (tries)")
    exercised.add_column("path")
    exercised.add_column("count", justify="right")
    for path, count in paths.items():
        exercised.add_row(path, str(count))
    console.print(exercised)
    reach = Table(title="Limits reached (database samples and task processes)")
    reach.add_column("limit")
    reach.add_column("value", justify="right")
    reach.add_column("max in database", justify="right")
    reach.add_column("max processes", justify="right")
    reach.add_column("samples at the limit", justify="right")
    for row in limits:
        reach.add_row(
            row["limit"],
            str(row["value"]),
            str(row["max_db"]),
            str(row["max_processes"]),
            f"{row['at_limit']:.0%}",
        )
    console.print(reach)
    table = Table(title="Invariants")
    table.add_column("invariant")
    table.add_column("violations", justify="right")
    table.add_column("first")
    for name, violations in results.items():
        table.add_row(name, str(len(violations)), violations[0] if violations else "")
    console.print(table)
    failed = sum(len(v) for v in results.values())
    if not checker.runs or tries == 0:
        console.print("[red]nothing ran: the harness is broken[/red]")
        return 1
    if failed:
        console.print(f"[red]{failed} violation(s)[/red]; logs kept in {workdir}")
        return 1
    console.print("[green]all invariants held[/green]")
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
