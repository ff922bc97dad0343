"""The steady-state benchmark's search and tables (`python -m bench.arrival`).

The search moves each arm's rate (DAGs on a one-minute schedule) up while it keeps
up and down while it falls behind (`next_dags`, by `--factor`); with a resolution
(`--capacity`) it then bisects between the highest rate kept up with and the lowest
fallen behind at, geometrically, until they are within the resolution. A rate is
kept up with when a strict majority of its `ok` trials kept up (`group_keeps_up`;
each trial by its backlog's slope, `arrival_figures`); an arm's trials at a rate
stop once the trials still to run cannot change that verdict (`decided`). An arm's
capacity is the range [highest rate kept up with, lowest fallen behind at)
(`capacities`); the faster Airflow is the best of every Airflow arm, so its capacity
lies in [the highest of their lower bounds, the highest of their upper bounds], and
the capacity ratio is a range (`ratio`). The target (reported, never asserted): Sluice's
capacity at least 20x the faster Airflow's and run lag p99 < 1 s at Sluice's
capacity rate, met only when both are (`target_verdict`).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from bench.arrival_figures import SLOPE, ArrivalTrial
from bench.metrics import AIRFLOW_SIDES, side_label

TARGET_RATIO = 20.0
TARGET_P99_MS = 1000.0
RESOLUTION = 0.15  # `--capacity`: stop bisecting once behind / kept <= 1 + this
Arm = tuple[str, str]


def nice(x: float) -> int:
    """`x` to two significant figures (453 -> 450, 11,314 -> 11,000, 7.07 -> 7), so that
    runs of different arms and commands meet at the same rates (and templates)."""
    if x < 1:
        return 1
    step = 10 ** max(0, math.floor(math.log10(x)) - 1)
    return int(round(x / step) * step)


def bracket(history: list[tuple[int, bool]]) -> tuple[int | None, int | None]:
    """(highest rate kept up with below the lowest fallen behind at, that lowest);
    None where there is none."""
    behind = [d for d, ok in history if not ok]
    hi = min(behind) if behind else None
    kept = [d for d, ok in history if ok and (hi is None or d < hi)]
    return (max(kept) if kept else None), hi


def next_dags(
    history: list[tuple[int, bool]],
    start: int,
    factor: float = 2.0,
    resolution: float | None = None,
) -> int | None:
    """The next rate (DAGs) to try for an arm, given the rates tried and whether it kept
    up with each, or None when done.

    Bracketing: `start`, then up by `factor` while it keeps up, down while it falls
    behind. Without a `resolution` the search ends once it has a rate kept up with
    below one fallen behind at. With one, it bisects that bracket at its geometric
    middle (to two significant figures, `nice`) until the lowest rate fallen behind
    at is within `1 + resolution` of the highest kept up with below it. A rate kept
    up with above one fallen behind at (noise) is left out of the bracket (the
    report lists it). Never a rate already tried, nor below 1.
    """
    if not history:
        return start
    tried = {d for d, _ in history}
    lo, hi = bracket(history)
    if hi is None:  # kept up everywhere: up
        assert lo is not None
        nxt = math.ceil(lo * factor)
    elif lo is None:  # behind everywhere below: down, unless it kept up above (noise)
        if any(ok for _, ok in history) and resolution is None:
            return None
        nxt = math.floor(hi / factor)
    elif resolution is None or hi <= lo * (1 + resolution):
        return None
    else:
        nxt = nice(math.sqrt(lo * hi))
        if not lo < nxt < hi:
            nxt = (lo + hi) // 2
    return None if nxt < 1 or nxt in tried else nxt


def group_keeps_up(group: list[ArrivalTrial]) -> bool:
    """Kept up with a rate: a strict majority of its `ok` trials kept up (2 of 3; a tie,
    after an `error` trial, is not a majority). Trials not `ok` do not vote."""
    ok = [t for t in group if t.ok]
    return 2 * sum(t.keeps_up for t in ok) > len(ok)


def decided(group: list[ArrivalTrial], planned: int) -> bool | None:
    """`group_keeps_up`'s verdict on a rate once no further trial of the `planned` can
    change it (None until then): the search stops an arm's trials at a rate there.

    With `kept` and `behind` the `ok` trials that kept up and fell behind, and `left`
    trials still to run, the rate is kept up with whatever they do when `kept >
    behind + left` (every one left falls behind), and not when `kept + left <=
    behind` (every one left keeps up: a tie is not a majority). Trials not `ok` do
    not vote, so each one leaves one fewer to run: of 3, two that agree decide it;
    one fallen behind and one `error` decide "not kept up"; one kept up and one
    `error` do not. Once all `planned` ran (`left` 0), one of the two holds.
    """
    kept = sum(1 for t in group if t.ok and t.keeps_up)
    behind = sum(1 for t in group if t.ok and not t.keeps_up)
    left = max(0, planned - len(group))
    if kept > behind + left:
        return True
    if kept + left <= behind:
        return False
    return None


def groups(trials: list[ArrivalTrial]) -> dict[tuple[Arm, int], list[ArrivalTrial]]:
    found: dict[tuple[Arm, int], list[ArrivalTrial]] = defaultdict(list)
    for t in trials:
        found[((t.side, t.variant), t.dags)].append(t)
    order = {side: i for i, side in enumerate(("sluice", *AIRFLOW_SIDES))}
    return dict(sorted(found.items(), key=lambda kv: (order.get(kv[0][0][0], 9), kv[0])))


def median(group: list[ArrivalTrial]) -> ArrivalTrial | None:
    """The `ok` trial with the median run lag p99 (the lower middle one of an even count)."""
    ok = sorted((t for t in group if t.ok), key=lambda t: t.run_lag_p99_ms)
    return ok[(len(ok) - 1) // 2] if ok else None


@dataclass(frozen=True)
class Tally:
    """One arm at one rate: its `ok` trials that kept up, its `ok` trials, all trials."""

    dags: int
    kept: int
    ok: int
    trials: int

    @property
    def keeps_up(self) -> bool:
        return 2 * self.kept > self.ok

    def __str__(self) -> str:
        others = f", {self.trials - self.ok} not ok" if self.trials > self.ok else ""
        return f"{self.dags:,} ({self.kept}/{self.ok}{others})"


@dataclass(frozen=True)
class Capacity:
    """What the search found for one arm: capacity in [kept, behind) runs a minute (None:
    no such rate in those tried), every rate's tally, and run lag at `kept`."""

    arm: Arm
    tasks: int
    tallies: tuple[Tally, ...]
    kept: int | None
    behind: int | None
    inverted: tuple[int, ...]  # rates kept up with above `behind`: noise, out of the range
    lag_p50_ms: float  # at `kept`: the median of its `ok` trials' p50
    lag_p99_ms: float  # ... and of their p99
    lag_p99_worst_ms: float  # the worst `ok` trial's p99 at `kept`
    lag_trials: int  # `ok` trials at `kept`
    p99_under_target: int | None  # highest rate kept up with, every `ok` trial's p99 < 1 s

    @property
    def width(self) -> float:
        """behind / kept - 1: how far apart the bounds are (NaN while one is missing)."""
        if self.kept is None or self.behind is None:
            return math.nan
        return self.behind / self.kept - 1

    def tally(self, dags: int | None) -> Tally | None:
        return next((t for t in self.tallies if t.dags == dags), None)


