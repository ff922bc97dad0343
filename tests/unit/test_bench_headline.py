"""The headline's table and intervals (bench/headline.py) and the figures it reads
(first action, active makespan, the settle drawn): pure, from trials built by hand and
from the committed JSON."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from pathlib import Path

import pytest
from bench import headline
from bench.common import Knobs, settle_time
from bench.metrics import LIKE_FOR_LIKE, Trial
from bench.shapes import Workload

from tests.unit.test_bench_report import MS, T0, _rows, _summarize, _trial

README = Path(__file__).resolve().parents[2] / "README.md"


def _arm(side: str, values: list[float], variant: str = LIKE_FOR_LIKE) -> list[Trial]:
    return [
        replace(_trial(side, v, trial=i), variant=variant, active_tasks_per_s=2 * v)
        for i, v in enumerate(values)
    ]


def test_the_interval_of_constant_arms_is_the_ratio_itself() -> None:
    assert headline.bootstrap_interval([400.0] * 5, [[20.0] * 5]) == (20.0, 20.0)


def test_the_interval_holds_the_point_and_renders_the_same_every_time() -> None:
    sluice, peer = [300.0, 350.0, 400.0, 420.0, 900.0], [18.0, 20.0, 21.0, 22.0, 30.0]
    low, high = headline.bootstrap_interval(sluice, [peer])
    point = headline.ratio_of_medians(sluice, [peer])
    assert point == pytest.approx(400 / 21)
    assert low < point < high
    # Every resample's ratio lies between the extremes' ratios.
    assert low >= 300 / 30
    assert high <= 900 / 18
    assert headline.bootstrap_interval(sluice, [peer]) == (low, high)


def test_the_faster_airflow_is_chosen_again_in_each_resample() -> None:
    """Two Airflow arms: the denominator is the higher median, so the interval is never
    above what the slower arm alone would give, and equals the faster's when it dominates."""
    sluice = [400.0] * 5
    fast, slow = [40.0] * 5, [10.0] * 5
    assert headline.bootstrap_interval(sluice, [slow, fast]) == (10.0, 10.0)
    mixed = [5.0, 10.0, 50.0, 60.0, 70.0]
    low, high = headline.bootstrap_interval(sluice, [slow, mixed])
    assert high <= 400 / 10  # never above the slow arm's ratio: max() picks the faster
    assert low == pytest.approx(400 / 70)


def test_ratio_is_none_for_a_figure_the_trials_did_not_record() -> None:
    sluice = [replace(t, active_tasks_per_s=math.nan) for t in _arm("sluice", [400.0] * 3)]
    airflow = {("airflow", LIKE_FOR_LIKE): _arm("airflow", [20.0] * 3)}
    assert headline.ratio(sluice, airflow, headline.tasks_per_s) is not None
    assert headline.ratio(sluice, airflow, headline.active_tasks_per_s) is None


def test_rows_judge_the_faster_airflow_and_count_the_targets() -> None:
    trials = (
        _arm("sluice", [400.0, 410.0, 420.0])
        + _arm("airflow", [20.0, 21.0, 22.0])
        + _arm("airflow3", [15.0, 16.0, 17.0])
    )
    (row,) = headline.rows(trials)
    assert row.from_unpause.value == pytest.approx(410 / 21)
    assert row.from_unpause.peer == "airflow"
    assert row.from_first_action is not None
    assert row.from_first_action.value == pytest.approx(820 / 42)
    table = headline.markdown([row])
    # From the first action first (the trials recorded it), then from the unpause.
    assert "| linear 10x100, 16/query | 19.5x [18.2-21.0] (2.10.5) | " in table
    assert "met in 0 (0) by the median ratio from the first action; 0 (0)" in table
    assert "(of 1 scenarios;" in table
    # Sluice's lag p50 (its median trial's: 20 ms) is a column, and its target counted.
    assert table.splitlines()[2].endswith(" | 1.50 | 1.50 | 20 |")
    assert "lag p50 under 50 ms met in 1 of 1." in table


