"""Tables of the Job-executor benchmark (`bench/k8s.py`): rich on a terminal, or Markdown."""

from __future__ import annotations

import math
from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from bench.k8s_figures import HEADLINE, SEGMENTS, TOTALS, K8sTrial, cpu_rows

# Targets (reported, never asserted).
TARGET_CORE_SHARE_PER_JOB_S = 0.05  # scheduler CPU: < 5% of a core per Job/s = < 50 ms/task
TARGET_REQUESTS_PER_TASK = 3.0  # Sluice's API requests per task, watches excluded
TOP_REQUESTS = 12


def _f(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def _name(t: K8sTrial) -> str:
    at = f" @{t.commit}" if t.commit else ""
    return (
        f"x{t.replicas} #{t.trial}{at}"
        + ("" if t.sidecar else " no sidecar")
        + (" archive" if t.archive else "")
    )


def _spread(t: K8sTrial, segment: str, with_mean: bool = False) -> str:
    s = t.latency.get(segment) or {}
    if not s.get("n"):
        return "-"
    text = f"{_f(s['p50'], 2)} / {_f(s['p95'], 2)}"
    return text + (f" ({_f(s['mean'], 2)})" if with_mean else "")


def verdicts(t: K8sTrial) -> list[str]:
    """The targets, met or missed, in words."""
    share = t.scheduler_ms_per_task / 1000
    cpu = (
        f"scheduler CPU {_f(t.scheduler_ms_per_task, 1)} ms/task = {share:.1%} of a core per "
        f"Job/s (target < {TARGET_CORE_SHARE_PER_JOB_S:.0%}): "
        + ("met" if share < TARGET_CORE_SHARE_PER_JOB_S else "MISSED")
    )
    per_task = t.sluice_requests_per_task
    api = (
        f"Sluice's API requests per task {_f(per_task, 3)} by the API server's count, "
        f"{_f(t.executor_requests_per_task, 3)} by the executors' own (target <= "
        f"{TARGET_REQUESTS_PER_TASK:g}): "
        + (
            "not measured"
            if math.isnan(per_task)
            else "met"
            if per_task <= TARGET_REQUESTS_PER_TASK
            else "MISSED"
        )
    )
    idle = t.replicas_idle_ms_per_s
    split = (
        f"of which the idle fleet {_f(idle, 1)} ms/s over {_f(t.cpu_window_s, 0)} s and the "
        f"tasks {_f(t.scheduler_marginal_ms_per_task, 1)} ms each "
        f"({t.scheduler_marginal_ms_per_task / 1000:.1%} of a core per Job/s; for reading "
        "only: the target is on the total)"
    )
    lines = [cpu, api] if math.isnan(idle) else [cpu, split, api]
    if t.archive:
        lines.append(
            f"logs archived {t.archived:,} (lost {t.archive_lost:,}), the last "
            f"{_f(t.archive_drain_s, 1)} s after the last run ended (inside the window above)"
        )
    return lines


def _status(t: K8sTrial, width: int = 90) -> str:
    """The status, and the errors cut short (`errors_lines` has them whole)."""
    if not t.errors:
        return t.status
    text = "; ".join(t.errors)
    return f"{t.status}: {text[:width]}" + ("..." if len(text) > width else "")


def errors_lines(trials: list[K8sTrial]) -> list[str]:
    return [f"{_name(t)}: {error}" for t in trials for error in t.errors]


def _elsewhere(t: K8sTrial) -> str:
    """Other namespaces seen while the trial ran ("-": not looked at), and the pods they
    still had at its end that were created during it."""
    during = t.foreign.get("namespaces_during")
    count = "-" if during is None else str(len(during))
    return f"{count} ({t.foreign.get('pods_created_elsewhere', '-')})"


def trials_rows(trials: list[K8sTrial]) -> tuple[list[str], list[list[str]]]:
    head = [
        "replicas, trial",
        "status",
        "tasks ok",
        "makespan s",
        "tasks/s",
        *(f"{name} p50 / p95 s" for name in HEADLINE),
        "sched CPU ms/task (core share per Job/s)",
        "Sluice API req/task (server / executor)",
        "all API req/task",
        "tasks queued per replica",
        "other namespaces during (pods)",
        "cores busy before t0",
    ]
    rows = []
    for t in trials:
        rows.append(
            [
                _name(t),
                _status(t),
                f"{t.tasks_succeeded}/{t.tasks_total}",
                _f(t.makespan_s, 1),
                _f(t.tasks_per_s, 2),
                *(_spread(t, name) for name in HEADLINE),
                f"{_f(t.scheduler_ms_per_task, 1)} ({_f(t.scheduler_ms_per_task / 10, 1)}%)",
                f"{_f(t.sluice_requests_per_task, 3)} / {_f(t.executor_requests_per_task, 3)}",
                _f(t.cluster_requests_per_task, 1),
                "/".join(str(n) for n in t.per_replica) or "-",
                _elsewhere(t),
                _f(t.foreign.get("busy_cores_before_t0"), 2),
            ]
        )
    return head, rows


def latency_rows(trials: list[K8sTrial]) -> tuple[list[str], list[list[str]]]:
    head = ["segment (p50 / p95 (mean), s)", *(_name(t) for t in trials)]
    rows = []
    for name, _, _ in SEGMENTS + TOTALS:
        rows.append([name, *(_spread(t, name, with_mean=True) for t in trials)])
    return head, rows


def api_rows(trials: list[K8sTrial]) -> tuple[list[str], list[list[str]]]:
    """Requests per task by kind (watches excluded), the largest first."""
    total: dict[str, int] = {}
    for t in trials:
        for key, n in t.api_cluster.items():
            total[key] = total.get(key, 0) + n
    keys = sorted(total, key=lambda k: -total[k])[:TOP_REQUESTS]
    head = ["API requests per task", *(_name(t) for t in trials)]

    def per(t: K8sTrial, n: float) -> str:
        return _f(n / t.tasks_succeeded, 2) if t.tasks_succeeded and t.api_valid else "-"

    rows = [[key, *(per(t, t.api_cluster.get(key, 0)) for t in trials)] for key in keys]
    rows.append(
        [
            "others",
            *(per(t, sum(n for k, n in t.api_cluster.items() if k not in keys)) for t in trials),
        ]
    )
    rows.append(["background (idle rate x window)", *(per(t, t.api_background) for t in trials)])
    rows.append(["all, less background", *(_f(t.cluster_requests_per_task, 2) for t in trials)])
    rows.append(
        [
            "Sluice's, by verb (server's count)",
            *(
                ", ".join(
                    f"{v} {_f(n / max(1, t.tasks_succeeded), 3)}"
                    for v, n in sorted(t.api_sluice_server.items())
                )
                or "-"
                for t in trials
            ),
        ]
    )
    rows.append(
        [
            "Sluice's, by verb (executors' count)",
            *(
                ", ".join(f"{v} {n}" for v, n in sorted(t.api_sluice_executor.items())) or "-"
                for t in trials
            ),
        ]
    )
    return head, rows


def cpu_table_rows(trials: list[K8sTrial]) -> tuple[list[str], list[list[str]]]:
    """CPU seconds (cores on average) by part over each trial's window."""
    per_trial = [
        {
            row[0]: row
            for row in cpu_rows(t.cpu, t.machine_busy_s, t.cpu_window_s, max(1, t.tasks_succeeded))
        }
        for t in trials
    ]
    order: list[str] = []
    for rows in per_trial:
        for part in rows:
            if part not in order:
                order.append(part)
    head = ["CPU s (cores, ms/task)", *(_name(t) for t in trials)]
    out = []
    for part in order:
        cells = []
        for rows in per_trial:
            row = rows.get(part)
            cells.append("-" if row is None else f"{row[1]:,.1f} ({row[2]:.2f}, {row[3]:,.1f})")
        out.append([part, *cells])
    out.append(["window s", *(_f(t.cpu_window_s, 1) for t in trials)])
    return head, out


SECTIONS: list[tuple[str, Callable[[list[K8sTrial]], tuple[list[str], list[list[str]]]]]] = [
    ("Trials", trials_rows),
    ("Latency by segment", latency_rows),
    ("API requests (non-watch) per task", api_rows),
    ("Where the CPU went", cpu_table_rows),
]


def print_report(trials: list[K8sTrial], console: Console) -> None:
    for title, rows_of in SECTIONS:
        head, rows = rows_of(trials)
        table = Table(title=title, title_justify="left")
        for i, name in enumerate(head):
            table.add_column(name, justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    for line in errors_lines(trials):
        console.print(f"[red]{line}[/red]", highlight=False, soft_wrap=True)
    for t in trials:
        for line in verdicts(t):
            console.print(f"{_name(t)}: {line}", highlight=False, soft_wrap=True)


def markdown(trials: list[K8sTrial]) -> str:
    out = []
    for title, rows_of in SECTIONS:
        head, rows = rows_of(trials)
        out.append(f"**{title}**\n")
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        out.extend("| " + " | ".join(row) + " |" for row in rows)
        out.append("")
    for t in trials:
        out.extend(f"- {_name(t)}: {line}" for line in verdicts(t))
    return "\n".join(out)