def capacities(trials: list[ArrivalTrial]) -> list[Capacity]:
    by_arm: dict[Arm, dict[int, list[ArrivalTrial]]] = defaultdict(dict)
    for (arm, dags), group in groups(trials).items():
        by_arm[arm][dags] = group
    found = []
    for arm, rates in by_arm.items():
        tallies = tuple(
            Tally(
                dags=d,
                kept=sum(1 for t in g if t.ok and t.keeps_up),
                ok=sum(1 for t in g if t.ok),
                trials=len(g),
            )
            for d, g in sorted(rates.items())
        )
        history = [(t.dags, t.keeps_up) for t in tallies if t.ok]
        kept, behind = bracket(history)
        inverted = tuple(d for d, ok in history if ok and behind is not None and d > behind)
        ok_at = [t for t in rates.get(kept or -1, []) if t.ok]
        under = [
            t.dags
            for t in tallies
            if t.ok
            and t.keeps_up
            and all(x.run_lag_p99_ms < TARGET_P99_MS for x in rates[t.dags] if x.ok)
        ]
        found.append(
            Capacity(
                arm=arm,
                tasks=next(iter(rates.values()))[0].tasks,
                tallies=tallies,
                kept=kept,
                behind=behind,
                inverted=inverted,
                lag_p50_ms=_median([t.run_lag_p50_ms for t in ok_at]),
                lag_p99_ms=_median([t.run_lag_p99_ms for t in ok_at]),
                lag_p99_worst_ms=max((t.run_lag_p99_ms for t in ok_at), default=math.nan),
                lag_trials=len(ok_at),
                p99_under_target=max(under) if under else None,
            )
        )
    return found


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


