"""Tables (rich and markdown) and the chart (matplotlib) of a benchmark's trials.

Trials are grouped by arm (side and variant, `metrics.VARIANTS`) and scenario;
each group's figures are those of its median `ok` trial, with the min-max of
its `ok` trials' tasks/s and a count of every trial by status. Sluice's arms
are compared with each Airflow (2.10.5 and 3.3.2, `metrics.AIRFLOW_SIDES`) at
the faster of its arms in each scenario (`peer_arm`: like-for-like or its
defaults, whichever the run has and is faster there), and ratios and targets
are judged against the faster of the Airflows (`faster_peer`): Airflow at the
best of what was run, never a setting that slows it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.metrics import (
    AIRFLOW_SIDES,
    DEFAULTS,
    LIKE_FOR_LIKE,
    PRODUCTION,
    Trial,
    median_trial,
    side_label,
    statuses,
    tasks_per_s_range,
)

Arm = tuple[str, str]  # side, variant
Scenario = tuple[str, int, int, int, int]  # shape, dags, tasks, replicas, max_tis_per_query
Key = tuple[Arm, Scenario]
TARGET_RATIO = 20.0
TARGET_LAG_MS = 50.0
TARGET_CPU_MS = 0.5
CAPTIONS = {
    LIKE_FOR_LIKE: (
        "Like for like: Sluice runs one critical-section query of `max_tis_per_query`"
        " per tick (`--critical-batches=1`) and sleeps out its idle second with no"
        " NOTIFY wake-up (`--no-wake`), as Airflow's loop does, and examines every"
        " run in flight on each loop (runs examined = the DAG count, at least 20);"
        " t0 is the same unpause on both sides, after the same settle time."
        " Still different by design: a Sluice report is one set-based statement that"
        " also decides the tasks it makes ready (ADR 0008), where Airflow's loop takes"
        " each task's executor event on its own and decides downstream tasks in a"
        " later loop (its mini scheduler never runs: no task process runs);"
        " Sluice prepares its hot statements (ADR 0010); and, since ADR 0049 (after"
        " the 2026-12-05 publication), Sluice's phase 1 (run creation) runs within a"
        " burst only when told or once per tick interval, where Airflow's loop looks"
        " for due DAGs on every loop."
    ),
    DEFAULTS: (
        "Sluice at its defaults: up to 8 critical-section queries per tick while they"
        " come back full, an idle replica woken by the unpause's NOTIFY, 20 runs"
        " examined per tick, and runs created in batches to a time budget, not 10 a"
        " loop (ADR 0023)."
    ),
    PRODUCTION: (
        "Sluice like for like, plus what a chart install adds: status capture (the"
        " outbox triggers) and a status publisher in each replica, patching DagRun"
        " objects on a stand-in API server in the harness's process (whose CPU is not"
        " counted); CPU over the makespan, and `cpu_after_makespan_s` in the JSON for"
        " the publishing after it."
    ),
}


def scenario(t: Trial) -> Scenario:
    return (t.shape, t.dags, t.tasks, t.replicas, t.max_tis_per_query)


def arm(t: Trial) -> Arm:
    return (t.side, t.variant)


def groups(trials: list[Trial]) -> dict[Key, list[Trial]]:
    """Every trial, by arm and scenario, whatever its status."""
    grouped: dict[Key, list[Trial]] = defaultdict(list)
    for t in trials:
        grouped[(arm(t), scenario(t))].append(t)
    return dict(sorted(grouped.items()))


def medians(trials: list[Trial]) -> dict[Key, tuple[Trial, list[Trial]]]:
    """The median `ok` trial of each arm and scenario, with all its trials; a
    scenario none of whose trials is `ok` has no median and is left out here
    (`trials_table` and `not_ok_lines` show it)."""
    found = {key: (median_trial(group), group) for key, group in groups(trials).items()}
    return {key: (m, group) for key, (m, group) in found.items() if m is not None}


# How an Airflow cell says which of its arms it is, when the run has both.
ARM_TAGS = {LIKE_FOR_LIKE: "L", DEFAULTS: "D"}


def peer_arm(
    trials: list[Trial],
    by_key: dict[Key, tuple[Trial, list[Trial]]],
    side: str,
    scenario_: Scenario,
) -> Arm | None:
    """The arm an Airflow side is judged by in a scenario: of its arms with a median
    there, the one with the higher median tasks/s (like-for-like on a tie); without
    one, the first of its arms with trials there (so that the table shows how they
    ended); None when the side has no trial there."""
    best: Arm | None = None
    for variant in (LIKE_FOR_LIKE, DEFAULTS):
        found = by_key.get(((side, variant), scenario_))
        if found is not None and (
            best is None or found[0].tasks_per_s > by_key[(best, scenario_)][0].tasks_per_s
        ):
            best = (side, variant)
    if best is not None:
        return best
    present = {arm(t) for t in trials if scenario(t) == scenario_}
    return next(((side, v) for v in (LIKE_FOR_LIKE, DEFAULTS) if (side, v) in present), None)


def two_arms(trials: list[Trial], side: str) -> bool:
    """Whether the run has both of an Airflow side's arms (its cells then say which)."""
    return len({t.variant for t in trials if t.side == side}) > 1


