"""An A/B of two code trees, as a table: `python -m bench.ab [LABEL=]FILE.json ...`.

For runs of `bench.run` whose Sluice arms name code trees (`--code LABEL=DIR`,
arms `sluice:VARIANT@LABEL`): per scenario and arm, the median of each figure
over the `ok` trials, with its min-max, and every trial counted. Tasks/s from the
unpause and from the first action (`metrics.Trial.active_tasks_per_s`), total CPU
per task (scheduler + Postgres), statements per task (pg_stat_statements, BEGIN
and COMMIT included), and from the replicas' own counts (`bench.replica.LoopStats`)
the transactions per busy tick and the critical section's lock hold (each trial's
median over its sections that queued tasks), what Postgres wrote (WAL per task,
and the shares of row updates that were HOT and that went to a new page:
`metrics.Writes`), and for the production arm (`sluice:production`, any Sluice
variant is a row) when the DagRun objects showed every run's end and the
replicas' CPU until then after the makespan.

`LABEL=FILE` puts " [LABEL]" after each of that file's arms: the A/B of a replica
setting (`SLUICE_BENCH_REPLICA_ARGS`), run as alternating commands of one tree, one
file each, gets a row per setting.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.metrics import update_shares

Figure = Callable[[dict[str, Any]], float]


def _busy(trial: dict[str, Any], what: str) -> float:
    """A count per busy tick over the trial's replicas; NaN where they did not count it
    (a replica of an older harness)."""
    stats = trial.get("replica_stats") or []
    ticks = sum(s["busy_ticks"] for s in stats)
    if not ticks or not all(what in s for s in stats):
        return math.nan
    return sum(s[what] for s in stats) / ticks


def _total(trial: dict[str, Any], what: str) -> float:
    """Summed over the trial's replicas; NaN where the replicas did not count it."""
    stats = trial.get("replica_stats") or []
    return sum(s[what] for s in stats) if stats and all(what in s for s in stats) else math.nan


def _hold(trial: dict[str, Any]) -> float:
    holds = [s["lock_hold_ms_p50"] for s in trial.get("replica_stats") or []]
    holds = [h for h in holds if h is not None]
    return statistics.median(holds) if holds else math.nan


FIGURES: list[tuple[str, Figure, int]] = [
    ("tasks/s (unpause)", lambda t: t["tasks_per_s"], 0),
    ("tasks/s (first action)", lambda t: t.get("active_tasks_per_s", math.nan), 0),
    ("CPU ms/task (sched+PG)", lambda t: t["total_cpu_ms_per_task"], 2),
    ("statements/task", lambda t: t["statements_per_task"], 2),
    ("transactions/busy tick", lambda t: _busy(t, "busy_transactions"), 2),
    # Query strings sent (round trips), BEGIN and COMMIT left out (`bench.replica --stats`).
    ("statements sent/busy tick", lambda t: _busy(t, "busy_statements"), 2),
    ("full collections/trial", lambda t: _total(t, "busy_full_collections"), 1),
    ("lock hold p50 ms", _hold, 2),
    # What Postgres wrote (`metrics.Writes`, from 2026-12-07): WAL per task, and the share
    # of row updates that were HOT (no index entry) and that went to another page.
    ("WAL KB/task", lambda t: t.get("wal_bytes_per_task", math.nan) / 1024, 2),
    ("HOT % of updates", lambda t: update_shares(t.get("updates") or {})[0], 0),
    ("new-page % of updates", lambda t: update_shares(t.get("updates") or {})[1], 0),
    # The production arm's (`sluice:production`): when every DagRun object showed its
    # run's end, and the replicas' CPU between the makespan's end and then.
    ("DagRuns final, s after t0", lambda t: t.get("status_final_s", math.nan), 2),
    ("replica CPU after makespan, s", lambda t: t.get("cpu_after_makespan_s", math.nan), 3),
]


def _cell(values: list[float], digits: int) -> str:
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return "n/a"
    median = statistics.median(values)
    return f"{median:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def table(trials: list[dict[str, Any]]) -> str:
    """The markdown table: one row per scenario and arm, before the arm it is compared to."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for t in trials:
        if t["side"] != "sluice":
            continue
        key = (t["shape"], t["dags"], t["tasks"], t["max_tis_per_query"], t["replicas"])
        groups[(*key, t["variant"])].append(t)
    head = ["scenario", "tis", "arm", "ok/trials", *(name for name, _, _ in FIGURES)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    # The arm with a code tree (the "before") first in each scenario.
    for key in sorted(groups, key=lambda k: (*k[:5], "@" not in k[5], k[5])):
        shape, dags, tasks, tis, replicas, variant = key
        group = groups[key]
        ok = [t for t in group if t["status"] == "ok"]
        cells = [_cell([figure(t) for t in ok], digits) for _, figure, digits in FIGURES]
        scenario = f"{shape} {dags}x{tasks}" + (f" x{replicas}" if replicas != 1 else "")
        row = [scenario, str(tis), variant, f"{len(ok)}/{len(group)}", *cells]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def labelled(given: str) -> tuple[str, str]:
    """`LABEL=FILE` -> (LABEL, FILE); anything else -> ("", it): no "=", an existing file,
    or a "/" before the first "=" (a path whose file name has one)."""
    label, sep, name = given.partition("=")
    if not sep or Path(given).exists() or "/" in label:
        return "", given
    return label, name


def main(argv: list[str] | None = None) -> int:
    files = sys.argv[1:] if argv is None else argv
    if not files:
        print(__doc__)
        return 2
    trials = []
    for given in files:
        tag, name = labelled(given)
        saved = json.loads(Path(name).read_text())
        trees = ", ".join(
            f"{label} = {tree['commit'][:10]}" + (" (dirty)" if tree["dirty"] else "")
            for label, tree in saved.get("code_trees", {}).items()
        )
        dirty = " (dirty)" if saved.get("dirty") else ""
        print(
            f"`{saved['command']}` ({saved['when']}, this checkout {saved['commit'][:10]}{dirty}"
            + (f"; {trees}" if trees else "")
            + ")"
        )
        if tag:
            print(f"  ({tag}: {name})")
        trials += [
            {**t, "variant": f"{t['variant']} [{tag}]"} if tag else t for t in saved["trials"]
        ]
    print()
    print(table(trials))
    return 0


if __name__ == "__main__":
    sys.exit(main())