@dataclass(frozen=True)
class Ratio:
    """Sluice's capacity over the faster Airflow's, as a range. The faster Airflow is
    the best of every Airflow arm: its capacity lies in [`airflow_low`, `airflow_high`]
    (the highest lower bound of any arm, the highest upper bound; None: unknown). The
    ratio lies in [sluice.kept / airflow_high, sluice.behind / airflow_low]; a bound
    that needs a missing one is None."""

    sluice: Capacity
    airflow_low: int | None
    airflow_low_arm: Arm | None
    airflow_high: int | None
    airflow_high_arm: Arm | None
    open_arms: tuple[Arm, ...]  # Airflow arms that never fell behind: no upper bound
    peers: tuple[Arm, ...] = ()  # every Airflow arm it is against

    @property
    def against(self) -> str:
        """ "the faster Airflow", or the one Airflow arm when there is only one."""
        return _arm(self.peers[0]) if len(self.peers) == 1 else "the faster Airflow"

    @property
    def low(self) -> float | None:
        if self.sluice.kept is None or self.airflow_high is None:
            return None
        return self.sluice.kept / self.airflow_high

    @property
    def high(self) -> float | None:
        if self.sluice.behind is None or self.airflow_low is None:
            return None
        return self.sluice.behind / self.airflow_low


def ratio(sluice: Capacity, found: list[Capacity]) -> Ratio:
    peers = [c for c in found if c.arm[0] in AIRFLOW_SIDES]
    low = max((c for c in peers if c.kept is not None), key=lambda c: c.kept or 0, default=None)
    open_arms = tuple(c.arm for c in peers if c.behind is None)
    high = None
    if peers and not open_arms:
        high = max(peers, key=lambda c: c.behind or 0)
    return Ratio(
        sluice=sluice,
        airflow_low=low.kept if low else None,
        airflow_low_arm=low.arm if low else None,
        airflow_high=high.behind if high else None,
        airflow_high_arm=high.arm if high else None,
        open_arms=open_arms,
        peers=tuple(c.arm for c in peers),
    )


def _arm(arm: Arm | None) -> str:
    return "-" if arm is None else f"{side_label(arm[0])} {arm[1]}"


def _rate(dags: int | None, tasks: int) -> str:
    if dags is None:
        return "?"
    return f"{dags:,} runs/min ({dags * tasks / 60:,.1f} tasks/s)"


def _x(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}x"


def ratio_line(r: Ratio) -> str:
    """The capacity ratio of one Sluice arm against the faster Airflow, as a range."""
    if r.airflow_high is None and r.airflow_low is None and not r.open_arms:
        return f"ratio, {_arm(r.sluice.arm)} / the faster Airflow: no Airflow arm in these trials"
    why = []
    if r.airflow_high is None:
        why.append(
            "no upper bound on Airflow's capacity: "
            + (
                ", ".join(_arm(a) for a in r.open_arms) + " never fell behind"
                if r.open_arms
                else "no Airflow arm"
            )
        )
    if r.sluice.kept is None:
        why.append("Sluice kept up at no rate tried")
    if r.sluice.behind is None:
        why.append("Sluice never fell behind: no upper bound on its capacity")
    if r.airflow_low is None and r.airflow_high is not None:
        why.append("no Airflow arm kept up at any rate tried")
    airflow = (
        f"{r.against}'s capacity in [{_n(r.airflow_low)}, {_n(r.airflow_high)})"
        f" runs/min (lower bound: {_arm(r.airflow_low_arm)}; upper: {_arm(r.airflow_high_arm)})"
    )
    note = f" ({'; '.join(why)})" if why else ""
    return (
        f"ratio, {_arm(r.sluice.arm)} / {r.against}: {_x(r.low)} to {_x(r.high)};"
        f" Sluice's capacity in [{_n(r.sluice.kept)}, {_n(r.sluice.behind)}) runs/min, {airflow}"
        f"{note}"
    )


