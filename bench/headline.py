"""The headline at a glance: one table and one plot from the committed like-for-like JSON.

`python -m bench.headline [FILE.json ...] [--readme README.md] [--plot PATH]`

For each scenario (shape, size, tasks per query; one replica, like for like) the
table has the ratio of Sluice's median tasks/s to the faster Airflow's, with a
bootstrap confidence interval, the same ratio measured from each side's first
action when the trials recorded it, each side's CPU per task (scheduler plus
Postgres), and Sluice's lag p50. The plot draws both ratios with their
intervals against the 20x target and the CPU per task against the 0.5 ms one.
With `--readme`, the table replaces the block between the README's
`<!-- headline -->` markers (`make bench-headline`; a unit test checks that the
committed README is what the committed JSON renders).

The interval: each arm's `ok` trials are resampled with replacement
(`RESAMPLES` times, a fixed seed, so the table renders the same every time), the
statistic recomputed on each resample as the table computes it (the median trial
of Sluice's arm over the highest median of the Airflow arms: the faster Airflow
is chosen again in every resample), and the 2.5th and 97.5th percentiles taken.
With 3 or 5 trials an arm the medians can take few values: the interval is
coarse, and says how far those trials pin a ratio down, no more.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.metrics import AIRFLOW_SIDES, LIKE_FOR_LIKE, Trial, median_trial
from bench.report import TARGET_CPU_MS, TARGET_LAG_MS, TARGET_RATIO

PUBLISHED = Path(__file__).parent / "published"
REPO = Path(__file__).resolve().parent.parent
# The publication the README's headline renders: every shape at both sizes, at 7d5dfaa,
# on one VM in one sitting.
HEADLINE = tuple(
    PUBLISHED / f"compare-2026-12-07-{name}.json"
    for name in (
        "no_structure",
        "linear-100x10",
        "linear-10x100",
        "star-100x10",
        "star-10x100",
        "grid-100x10",
        "grid-10x100",
        "binary_tree-100x10",
        "binary_tree-10x100",
    )
)
PLOT = REPO / "docs" / "img" / "bench-headline.svg"
BEGIN, END = "<!-- headline:begin -->", "<!-- headline:end -->"
RESAMPLES = 10_000
SEED = 36
Figure = Callable[[Trial], float]


def tasks_per_s(t: Trial) -> float:
    return t.tasks_per_s


def active_tasks_per_s(t: Trial) -> float:
    return t.active_tasks_per_s


def median(values: Sequence[float]) -> float:
    """The lower middle value, as `metrics.median_trial` picks the median trial."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def ratio_of_medians(sluice: Sequence[float], peers: Sequence[Sequence[float]]) -> float:
    """Sluice's median over the highest of the peers' medians."""
    return median(sluice) / max(median(p) for p in peers)


def bootstrap_interval(
    sluice: Sequence[float],
    peers: Sequence[Sequence[float]],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = 0.95,
) -> tuple[float, float]:
    """A percentile bootstrap interval of `ratio_of_medians`: every arm resampled."""
    rng = random.Random(seed)
    found = sorted(
        ratio_of_medians(
            rng.choices(sluice, k=len(sluice)), [rng.choices(p, k=len(p)) for p in peers]
        )
        for _ in range(resamples)
    )
    tail = (1 - level) / 2
    return found[int(tail * (resamples - 1))], found[math.ceil((1 - tail) * (resamples - 1))]


@dataclass(frozen=True)
class Ratio:
    value: float
    low: float
    high: float
    arm: tuple[str, str]  # the faster Airflow's arm (side, variant) at the point estimate

    @property
    def peer(self) -> str:
        return self.arm[0]

    def cell(self, *, peer: bool = False) -> str:
        named = f" ({AIRFLOW_SIDES[self.peer]})" if peer else ""
        if math.isnan(self.low):
            return f"{self.value:.1f}x [no interval: an arm has one trial]{named}"
        return f"{self.value:.1f}x [{self.low:.1f}-{self.high:.1f}]{named}"


def ratio(
    sluice: list[Trial], airflow: dict[tuple[str, str], list[Trial]], figure: Figure
) -> Ratio | None:
    """The ratio of `figure`'s medians over the `ok` trials, with its interval; an Airflow
    arm without an `ok` trial is left out (as `report.peer_arm` does). None without an
    `ok` trial on either side, or when an `ok` trial did not record the figure (a run
    from before it was measured)."""
    mine = [t for t in sluice if t.ok]
    arms = {arm: [t for t in trials if t.ok] for arm, trials in airflow.items()}
    arms = {arm: ok for arm, ok in arms.items() if ok}
    every = [t for ok in (mine, *arms.values()) for t in ok]
    if not mine or not arms or any(math.isnan(figure(t)) for t in every):
        return None
    values = {arm: [figure(t) for t in ok] for arm, ok in arms.items()}
    best = max(values, key=lambda a: median(values[a]))
    ours = [figure(t) for t in mine]
    # Resampling one trial gives that trial back: no interval, rather than a point.
    single = min(len(ours), *(len(v) for v in values.values())) < 2
    low, high = (math.nan, math.nan) if single else bootstrap_interval(ours, list(values.values()))
    return Ratio(ratio_of_medians(ours, list(values.values())), low, high, best)