def airflow_sides(trials: list[Trial]) -> list[str]:
    """The Airflow sides with trials, in `AIRFLOW_SIDES` order (2.10.5, then 3.3.2)."""
    present = {t.side for t in trials}
    return [side for side in AIRFLOW_SIDES if side in present]


def peer_medians(
    trials: list[Trial], by_key: dict[Key, tuple[Trial, list[Trial]]], scenario_: Scenario
) -> dict[str, Trial]:
    """Each Airflow side's median trial in a scenario, of the arm it is judged by
    (`peer_arm`); a side without a median there is left out."""
    found = {}
    for side in airflow_sides(trials):
        peer = peer_arm(trials, by_key, side, scenario_)
        median = by_key.get((peer, scenario_)) if peer is not None else None
        if median is not None:
            found[side] = median[0]
    return found


def faster_peer(peers: dict[str, Trial]) -> str | None:
    """The Airflow side with the higher median tasks/s (targets are judged against it);
    the first side on a tie, None without any."""
    best = None
    for side, trial in peers.items():
        if best is None or trial.tasks_per_s > peers[best].tasks_per_s:
            best = side
    return best


def spread(group: list[Trial]) -> str:
    low, high = tasks_per_s_range(group)
    return "" if math.isnan(low) or low == high else f"{low:,.0f}-{high:,.0f}"


def _f(value: float | None, digits: int = 0) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _cpu(m: Trial) -> str:
    """Scheduler + Postgres = total CPU ms per task, over the makespan."""
    return (
        f"{_f(m.cpu_ms_per_task, 2)}+{_f(m.pg_cpu_ms_per_task, 2)}={_f(m.total_cpu_ms_per_task, 2)}"
    )


def _statements(m: Trial) -> str:
    """pg_stat_statements per task: statements (rows, ms)."""
    if math.isnan(m.statements_per_task):
        return "n/a"
    return (
        f"{_f(m.statements_per_task, 2)} ({_f(m.statement_rows_per_task, 2)}, "
        f"{_f(m.statement_ms_per_task, 3)})"
    )