def _n(dags: int | None) -> str:
    return "?" if dags is None else f"{dags:,}"


def target_verdict(r: Ratio, unmeasured: tuple[Arm, ...] = ()) -> str:
    """Met only when both halves are: the ratio's lower bound >= 20, and run lag p99 < 1
    s in every `ok` trial at Sluice's capacity rate (the highest it kept up with).
    Otherwise MISSED, with each half that is not met and why. `unmeasured`: Airflow
    arms the target is judged against that these trials do not have (ADR 0050): the
    rate half is not judged on a subset of them."""
    return _verdict(r.sluice.arm, r.low, unmeasured, [r.sluice])


def _verdict(
    arm: Arm, low: float | None, unmeasured: tuple[Arm, ...], sluices: list[Capacity]
) -> str:
    """`target_verdict` for a ratio whose lower end is `low`, with Sluice's capacity
    measured in each of `sluices` (one per sitting): the lag half is judged at each
    one's capacity rate."""
    misses, holds = [], []
    if unmeasured:
        misses.append(f"rate: not judged, {_unmeasured(unmeasured)}")
    elif low is None:
        misses.append("rate: not shown (the ratio has no lower bound; see the ratio's line)")
    elif low < TARGET_RATIO:
        misses.append(f"rate: the ratio's lower bound is {low:.1f}x < {TARGET_RATIO:.0f}x")
    else:
        holds.append(f"rate: the ratio's lower bound is {low:.1f}x")
    if any(s.kept is None for s in sluices):
        misses.append("lag: no capacity rate to judge it at")
    else:
        worst = max(s.lag_p99_worst_ms for s in sluices)
        if len(sluices) == 1:
            s = sluices[0]
            lag = (
                f"p99 {s.lag_p99_worst_ms:,.0f} ms in the worst of {s.lag_trials} trials at"
                f" {s.kept:,} runs/min (median {s.lag_p99_ms:,.0f})"
            )
        else:
            each = ", ".join(f"{s.lag_p99_worst_ms:,.0f} at {s.kept:,}" for s in sluices)
            lag = (
                f"p99 {worst:,.0f} ms in the worst trial at the sittings' capacity rates"
                f" (worst p99 ms at runs/min: {each})"
            )
        (holds if worst < TARGET_P99_MS else misses).append(f"lag: {lag}")
    head = (
        f"target for {_arm(arm)} (capacity >= {TARGET_RATIO:.0f}x the faster Airflow's,"
        " run lag p99 < 1 s at that rate)"
    )
    if not misses:
        return f"{head}: met ({'; '.join(holds)})"
    held = f"; holds: {'; '.join(holds)}" if holds else ""
    return f"{head}: MISSED ({'; '.join(misses)}{held})"


def _unmeasured(arms: tuple[Arm, ...]) -> str:
    return f"{len(arms)} Airflow arm(s) not measured yet: {', '.join(_arm(a) for a in arms)}"


def missing_arms(trials: list[ArrivalTrial], expected: tuple[Arm, ...]) -> tuple[Arm, ...]:
    """The `expected` Airflow arms that no `ok` trial of `trials` measured."""
    have = {(t.side, t.variant) for t in trials if t.ok}
    return tuple(a for a in expected if a[0] in AIRFLOW_SIDES and a not in have)