@dataclass(frozen=True)
class Row:
    shape: str
    dags: int
    tasks: int
    tis: int
    from_unpause: Ratio
    from_first_action: Ratio | None
    sluice_cpu: float  # total ms per task, Sluice's median trial
    sluice_lag: float  # lag p50 ms, Sluice's median trial
    airflow_cpu: float  # the median trial of the Airflow arm the row is judged by
    # The first action after the unpause over the `ok` trials: (min, max) ms, Sluice's
    # and those of the Airflow arm the ratio from the first action is judged by.
    sluice_first_ms: tuple[float, float]
    airflow_first_ms: tuple[float, float]
    trials: int = 0  # every trial of the row's arms (Sluice's and every Airflow arm's)
    not_ok: int = 0

    @property
    def label(self) -> str:
        return f"{self.shape} {self.dags}x{self.tasks}, {self.tis}/query"


def rows(trials: list[Trial], variant: str = LIKE_FOR_LIKE) -> list[Row]:
    """One row per scenario with Sluice's `variant` and an Airflow arm at one replica."""
    scenarios: dict[tuple[str, int, int, int], dict[tuple[str, str], list[Trial]]] = {}
    for t in trials:
        if t.replicas == 1:
            key = (t.shape, t.dags, t.tasks, t.max_tis_per_query)
            scenarios.setdefault(key, {}).setdefault((t.side, t.variant), []).append(t)
    found = []
    for (shape, dags, tasks, tis), arms in scenarios.items():
        sluice = arms.get(("sluice", variant), [])
        airflow = {arm: ts for arm, ts in arms.items() if arm[0] in AIRFLOW_SIDES}
        unpause = ratio(sluice, airflow, tasks_per_s)
        if unpause is None:
            continue
        active = ratio(sluice, airflow, active_tasks_per_s)
        # The Airflow arm the row is judged by: the faster from the first action when the
        # trials recorded it, else from the unpause.
        peer = (active or unpause).arm
        # Both arms have an `ok` trial: `ratio` found one on each side.
        mine, theirs = median_trial(sluice), median_trial(airflow[peer])
        assert mine is not None
        assert theirs is not None
        found.append(
            Row(
                shape,
                dags,
                tasks,
                tis,
                unpause,
                active,
                mine.total_cpu_ms_per_task,
                mine.lag_p50_ms,
                theirs.total_cpu_ms_per_task,
                first_span(sluice),
                first_span(airflow[peer]),
                trials=len(sluice) + sum(len(ts) for ts in airflow.values()),
                not_ok=sum(
                    not t.ok for t in [*sluice, *(t for ts in airflow.values() for t in ts)]
                ),
            )
        )
    order = ("no_structure", "linear", "star", "grid", "binary_tree")
    return sorted(
        found,
        key=lambda r: (-r.dags, r.tis, order.index(r.shape) if r.shape in order else 99, r.shape),
    )


def first_span(trials: list[Trial]) -> tuple[float, float]:
    values = [t.first_action_ms for t in trials if t.ok and not math.isnan(t.first_action_ms)]
    return (min(values), max(values)) if values else (math.nan, math.nan)


def _ms(span: tuple[float, float]) -> str:
    low, high = span
    if math.isnan(low):
        return "-"
    if round(low) == round(high):
        return f"{max(low, 0):,.0f}"
    return f"{max(low, 0):,.0f}-{high:,.0f}"


