"""The benchmark's CPU window: cumulative samples cut to the makespan, whenever they were taken."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from bench.metrics import CpuSample, cpu_at, cpu_window

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def sample(seconds: float, scheduler: float, postgres: float, busy: float = 0.0) -> CpuSample:
    return CpuSample(at(seconds), scheduler, postgres, busy, 200.0 * seconds)


SAMPLES = [
    sample(0.0, 10.0, 20.0, 0.0),
    sample(0.1, 10.1, 20.0, 10.0),
    sample(0.3, 10.3, 20.4, 50.0),
]


def test_a_moment_between_two_samples_is_interpolated() -> None:
    mid = cpu_at(SAMPLES, at(0.2))
    assert (mid.scheduler_s, mid.postgres_s) == (pytest.approx(10.2), pytest.approx(20.2))
    assert mid.busy_jiffies == pytest.approx(30.0)
    assert cpu_at(SAMPLES, at(0.1)) == SAMPLES[1]


def test_moments_outside_the_samples_take_the_nearest_one() -> None:
    assert cpu_at(SAMPLES, at(-1.0)) == SAMPLES[0]
    assert cpu_at(SAMPLES, at(5.0)) == SAMPLES[-1]
    with pytest.raises(ValueError, match="no CPU samples"):
        cpu_at([], at(0.0))


def test_the_window_is_the_makespan_not_the_sampling() -> None:
    # The samples run to 0.3 s; the makespan ended at 0.15 s: only its CPU counts.
    window = cpu_window(SAMPLES, at(0.05), at(0.15))
    assert window.seconds == pytest.approx(0.1)
    assert window.scheduler_s == pytest.approx(0.1)
    assert window.postgres_s == pytest.approx(0.1)  # a quarter of 0.4 s over 0.1-0.3 s
    # Busy jiffies 5 -> 20 out of 10 -> 30 in all.
    assert window.machine_busy == pytest.approx(0.75)


def test_two_cores_busy_over_the_window_read_as_at_most_the_cores() -> None:
    # A 2-core machine busy throughout: 200 jiffies a second, all busy; the samples
    # go on past the makespan, where the old window kept counting.
    samples = [
        CpuSample(at(s / 10), s / 10, s / 10, 200.0 * s / 10, 200.0 * s / 10) for s in range(20)
    ]
    window = cpu_window(samples, at(0.0), at(1.0))
    assert (window.scheduler_s + window.postgres_s) / window.seconds == pytest.approx(2.0)
    assert window.machine_busy == pytest.approx(1.0)


def test_a_window_of_no_time_has_no_busy_fraction() -> None:
    window = cpu_window(SAMPLES[:1], at(0.0), at(0.0))
    assert window.scheduler_s == 0.0
    assert math.isnan(window.machine_busy)