def capacity_lines(trials: list[ArrivalTrial], expected: tuple[Arm, ...] = ()) -> list[str]:
    """Per arm its capacity range, then per Sluice arm the ratio and the target (not
    judged on the rate while an `expected` Airflow arm is missing)."""
    found = capacities(trials)
    unmeasured = missing_arms(trials, expected)
    lines = []
    old = [t for t in trials if t.ok and t.criterion != SLOPE]
    if old:
        lines.append(
            f"{len(old)} of these trials were judged by the {old[0].criterion} criterion"
            " (saved before issue 36: every minute-end backlog sample at most 1% of a"
            " minute's runs), not by the backlog's slope; their ranges are that criterion's"
        )
    for c in found:
        width = "" if math.isnan(c.width) else f", {c.width * 100:.0f}% wide"
        inverted = (
            f"; kept up above its lower bound of fallen behind (noise, left out):"
            f" {', '.join(f'{d:,}' for d in c.inverted)}"
            if c.inverted
            else ""
        )
        lag = (
            f"; run lag p50/p99 at {c.kept:,}: {_f(c.lag_p50_ms)}/{_f(c.lag_p99_ms)} ms"
            f" (median of {c.lag_trials}; worst p99 {_f(c.lag_p99_worst_ms)})"
            if c.kept is not None
            else ""
        )
        lines.append(
            f"{_arm(c.arm)}: capacity in [{_rate(c.kept, c.tasks)}, {_rate(c.behind, c.tasks)})"
            f"{'' if c.behind is not None else ' (never fell behind: a lower bound only)'}"
            f"{width}; rates tried (runs/min, kept up/ok trials): "
            f"{', '.join(str(t) for t in c.tallies)}{lag}{inverted}"
        )
    for s in (c for c in found if c.arm[0] == "sluice"):
        r = ratio(s, found)
        lines.append(ratio_line(r))
        lines.append(target_verdict(r, unmeasured))
        if s.p99_under_target is not None and r.airflow_high:
            lines.append(
                f"{_arm(s.arm)}: run lag p99 < 1 s in every trial up to {s.p99_under_target:,}"
                f" runs/min ({s.p99_under_target / r.airflow_high:.1f}x the faster Airflow's"
                " upper bound)"
            )
    return lines


@dataclass(frozen=True)
class Sitting:
    """One file's trials: arms interleaved on one machine in one command (ADR 0050)."""

    name: str
    trials: list[ArrivalTrial]


def paired_lines(sittings: list[Sitting], expected: tuple[Arm, ...] = ()) -> list[str]:
    """Across sittings (ADR 0050): each pairs Sluice with Airflow arms on one machine,
    and Sluice over the faster Airflow is the smallest of the sittings' ratios, so it
    lies in [the smallest of their lower ends, the smallest of their upper ends]. The
    lower end needs every sitting's; the target's rate half needs every `expected`
    Airflow arm measured beside Sluice. Airflow arms in a sitting without Sluice are
    left out, and named; so is an Airflow arm that never fell behind in a sitting (a
    check it kept up in) where another sitting bounds it (its search)."""
    lines = []
    sluice_arms = sorted(
        {(t.side, t.variant) for s in sittings for t in s.trials if t.side == "sluice"}
    )
    found_in = [(sitting, capacities(sitting.trials)) for sitting in sittings]
    measured = {(t.side, t.variant) for s in sittings for t in s.trials if t.ok}
    # An Airflow arm that never fell behind in one sitting (a check it kept up in) but did
    # in another (the search that check called for, ADR 0050) is taken from the latter:
    # the open one says nothing of the ratio, and would leave it without a lower end.
    bounded = {
        c.arm for _, found in found_in for c in found
        if c.arm[0] in AIRFLOW_SIDES and c.behind is not None
    }  # fmt: skip

    def searched_elsewhere(c: Capacity) -> bool:
        return c.arm[0] in AIRFLOW_SIDES and c.behind is None and c.arm in bounded

    standing_in = [
        f"{_arm(c.arm)} ({sitting.name})"
        for sitting, found in found_in
        for c in found
        if searched_elsewhere(c)
    ]
    found_in = [
        (sitting, [c for c in found if not searched_elsewhere(c)]) for sitting, found in found_in
    ]
    for arm in sluice_arms:
        paired: list[tuple[str, Ratio]] = []
        alone: list[Arm] = []
        beside: list[ArrivalTrial] = []  # every trial of the sittings that have this arm
        for sitting, found in found_in:
            mine = next((c for c in found if c.arm == arm), None)
            peers = [c.arm for c in found if c.arm[0] in AIRFLOW_SIDES]
            if mine is None:
                alone += peers
                continue
            beside += sitting.trials
            if peers:
                paired.append((sitting.name, ratio(mine, found)))
        covered = {(t.side, t.variant) for t in beside if t.ok}
        unmeasured = missing_arms(beside, expected)
        if not paired:
            lines.append(f"{_arm(arm)}: no sitting pairs it with an Airflow arm")
            continue
        lows = [r.low for _, r in paired]
        highs = [r.high for _, r in paired if r.high is not None]
        low = None if any(x is None for x in lows) else min(x for x in lows if x is not None)
        high = min(highs) if highs else None
        each = "; ".join(
            f"{name}: {_x(r.low)} to {_x(r.high)} (Sluice [{_n(r.sluice.kept)},"
            f" {_n(r.sluice.behind)}), Airflow [{_n(r.airflow_low)}, {_n(r.airflow_high)}))"
            for name, r in paired
        )
        lines.append(
            f"ratio across {len(paired)} sitting(s), {_arm(arm)} / the faster Airflow:"
            f" {_x(low)} to {_x(high)}, the smallest of each sitting's: {each}"
        )
        if standing_in:
            lines.append(
                "left out of a sitting's ratio (it never fell behind there, and another"
                " sitting bounds it): " + ", ".join(standing_in)
            )
        left_out = sorted({a for a in alone if a not in covered and a in measured})
        if left_out:
            lines.append(
                f"left out of {_arm(arm)}'s ratio (no {_arm(arm)} beside them): "
                + ", ".join(_arm(a) for a in left_out)
            )
        lines.append(_verdict(arm, low, unmeasured, [r.sluice for _, r in paired]))
    return lines


