"""Tables (rich) and the chart (matplotlib) of a benchmark's trials."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.metrics import Trial, median_trial, statuses, tasks_per_s_range

Scenario = tuple[str, int, int, int, int]  # shape, dags, tasks, replicas, max_tis_per_query
TARGET_RATIO = 20.0
TARGET_LAG_MS = 50.0
TARGET_CPU_MS = 0.5


def scenario(t: Trial) -> Scenario:
    return (t.shape, t.dags, t.tasks, t.replicas, t.max_tis_per_query)


def groups(trials: list[Trial]) -> dict[tuple[str, Scenario], list[Trial]]:
    """Every trial, by side and scenario, whatever its status."""
    grouped: dict[tuple[str, Scenario], list[Trial]] = defaultdict(list)
    for t in trials:
        grouped[(t.side, scenario(t))].append(t)
    return dict(sorted(grouped.items()))


def medians(trials: list[Trial]) -> dict[tuple[str, Scenario], tuple[Trial, list[Trial]]]:
    """The median `ok` trial of each side and scenario, with all its trials; a
    scenario none of whose trials is `ok` has no median and is left out here
    (`trials_table` and `not_ok_lines` show it)."""
    found = {key: (median_trial(group), group) for key, group in groups(trials).items()}
    return {key: (m, group) for key, (m, group) in found.items() if m is not None}


def spread(group: list[Trial]) -> str:
    low, high = tasks_per_s_range(group)
    return "" if math.isnan(low) or low == high else f"{low:,.0f}-{high:,.0f}"


def _f(value: float, digits: int = 0) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def trials_table(trials: list[Trial], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for name in (
        "side",
        "shape",
        "DAGs x tasks",
        "tis/query",
        "replicas",
        "trials",
        "unpause->last end s",
        "tasks/s (ok range)",
        "lag p50/p95/max ms",
        "start lag p50/p95 ms",
        "CPU ms/task sched+PG=total",
        "statements/task (rows, ms)",
        "machine busy",
        "tasks per replica",
    ):
        table.add_column(name, justify="left" if name in ("side", "shape") else "right")
    for (side, key), group in groups(trials).items():
        m = median_trial(group)
        status = statuses(group)
        if m is None:
            table.add_row(side, key[0], f"{key[1]}x{key[2]}", str(key[4]), str(key[3]), status)
            continue
        span = spread(group)
        table.add_row(
            side,
            m.shape,
            f"{m.dags}x{m.tasks}",
            str(m.max_tis_per_query),
            str(m.replicas),
            status,
            _f(m.makespan_s, 2),
            _f(m.tasks_per_s) + (f" ({span})" if span else ""),
            f"{_f(m.lag_p50_ms)}/{_f(m.lag_p95_ms)}/{_f(m.lag_max_ms)}",
            f"{_f(m.start_lag_p50_ms)}/{_f(m.start_lag_p95_ms)}",
            f"{_f(m.cpu_ms_per_task, 2)}+{_f(m.pg_cpu_ms_per_task, 2)}"
            f"={_f(m.total_cpu_ms_per_task, 2)}",
            _statements(m),
            f"{m.machine_busy:.0%}",
            "/".join(str(n) for n in m.per_replica),
        )
    return table


def _statements(m: Trial) -> str:
    if math.isnan(m.statements_per_task):
        return "n/a"
    return (
        f"{_f(m.statements_per_task, 2)} ({_f(m.statement_rows_per_task, 2)}, "
        f"{_f(m.statement_ms_per_task, 3)})"
    )


def not_ok_lines(trials: list[Trial]) -> list[str]:
    """Every trial that is not `ok`, with what it recorded: none is in a median."""
    return [
        f"{t.side} {t.shape} {t.dags}x{t.tasks} tis={t.max_tis_per_query} x{t.replicas} "
        f"#{t.trial}: {t.status}, {t.tasks_done}/{t.expected_tasks} tasks ended"
        + (f": {'; '.join(t.errors)}" if t.errors else "")
        for t in trials
        if not t.ok
    ]


def cpu_floor_s(trial: Trial, cores: int) -> float:
    """The least wall time the trial's CPU use allows: scheduler plus Postgres CPU,
    spread over as many cores as its replicas can keep busy.

    A replica waits for each statement's answer (one connection, one statement
    at a time), so with one replica its CPU and Postgres's add up; more
    replicas overlap, up to the number of cores.
    """
    return (trial.cpu_s + trial.pg_cpu_s) / max(1, min(trial.replicas, cores))


def target_verdict(sluice: Trial, airflow: Trial, cores: int) -> str:
    """Met, or what a miss is made of: more CPU than the time allows, or waiting."""
    if not airflow.tasks_per_s:
        return "no Airflow figure to compare with"
    if sluice.tasks_per_s >= TARGET_RATIO * airflow.tasks_per_s:
        return "met"
    budget = sluice.dags * sluice.tasks / (TARGET_RATIO * airflow.tasks_per_s)
    floor = cpu_floor_s(sluice, cores)
    head = f"MISSED: 20x allows {budget * 1000:,.0f} ms, CPU floor {floor * 1000:,.0f} ms"
    if floor > budget:
        return f"{head} (needs {floor / budget:.1f}x less CPU per task)"
    return f"{head} (the rest is waiting)"


def ratio_table(trials: list[Trial], cores: int) -> Table | None:
    """Sluice/Airflow per scenario; a miss says whether it is CPU or waiting.

    The budget is the makespan that 20x Airflow's tasks/s allows; the CPU floor
    is what Sluice's scheduler and Postgres CPU in the same trial take at least
    on this machine's cores (`cpu_floor_s`).
    """
    by_key = medians(trials)
    table = Table(
        title=f"Sluice / Airflow (medians; target: tasks/s >= {TARGET_RATIO:.0f}x)",
        title_justify="left",
    )
    for name in (
        "shape",
        "DAGs x tasks",
        "tis/query",
        "replicas",
        "tasks/s ratio",
        "lag p50 Airflow/Sluice",
        "total CPU/task Airflow/Sluice",
        "target",
    ):
        table.add_column(name, justify="left" if name == "shape" else "right")
    rows = 0
    for (side, key), (sluice, _) in by_key.items():
        peer = by_key.get(("airflow", key))
        if side != "sluice" or peer is None:
            continue
        airflow = peer[0]
        ratio = sluice.tasks_per_s / airflow.tasks_per_s if airflow.tasks_per_s else math.nan
        lag = airflow.lag_p50_ms / sluice.lag_p50_ms if sluice.lag_p50_ms else math.inf
        cpu = (
            airflow.total_cpu_ms_per_task / sluice.total_cpu_ms_per_task
            if sluice.total_cpu_ms_per_task
            else math.inf
        )
        rows += 1
        table.add_row(
            key[0],
            f"{key[1]}x{key[2]}",
            str(key[4]),
            str(key[3]),
            f"{ratio:.2f}x",
            f"{lag:.1f}x",
            f"{cpu:.1f}x",
            target_verdict(sluice, airflow, cores),
        )
    return table if rows else None


def targets_table(trials: list[Trial]) -> Table:
    """Sluice's absolute targets per scenario (reported, never asserted)."""
    table = Table(
        title=f"Sluice targets: lag p50 < {TARGET_LAG_MS:.0f} ms,"
        f" total CPU (scheduler + Postgres) < {TARGET_CPU_MS} ms/task",
        title_justify="left",
    )
    for name in ("shape", "DAGs x tasks", "tis/query", "replicas", "lag p50", "total CPU/task"):
        table.add_column(name, justify="left" if name == "shape" else "right")
    for (side, key), (m, _) in medians(trials).items():
        if side != "sluice":
            continue
        lag_ok = m.lag_p50_ms < TARGET_LAG_MS
        cpu_ok = m.total_cpu_ms_per_task < TARGET_CPU_MS
        table.add_row(
            key[0],
            f"{key[1]}x{key[2]}",
            str(key[4]),
            str(key[3]),
            f"{_f(m.lag_p50_ms)} ms {'met' if lag_ok else 'MISSED'}",
            f"{_f(m.total_cpu_ms_per_task, 2)} ms {'met' if cpu_ok else 'MISSED'}",
        )
    return table