def test_the_readme_headline_is_what_the_committed_json_renders() -> None:
    """`make bench-headline` rewrote it: a hand edit, or a new publication not rendered
    into the README, fails here."""
    expected = headline.markdown(headline.rows(headline.load(headline.HEADLINE)))
    text = README.read_text()
    block = text.split(headline.BEGIN, 1)[1].split(headline.END, 1)[0]
    assert block.strip() == expected.strip()


def test_replace_block_needs_the_markers() -> None:
    with pytest.raises(ValueError, match="headline"):
        headline.replace_block("no markers here", "| table |")
    text = f"a\n{headline.BEGIN}\nold\n{headline.END}\nb\n"
    assert headline.replace_block(text, "new") == f"a\n{headline.BEGIN}\nnew\n{headline.END}\nb\n"


def test_first_action_and_the_active_makespan() -> None:
    workload = Workload("no_structure", 2, 5)
    trial = _summarize(
        workload, _rows(workload, 10), first_action=T0 + 40 * MS, settle_s=3.25,
        statements_end=T0 + 150 * MS,
    )  # fmt: skip
    assert trial.makespan_s == pytest.approx(0.1)
    assert trial.first_action_ms == pytest.approx(40.0)
    assert trial.active_makespan_s == pytest.approx(0.06)
    assert trial.active_tasks_per_s == pytest.approx(10 / 0.06, rel=1e-3)
    assert trial.settle_s == 3.25
    assert trial.statements_window_s == pytest.approx(0.15)


def test_a_trial_without_a_first_action_has_no_active_figures() -> None:
    workload = Workload("no_structure", 2, 5)
    trial = _summarize(workload, _rows(workload, 10))
    assert math.isnan(trial.first_action_ms)
    assert math.isnan(trial.active_tasks_per_s)
    assert not math.isnan(trial.tasks_per_s)


def test_the_settle_is_the_base_plus_a_draw_below_the_jitter() -> None:
    knobs = Knobs(settle_s=3.0, settle_jitter_s=1.0)
    rng = random.Random(1)
    draws = [settle_time(knobs, rng) for _ in range(200)]
    assert all(3.0 <= d < 4.0 for d in draws)
    assert max(draws) - min(draws) > 0.8  # spread over the idle second, not one point
    assert settle_time(Knobs(settle_s=0.5, settle_jitter_s=0.0)) == 0.5


def test_a_trial_not_ok_is_in_no_median_and_is_counted() -> None:
    failed = replace(_trial("airflow", 1.0, trial=9), status="timeout", tasks_per_s=math.nan)
    trials = _arm("sluice", [400.0] * 3) + _arm("airflow", [20.0] * 3) + [failed]
    (row,) = headline.rows(trials)
    assert row.from_unpause.value == pytest.approx(20.0)
    assert (row.trials, row.not_ok) == (7, 1)
    assert "Trials: 7, 1 not `ok` (in no median)." in headline.markdown([row])
    # An Airflow arm with no `ok` trial is left out; the faster of the others judges.
    dead = [replace(t, status="error") for t in _arm("airflow3", [90.0] * 2)]
    (row,) = headline.rows(trials + dead)
    assert row.from_unpause.peer == "airflow"


def test_the_plot_draws_both_ratios(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    trials = _arm("sluice", [400.0, 410.0]) + _arm("airflow", [20.0, 21.0])
    svg = headline.plot(headline.rows(trials), tmp_path / "plot.svg").read_text()
    assert "from the first action" in svg
    assert "from the unpause" in svg


def test_one_trial_an_arm_has_no_interval() -> None:
    trials = _arm("sluice", [400.0]) + _arm("airflow", [20.0, 22.0])
    (row,) = headline.rows(trials)
    assert row.from_unpause.value == pytest.approx(20.0)
    assert math.isnan(row.from_unpause.low)
    assert "20.0x [no interval: an arm has one trial] (2.10.5)" in headline.markdown([row])