def trials_table(trials: list[Trial], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for name in (
        "side",
        "variant",
        "shape",
        "DAGs x tasks",
        "tis/query",
        "replicas",
        "trials",
        "unpause->last end s",
        "tasks/s (ok range)",
        "first action ms",
        "active tasks/s",
        "lag p50/p95/max ms",
        "start lag p50/p95 ms",
        "CPU ms/task sched+PG=total",
        "statements/task (rows, ms)",
        "machine busy",
        "tasks per replica",
    ):
        left = name in ("side", "variant", "shape")
        table.add_column(name, justify="left" if left else "right")
    for ((side, variant), key), group in groups(trials).items():
        m = median_trial(group)
        head = [side_label(side), variant, key[0], f"{key[1]}x{key[2]}", str(key[4]), str(key[3])]
        if m is None:
            table.add_row(*head, statuses(group))
            continue
        span = spread(group)
        table.add_row(
            *head,
            statuses(group),
            _f(m.makespan_s, 2),
            _f(m.tasks_per_s) + (f" ({span})" if span else ""),
            _f(m.first_action_ms),
            _f(m.active_tasks_per_s),
            f"{_f(m.lag_p50_ms)}/{_f(m.lag_p95_ms)}/{_f(m.lag_max_ms)}",
            f"{_f(m.start_lag_p50_ms)}/{_f(m.start_lag_p95_ms)}",
            _cpu(m),
            _statements(m),
            f"{_f(m.machine_busy * 100)}%",
            "/".join(str(n) for n in m.per_replica),
        )
    return table


def not_ok_lines(trials: list[Trial]) -> list[str]:
    """Every trial that is not `ok`, with what it recorded: none is in a median."""
    return [
        f"{t.side} {t.variant} {t.shape} {t.dags}x{t.tasks} tis={t.max_tis_per_query}"
        f" x{t.replicas} #{t.trial}: {t.status}, {t.tasks_done}/{t.expected_tasks} tasks ended"
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


def pairs(trials: list[Trial]) -> list[tuple[str, Scenario, Trial, dict[str, Trial]]]:
    """(Sluice variant, scenario, Sluice median, each Airflow side's median)."""
    by_key = medians(trials)
    found = []
    for ((side, variant), key), (sluice, _) in by_key.items():
        peers = peer_medians(trials, by_key, key)
        if side == "sluice" and peers:
            found.append((variant, key, sluice, peers))
    return found


def ratio_table(trials: list[Trial], cores: int) -> Table | None:
    """Sluice/Airflow per scenario, against the faster Airflow; a miss says whether it
    is CPU or waiting.

    The budget is the makespan that 20x the faster Airflow's tasks/s allows; the CPU
    floor is what Sluice's scheduler and Postgres CPU in the same trial take at
    least on this machine's cores (`cpu_floor_s`).
    """
    table = Table(
        title=f"Sluice / the faster Airflow (medians; target: tasks/s >= {TARGET_RATIO:.0f}x)",
        title_justify="left",
    )
    sides = airflow_sides(trials)
    columns = ["Sluice", "shape", "DAGs x tasks", "tis/query", "replicas", "Sluice tasks/s"]
    columns += [f"{side_label(side)} tasks/s" for side in sides]
    columns += [
        "faster",
        "tasks/s ratio",
        "lag p50 Airflow/Sluice",
        "total CPU/task Airflow/Sluice",
        "target",
    ]
    for name in columns:
        left = name in ("Sluice", "shape", "faster")
        table.add_column(name, justify="left" if left else "right")
    found = pairs(trials)
    for variant, key, sluice, peers in found:
        best = faster_peer(peers)
        assert best is not None  # pairs() keeps scenarios with a peer only
        airflow = peers[best]
        ratio = sluice.tasks_per_s / airflow.tasks_per_s if airflow.tasks_per_s else math.nan
        lag = airflow.lag_p50_ms / sluice.lag_p50_ms if sluice.lag_p50_ms else math.inf
        cpu = (
            airflow.total_cpu_ms_per_task / sluice.total_cpu_ms_per_task
            if sluice.total_cpu_ms_per_task
            else math.inf
        )
        table.add_row(
            variant,
            key[0],
            f"{key[1]}x{key[2]}",
            str(key[4]),
            str(key[3]),
            _f(sluice.tasks_per_s),
            *(_f(peers[side].tasks_per_s) if side in peers else "-" for side in sides),
            f"{side_label(best)} {airflow.variant}",
            f"{ratio:.2f}x",
            f"{lag:.1f}x",
            f"{cpu:.1f}x",
            target_verdict(sluice, airflow, cores),
        )
    return table if found else None


def targets_table(trials: list[Trial]) -> Table:
    """Sluice's absolute targets per scenario (reported, never asserted)."""
    table = Table(
        title=f"Sluice targets: lag p50 < {TARGET_LAG_MS:.0f} ms,"
        f" total CPU (scheduler + Postgres) < {TARGET_CPU_MS} ms/task",
        title_justify="left",
    )
    for name in (
        "variant",
        "shape",
        "DAGs x tasks",
        "tis/query",
        "replicas",
        "lag p50",
        "total CPU/task",
    ):
        left = name in ("variant", "shape")
        table.add_column(name, justify="left" if left else "right")
    for ((side, variant), key), (m, _) in medians(trials).items():
        if side != "sluice":
            continue
        lag_ok = m.lag_p50_ms < TARGET_LAG_MS
        cpu_ok = m.total_cpu_ms_per_task < TARGET_CPU_MS
        table.add_row(
            variant,
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
    lines: list[str] = []
    by_replicas: dict[tuple[Arm, str, int, int, int], dict[int, Trial]] = defaultdict(dict)
    for (arm_, key), (m, _) in medians(trials).items():
        by_replicas[(arm_, key[0], key[1], key[2], key[4])][key[3]] = m
    for ((side, variant), shape, dags, tasks, tis), found in sorted(by_replicas.items()):
        if len(found) < 2:
            continue
        counts = sorted(found)
        tps = " -> ".join(f"{found[r].tasks_per_s:.0f}" for r in counts)
        limit = scaling_limit(found[counts[-1]], cores)
        lines.append(
            f"{side} {variant} {shape} {dags}x{tasks} tis={tis}: tasks/s by replicas {counts}:"
            f" {tps}; limit at {counts[-1]}: {limit}"
        )
    return lines


def _cell(median: tuple[Trial, list[Trial]] | None, group: list[Trial]) -> str:
    """`tasks/s [min-max] (total CPU ms/task, lag p50 ms)`, and the trials when not all
    are `ok`. Total CPU is the scheduler processes' and Postgres's over the makespan."""
    failed = "" if all(t.ok for t in group) else f" [{statuses(group)}]"
    if median is None:
        return "-" + failed
    m = median[0]
    span = spread(group)
    return (
        f"{m.tasks_per_s:,.0f}{f' [{span}]' if span else ''}"
        f" ({_f(m.total_cpu_ms_per_task, 2)}, {m.lag_p50_ms:,.0f}){failed}"
    )


def _sizes_and_shapes(trials: list[Trial]) -> list[tuple[str, int, int]]:
    """The scenarios measured, by size (more DAGs first), then shape in the trials' order;
    a shape published at one size only has no row at the other."""
    sizes = sorted({(t.dags, t.tasks) for t in trials}, key=lambda d: -d[0])
    shapes = list(dict.fromkeys(t.shape for t in trials))
    measured = {(t.shape, t.dags, t.tasks) for t in trials}
    return [
        (shape, dags, tasks)
        for dags, tasks in sizes
        for shape in shapes
        if (shape, dags, tasks) in measured
    ]


def _ratio(sluice: Trial, peers: dict[str, Trial], *, name_it: bool) -> str:
    """Sluice's median tasks/s over the faster Airflow's, and (`name_it`, when the
    table has two Airflows) which one that was."""
    best = faster_peer(peers)
    if best is None or not peers[best].tasks_per_s:
        return "-"
    which = f" ({AIRFLOW_SIDES[best]})" if name_it else ""
    return f"{sluice.tasks_per_s / peers[best].tasks_per_s:.1f}x{which}"


def _peer_cell(
    trials: list[Trial],
    by_key: dict[Key, tuple[Trial, list[Trial]]],
    all_groups: dict[Key, list[Trial]],
    side: str,
    key: Scenario,
) -> str:
    """An Airflow side's cell in a scenario: its `peer_arm`'s, tagged with which arm
    that is when the run has both; then the other arm's trials when not all of them
    were `ok` (a failure never judges, but is never hidden either)."""
    peer = peer_arm(trials, by_key, side, key)
    if peer is None:
        return "-"
    cell = _cell(by_key.get((peer, key)), all_groups.get((peer, key), []))
    if not two_arms(trials, side):
        return cell
    cell = f"{cell} {ARM_TAGS[peer[1]]}"
    for variant, tag in ARM_TAGS.items():
        other = all_groups.get(((side, variant), key), [])
        if variant != peer[1] and not all(t.ok for t in other):
            cell += f"; {tag} [{statuses(other)}]"
    return cell


def markdown(trials: list[Trial], variant: str) -> str:
    """One variant's table for the README: Sluice's 1-replica medians against each
    Airflow's (`peer_arm`), each setting of tis/query; the ratio is of median
    tasks/s, against the faster Airflow."""
    by_key = medians(trials)
    all_groups = groups(trials)
    sides = airflow_sides(trials)
    tis_values = sorted({t.max_tis_per_query for t in trials})
    head = ["shape", "size"]
    for tis in tis_values:
        head += [f"tis {tis}: Sluice", *(side_label(side) for side in sides)]
        head += ["ratio" if len(sides) < 2 else "ratio (faster Airflow)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for shape, dags, tasks in _sizes_and_shapes(trials):
        cells = [shape, f"{dags}x{tasks}"]
        for tis in tis_values:
            key = (shape, dags, tasks, 1, tis)
            mine = ("sluice", variant)
            cells.append(_cell(by_key.get((mine, key)), all_groups.get((mine, key), [])))
            cells += [_peer_cell(trials, by_key, all_groups, side, key) for side in sides]
            sluice = by_key.get((mine, key))
            peers = peer_medians(trials, by_key, key)
            cells.append(_ratio(sluice[0], peers, name_it=len(sides) > 1) if sluice else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_cpu(trials: list[Trial], variant: str) -> str:
    """CPU and statements per task of one variant's 1-replica medians, every side:
    `scheduler+Postgres=total ms` and `statements (rows, ms)` (n/a without
    pg_stat_statements)."""
    by_key = medians(trials)
    sides = ["sluice", *airflow_sides(trials)]
    head = ["shape", "size", "tis"]
    for side in sides:
        head += [f"{side_label(side)} CPU", f"{side_label(side)} statements"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for tis in sorted({t.max_tis_per_query for t in trials}):
        for shape, dags, tasks in _sizes_and_shapes(trials):
            key = (shape, dags, tasks, 1, tis)
            cells = [shape, f"{dags}x{tasks}", str(tis)]
            for side in sides:
                mine = side == "sluice"
                arm_ = ("sluice", variant) if mine else peer_arm(trials, by_key, side, key)
                found = by_key.get((arm_, key)) if arm_ is not None else None
                if found is None:
                    cells += ["-", "-"]
                    continue
                tagged = not mine and two_arms(trials, side)
                tag = f" {ARM_TAGS[found[0].variant]}" if tagged else ""
                cells += [_cpu(found[0]) + tag, _statements(found[0])]
            if cells[3:] != ["-"] * (2 * len(sides)):
                lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _against(trials: list[Trial]) -> str:
    """Which Airflow trials the tables compare with, side by side (the same for both of
    Sluice's variants)."""
    sides = airflow_sides(trials)
    if not sides:
        return "no Airflow trials"
    parts = []
    for side in sides:
        if two_arms(trials, side):
            parts.append(
                f"{side_label(side)} at the faster of its like-for-like trials (L: runs"
                " examined per loop = the DAG count) and its defaults trials (D: 20) in each"
                " scenario (with at most 20 DAGs the two are one setting, run once as L)"
            )
        else:
            (variant,) = {t.variant for t in trials if t.side == side}
            parts.append(f"{side_label(side)}'s {variant} trials")
    return " and ".join(parts)


def markdown_tables(trials: list[Trial]) -> str:
    """The README's tables: like-for-like first (the headline), then Sluice's defaults,
    each with what its arms ran and a legend; a variant with no Sluice trial is left out."""
    parts = []
    for variant in (LIKE_FOR_LIKE, PRODUCTION, DEFAULTS):
        if not any(t.side == "sluice" and t.variant == variant for t in trials):
            continue
        faster = (
            " ratio: median tasks/s, Sluice / the faster Airflow (which one in brackets);"
            " targets are judged against it."
            if len(airflow_sides(trials)) > 1
            else " ratio: median tasks/s, Sluice / Airflow."
        )
        parts += [
            f"**{variant}** ({CAPTIONS[variant]} Against {_against(trials)}.)",
            "",
            "Cell: median tasks/s [min-max of the `ok` trials] (total CPU ms/task, scheduler"
            " plus Postgres over the makespan; lag p50 ms); [n/N ok] when a trial was not `ok`"
            " (`; L [...]` or `; D [...]`: the Airflow arm that does not judge);" + faster,
            "",
            markdown(trials, variant),
            "",
            "CPU per task, scheduler+Postgres=total ms; statements per task (rows, ms):",
            "",
            markdown_cpu(trials, variant),
            "",
        ]
    return "\n".join(parts).rstrip()


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
    series = sorted({(a, k[3]) for (a, k) in by_key})
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.2), squeeze=False)
    width = 0.8 / max(1, len(series))
    for ax, (dags, tasks, tis) in zip(axes[0], panels, strict=True):
        for i, (arm_, replicas) in enumerate(series):
            values = []
            for shape in shapes:
                found = by_key.get((arm_, (shape, dags, tasks, replicas, tis)))
                values.append(found[0].tasks_per_s if found else 0.0)
            xs = [x + i * width for x in range(len(shapes))]
            ax.bar(xs, values, width, label=f"{arm_[0]} {arm_[1]} x{replicas}")
        ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(shapes))])
        ax.set_xticklabels(shapes, rotation=20)
        ax.set_title(f"{dags} DAGs x {tasks} tasks, {tis} tis/query")
        ax.set_ylabel("tasks / s")
        if any(a[0] in AIRFLOW_SIDES for a, _ in series):
            ax.set_yscale("log")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def print_report(trials: list[Trial], console: Console, cores: int) -> None:
    console.print(trials_table(trials, "Per arm and scenario (median ok trial by tasks/s)"))
    ratios = ratio_table(trials, cores)
    if ratios is not None:
        console.print(ratios)
    if any(t.side == "sluice" for t in trials):
        console.print(targets_table(trials))
    for line in scaling_lines(trials, cores):
        console.print(line, soft_wrap=True)
    for line in not_ok_lines(trials):
        console.print(f"[red]not ok, in no median: {line}[/red]", soft_wrap=True, highlight=False)