CAPACITY_COLUMNS = [
    "side",
    "variant",
    "capacity runs/min [kept, behind)",
    "tasks/s",
    "width",
    "rates tried (kept up/ok trials)",
    "run lag p50/p99 ms at capacity (worst p99)",
]


def _capacity_row(c: Capacity) -> list[str]:
    low, high = (math.nan if d is None else d * c.tasks / 60 for d in (c.kept, c.behind))
    tasks = "-".join("?" if math.isnan(x) else f"{x:,.1f}" for x in (low, high))
    return [
        side_label(c.arm[0]),
        c.arm[1],
        f"[{_n(c.kept)}, {_n(c.behind)})",
        tasks,
        "-" if math.isnan(c.width) else f"{c.width * 100:.0f}%",
        ", ".join(str(t) for t in c.tallies),
        f"{_f(c.lag_p50_ms)}/{_f(c.lag_p99_ms)} ({_f(c.lag_p99_worst_ms)})",
    ]


def capacity_table(trials: list[ArrivalTrial]) -> Table:
    table = Table(title="Steady state: capacity per arm", title_justify="left")
    for name in CAPACITY_COLUMNS:
        table.add_column(name, justify="left" if name in ("side", "variant") else "right")
    for c in capacities(trials):
        table.add_row(*_capacity_row(c))
    return table


def _f(value: float, digits: int = 0) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _lags(t: ArrivalTrial) -> str:
    bound = f" (>= for {t.censored})" if t.censored else ""
    return f"{_f(t.run_lag_p50_ms)}/{_f(t.run_lag_p95_ms)}/{_f(t.run_lag_p99_ms)}{bound}"


def _cpu(t: ArrivalTrial) -> str:
    """Scheduler + Postgres = total CPU ms per task that ended in the window."""
    return (
        f"{_f(t.cpu_ms_per_task, 2)}+{_f(t.pg_cpu_ms_per_task, 2)}={_f(t.total_cpu_ms_per_task, 2)}"
    )