def markdown(found: list[Row]) -> str:
    """The README's table: a row per scenario, the verdicts counted under it."""
    first = any(r.from_first_action is not None for r in found)
    head = ["scenario"]
    if first:
        head += [
            "ratio from each side's first action [95% CI] (faster Airflow)",
            "first action after the unpause, ms: Sluice / Airflow",
        ]
    head += [
        "ratio from the unpause [95% CI] (faster Airflow)",
        "CPU ms/task: Sluice",
        "faster Airflow",
        "lag p50 ms: Sluice",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in found:
        cells = [r.label]
        if first:
            cells.append(r.from_first_action.cell(peer=True) if r.from_first_action else "-")
            cells.append(f"{_ms(r.sluice_first_ms)} / {_ms(r.airflow_first_ms)}")
        cells += [
            r.from_unpause.cell(peer=True),
            f"{r.sluice_cpu:.2f}",
            f"{r.airflow_cpu:.2f}",
            f"{r.sluice_lag:,.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    met_cpu = sum(r.sluice_cpu <= TARGET_CPU_MS for r in found)
    met_lag = sum(r.sluice_lag < TARGET_LAG_MS for r in found)
    verdicts = [
        _verdict("from the unpause", [r.from_unpause for r in found]),
    ]
    if first:
        verdicts.insert(0, _verdict("from the first action", [r.from_first_action for r in found]))
    lines += [
        "",
        f"Trials: {_not_ok(found)}. Targets: {TARGET_RATIO:.0f}x the faster Airflow's tasks/s"
        " met in "
        + "; ".join(verdicts)
        + f" (of {len(found)} scenarios; in brackets, with the whole interval above it);"
        f" CPU per task at most {TARGET_CPU_MS} ms met in {met_cpu} of {len(found)};"
        f" lag p50 under {TARGET_LAG_MS:.0f} ms met in {met_lag} of {len(found)}.",
    ]
    return "\n".join(lines)


def _not_ok(found: list[Row]) -> str:
    total = sum(r.trials for r in found)
    failed = sum(r.not_ok for r in found)
    if not failed:
        return f"{total}, every one `ok`"
    return f"{total}, {failed} not `ok` (in no median)"


def _verdict(measured: str, ratios: list[Ratio | None]) -> str:
    met = sum(r is not None and r.value >= TARGET_RATIO for r in ratios)
    sure = sum(r is not None and r.low >= TARGET_RATIO for r in ratios)
    return f"{met} ({sure}) by the median ratio {measured}"


def plot(found: list[Row], path: Path) -> Path:
    """Two panels, a row per scenario: the ratio from each side's first action and from
    the unpause, each with its interval (log scale, the 20x line), and each side's CPU
    per task (log scale, the 0.5 ms line). SVG: text in git."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    def ticks(ax: object, at: list[float]) -> None:
        axis = ax.xaxis  # type: ignore[attr-defined]
        axis.set_major_locator(FixedLocator(at))
        axis.set_minor_locator(NullLocator())
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))

    above = {
        "fontsize": 8,
        "loc": "lower center",
        "bbox_to_anchor": (0.5, 1.0),
        "ncol": 3,
        "frameon": False,
    }
    matplotlib.rcParams["svg.hashsalt"] = "sluice"  # the same file from the same figures
    labels = [r.label for r in found]
    ys = list(range(len(found)))[::-1]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.32 * len(found) + 1.6), sharey=True)
    height = 0.4
    # From each side's first action (when the trials recorded it) above, from the unpause
    # below: each bar the median ratio, its whisker the 95% interval.
    series = [("from the unpause", "#2b7bb9", [r.from_unpause for r in found])]
    if any(r.from_first_action for r in found):
        series.insert(0, ("from the first action", "#1a9850", [r.from_first_action for r in found]))
    offsets = [height / 2, -height / 2] if len(series) == 2 else [0.0]
    for (name, color, ratios), offset in zip(series, offsets, strict=True):
        at = [y + offset for y, r in zip(ys, ratios, strict=True) if r is not None]
        shown = [r for r in ratios if r is not None]
        left.barh(
            at,
            [r.value for r in shown],
            height if len(series) == 2 else 0.8,
            xerr=[
                [0.0 if math.isnan(r.low) else r.value - r.low for r in shown],
                [0.0 if math.isnan(r.high) else r.high - r.value for r in shown],
            ],
            label=name,
            color=color,
            ecolor="#333333",
            capsize=2,
        )
    left.axvline(TARGET_RATIO, color="#c0392b", linestyle="--", label=f"target {TARGET_RATIO:.0f}x")
    left.set_xscale("log")
    left.set_xlabel("Sluice tasks/s / faster Airflow's (median, 95% bootstrap CI)")
    ticks(left, [1, 2, 5, 10, 20, 50])
    left.set_yticks(ys, labels, fontsize=8)
    left.legend(**above)
    right.barh(
        [y + height / 2 for y in ys],
        [r.sluice_cpu for r in found],
        height,
        label="Sluice",
        color="#2b7bb9",
    )
    right.barh(
        [y - height / 2 for y in ys],
        [r.airflow_cpu for r in found],
        height,
        label="faster Airflow",
        color="#999999",
    )
    right.axvline(
        TARGET_CPU_MS, color="#c0392b", linestyle="--", label=f"target {TARGET_CPU_MS} ms"
    )
    right.set_xscale("log")
    ticks(right, [0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100])
    right.set_xlabel("CPU ms per task, scheduler + Postgres (median trial)")
    right.legend(**above)
    fig.suptitle(
        "Like for like, one replica each (bench/published, make bench-headline)", fontsize=10
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)
    return path


def load(files: Sequence[Path]) -> list[Trial]:
    return [Trial.from_dict(t) for f in files for t in json.loads(Path(f).read_text())["trials"]]


def replace_block(text: str, table: str) -> str:
    """`text` with the block between the headline markers replaced by `table`."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"no {BEGIN} ... {END} block to replace")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.headline", description=__doc__)
    parser.add_argument("files", nargs="*", type=Path, help="published JSONs (default: HEADLINE)")
    parser.add_argument("--readme", type=Path, help="rewrite this file's headline block")
    parser.add_argument("--plot", type=Path, help=f"write the plot here (e.g. {PLOT})")
    args = parser.parse_args(argv)
    found = rows(load(args.files or HEADLINE))
    table = markdown(found)
    print(table)
    if args.readme:
        args.readme.write_text(replace_block(args.readme.read_text(), table))
        print(f"rewrote the headline block of {args.readme}")
    if args.plot:
        print(f"plot: {plot(found, args.plot)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