def scaling_limit(trial: Trial, cores: int) -> str:
    """What held the most replicas back: the CPUs, or waiting with CPU to spare.

    Busy means 90%: of the machine (/proc/stat), or of its cores by the
    schedulers' and Postgres's own CPU over the makespan. Postgres's CPU is part
    of that: with cores to spare, neither the CPUs nor Postgres's CPU is the
    limit, whichever of the two used more.
    """
    used = (trial.cpu_s + trial.pg_cpu_s) / trial.makespan_s if trial.makespan_s else 0.0
    seen = f"schedulers+Postgres {used:.2f} of {cores} cores, machine {trial.machine_busy:.0%} busy"
    if max(trial.machine_busy, used / max(1, cores)) >= 0.9:
        return f"CPUs ({seen})"
    return f"waiting, not CPU ({seen}): row locks between replicas, commit flushes, idle sleeps"


def scaling_lines(trials: list[Trial], cores: int) -> list[str]:
    """Throughput against replica count, and what the limit looked like."""
    by_key = medians(trials)
    lines: list[str] = []
    groups: dict[tuple[str, str, int, int, int], dict[int, Trial]] = defaultdict(dict)
    for (side, key), (m, _) in by_key.items():
        groups[(side, key[0], key[1], key[2], key[4])][key[3]] = m
    for (side, shape, dags, tasks, tis), by_replicas in sorted(groups.items()):
        if len(by_replicas) < 2:
            continue
        counts = sorted(by_replicas)
        tps = " -> ".join(f"{by_replicas[r].tasks_per_s:.0f}" for r in counts)
        limit = scaling_limit(by_replicas[counts[-1]], cores)
        lines.append(
            f"{side} {shape} {dags}x{tasks} tis={tis}: tasks/s by replicas {counts}: {tps}; "
            f"limit at {counts[-1]}: {limit}"
        )
    return lines