def _row(t: ArrivalTrial) -> list[str]:
    if not t.ok:
        return [
            side_label(t.side), t.variant, f"{t.dags:,}", f"#{t.trial}", t.status,
            "; ".join(t.errors)[:120], *["-"] * 10,
        ]  # fmt: skip
    return [
        side_label(t.side),
        t.variant,
        f"{t.dags:,}",
        f"#{t.trial}",
        t.status,
        f"{_f(t.offered_tasks_per_s, 1)} / {_f(t.sustained_tasks_per_s, 1)}",
        f"{t.runs_finished:,}/{t.runs_due:,}",
        _lags(t),
        f"{_f(t.task_lag_p50_ms)}/{_f(t.task_lag_p95_ms)}/{_f(t.task_lag_p99_ms)}",
        "/".join(str(n) for n in t.backlog_unfinished),
        _slope(t),
        ("yes" if t.keeps_up else "NO") + ("" if t.criterion == SLOPE else f" ({t.criterion})"),
        _cpu(t),
        _f(t.statements_per_task, 1),
        f"{_f(t.machine_busy * 100)}%",
        f"{_f(t.warmup_s)}+{_f(t.window_s)}+{_f(t.drain_s)}"
        + ("" if math.isnan(t.trial_s) else f" of {_f(t.trial_s)}"),
    ]


def _slope(t: ArrivalTrial) -> str:
    """The backlog's slope, runs a minute, +- its standard error, and the threshold."""
    if math.isnan(t.backlog_slope_per_min):
        return "-"
    se = "" if math.isnan(t.backlog_slope_se) else f" ±{_f(t.backlog_slope_se, 1)}"
    return f"{_f(t.backlog_slope_per_min, 1)}{se} (≤ {_f(t.slope_threshold_per_min, 1)})"


COLUMNS = [
    "side",
    "variant",
    "DAGs (runs/min)",
    "trial",
    "status",
    "tasks/s offered / sustained",
    "window runs finished/due",
    "run lag p50/p95/p99 ms",
    "task lag p50/p95/p99 ms",
    "backlog (unfinished runs) at each minute's end",
    "backlog slope runs/min ±se (threshold)",
    "keeps up",
    "CPU ms/task sched+PG=total",
    "statements/task",
    "machine busy",
    "warm-up+window+drain s (of trial)",
]


def progress_line(t: ArrivalTrial) -> str:
    return " | ".join(f"{c}: {v}" for c, v in zip(COLUMNS, _row(t), strict=True))


def trials_table(trials: list[ArrivalTrial]) -> Table:
    table = Table(title="Steady state: every trial", title_justify="left")
    for name in COLUMNS:
        table.add_column(name, justify="left" if name in ("side", "variant", "status") else "right")
    for _, group in groups(trials).items():
        for t in group:
            table.add_row(*_row(t))
    return table


def summary_lines(trials: list[ArrivalTrial], expected: tuple[Arm, ...] = ()) -> list[str]:
    return capacity_lines(trials, expected)


def markdown(trials: list[ArrivalTrial], expected: tuple[Arm, ...] = ()) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for _, group in groups(trials).items():
        lines += ["| " + " | ".join(_row(t)) + " |" for t in group]
    lines += ["", "| " + " | ".join(CAPACITY_COLUMNS) + " |", "|" + "---|" * len(CAPACITY_COLUMNS)]
    lines += ["| " + " | ".join(_capacity_row(c)) + " |" for c in capacities(trials)]
    lines.append("")
    lines += [f"- {line}" for line in summary_lines(trials, expected)]
    statements = statement_lines(trials)
    if statements:
        lines += [
            "",
            "Where Postgres's time went in the window (pg_stat_statements, top statements):",
        ]
        lines += ["", *[f"- {line}" if not line.startswith(" ") else line for line in statements]]
    return "\n".join(lines)


def statement_lines(trials: list[ArrivalTrial], limit: int = 4) -> list[str]:
    """Each `ok` trial's statements that took the most Postgres time in the window."""
    lines = []
    for t in trials:
        if not t.ok or not t.top_statements:
            continue
        lines.append(f"{side_label(t.side)} {t.variant} {t.dags:,} DAGs #{t.trial}:")
        for s in t.top_statements[:limit]:
            query = s["query"].replace("|", "\\|")
            lines.append(
                f"  - {s['ms']:,.0f} ms, {s['calls']:,} calls, {s['rows']:,} rows: `{query}`"
            )
    return lines


def print_report(
    trials: list[ArrivalTrial], console: Console, expected: tuple[Arm, ...] = ()
) -> None:
    console.print(trials_table(trials))
    console.print(capacity_table(trials))
    for line in summary_lines(trials, expected):
        console.print(line, soft_wrap=True, highlight=False)