def _cell(median: tuple[Trial, list[Trial]] | None, group: list[Trial]) -> str:
    """`tasks/s (total CPU ms/task, lag p50 ms)`, and the trials when not all are `ok`.

    Total CPU is the scheduler processes' and Postgres's over the makespan.
    """
    failed = "" if all(t.ok for t in group) else f" [{statuses(group)}]"
    if median is None:
        return "-" + failed
    m = median[0]
    return f"{m.tasks_per_s:,.0f} ({_f(m.total_cpu_ms_per_task, 2)}, {m.lag_p50_ms:,.0f}){failed}"


def markdown(trials: list[Trial]) -> str:
    """The headline table for the README: 1-replica medians, both settings of tis/query.

    Each cell is `tasks/s (total CPU ms/task, lag p50 ms)`; the ratio is Sluice/Airflow tasks/s.
    """
    by_key = medians(trials)
    all_groups = groups(trials)
    tis_values = sorted({t.max_tis_per_query for t in trials})
    head = ["shape", "size"]
    for tis in tis_values:
        head += [f"tis {tis}: Sluice", "Airflow", "ratio"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    sizes = sorted({(t.dags, t.tasks) for t in trials}, key=lambda d: -d[0])
    shapes = list(dict.fromkeys(t.shape for t in trials))
    for dags, tasks in sizes:
        for shape in shapes:
            cells = [shape, f"{dags}x{tasks}"]
            for tis in tis_values:
                key = (shape, dags, tasks, 1, tis)
                sluice = by_key.get(("sluice", key))
                airflow = by_key.get(("airflow", key))
                for side, arm in (("sluice", sluice), ("airflow", airflow)):
                    cells.append(_cell(arm, all_groups.get((side, key), [])))
                if sluice and airflow and airflow[0].tasks_per_s:
                    cells.append(f"{sluice[0].tasks_per_s / airflow[0].tasks_per_s:.1f}x")
                else:
                    cells.append("-")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def chart(trials: list[Trial], path: Path) -> Path | None:
    """Tasks per second by shape and replica count (one panel per size and tis/query).

    None when there is nothing to draw, or without matplotlib (the `bench` extra,
    installed by `make bench-deps`): the tables and the JSON do not need it.
    """
    try:
        import matplotlib
    except ImportError:
        return None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_key = medians(trials)
    panels = sorted({(k[1], k[2], k[4]) for (_, k) in by_key})
    if not panels:
        return None
    shapes = sorted({k[0] for (_, k) in by_key})
    series = sorted({(side, k[3]) for (side, k) in by_key})
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.2), squeeze=False)
    width = 0.8 / max(1, len(series))
    for ax, (dags, tasks, tis) in zip(axes[0], panels, strict=True):
        for i, (side, replicas) in enumerate(series):
            values = []
            for shape in shapes:
                found = by_key.get((side, (shape, dags, tasks, replicas, tis)))
                values.append(found[0].tasks_per_s if found else 0.0)
            xs = [x + i * width for x in range(len(shapes))]
            ax.bar(xs, values, width, label=f"{side} x{replicas}")
        ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(shapes))])
        ax.set_xticklabels(shapes, rotation=20)
        ax.set_title(f"{dags} DAGs x {tasks} tasks, {tis} tis/query")
        ax.set_ylabel("tasks / s")
        if any(side == "airflow" for side, _ in series):
            ax.set_yscale("log")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def print_report(trials: list[Trial], console: Console, cores: int) -> None:
    console.print(trials_table(trials, "Per scenario and side (median trial by tasks/s)"))
    ratios = ratio_table(trials, cores)
    if ratios is not None:
        console.print(ratios)
    if any(t.side == "sluice" for t in trials):
        console.print(targets_table(trials))
    for line in scaling_lines(trials, cores):
        console.print(line, soft_wrap=True)
    for line in not_ok_lines(trials):
        console.print(f"[red]not ok, in no median: {line}[/red]", soft_wrap=True, highlight=False)
