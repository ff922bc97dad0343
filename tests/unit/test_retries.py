"""Retry delays: Airflow's `next_retry_datetime` without the jitter.

Airflow 2.10: without backoff the wait is `retry_delay`; with backoff it is
`retry_delay * 2**(try_number - 1)` (plus jitter, which Sluice leaves out),
capped at one day and then at `max_retry_delay` if set. `max_retry_delay`
only applies with backoff.

Two tests pin what this table once found wrong (fixed in 3f1ad04): maxRetryDelay
capping delays without backoff, and delays past try 41 jumping to the cap.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from sluice.spec.retries import DEFAULT_MAX_RETRY_DELAY, retry_delay

S = timedelta(seconds=1)
MIN = timedelta(minutes=1)
H = timedelta(hours=1)
D = timedelta(days=1)


def test_default_cap_is_one_day() -> None:
    assert DEFAULT_MAX_RETRY_DELAY == D


@pytest.mark.parametrize(
    ("try_number", "base", "max_delay", "expected"),
    [
        pytest.param(1, 5 * MIN, None, 5 * MIN, id="first-try"),
        pytest.param(2, 5 * MIN, None, 5 * MIN, id="second-try-same"),
        pytest.param(10, 5 * MIN, None, 5 * MIN, id="tenth-try-same"),
        pytest.param(10**6, 5 * MIN, None, 5 * MIN, id="huge-try-same"),
        pytest.param(0, 5 * MIN, None, 5 * MIN, id="try-zero"),
        pytest.param(3, timedelta(0), None, timedelta(0), id="zero-delay"),
        pytest.param(3, 30 * S, 1 * H, 30 * S, id="cap-above-base-no-effect"),
        pytest.param(3, 2 * D, None, 2 * D, id="no-one-day-cap-without-backoff"),
    ],
)
def test_without_backoff(
    try_number: int, base: timedelta, max_delay: timedelta | None, expected: timedelta
) -> None:
    assert retry_delay(try_number, base, exponential=False, max_delay=max_delay) == expected


def test_without_backoff_max_delay_does_not_apply() -> None:
    """maxRetryDelay caps only exponential backoff, as in Airflow.

    Airflow 2.10 (`TaskInstance.next_retry_datetime`) applies `max_retry_delay`
    inside `if retry_exponential_backoff:`; a plain retryDelay of 2h with
    maxRetryDelay 1h waits 2h (Sluice once waited 1h).
    """
    assert retry_delay(1, 2 * H, exponential=False, max_delay=1 * H) == 2 * H


@pytest.mark.parametrize(
    ("try_number", "base", "max_delay", "expected"),
    [
        pytest.param(1, 5 * MIN, None, 5 * MIN, id="try1-base"),
        pytest.param(2, 5 * MIN, None, 10 * MIN, id="try2-doubles"),
        pytest.param(3, 5 * MIN, None, 20 * MIN, id="try3-quadruples"),
        pytest.param(4, 5 * MIN, None, 40 * MIN, id="try4"),
        pytest.param(9, 5 * MIN, None, 5 * MIN * 256, id="try9-under-a-day"),
        pytest.param(10, 5 * MIN, None, D, id="try10-capped-at-one-day"),
        pytest.param(0, 5 * MIN, None, 5 * MIN, id="try0-treated-as-first"),
        pytest.param(-3, 5 * MIN, None, 5 * MIN, id="negative-try-treated-as-first"),
        pytest.param(1, 2 * D, None, D, id="base-above-default-cap"),
        pytest.param(3, 10 * S, 30 * S, 30 * S, id="max-delay-caps"),
        pytest.param(2, 10 * S, 20 * S, 20 * S, id="max-delay-exactly-reached"),
        pytest.param(2, 10 * S, 30 * S, 20 * S, id="under-max-delay"),
        pytest.param(1, 10 * MIN, 1 * MIN, 1 * MIN, id="max-delay-below-base"),
        pytest.param(21, 1 * S, 7 * D, 7 * D, id="max-delay-above-default-cap"),
        pytest.param(11, 1 * S, 7 * D, 1024 * S, id="below-max-delay-above-default-cap"),
        pytest.param(40, 1 * S, None, D, id="try40"),
        pytest.param(41, 1 * S, None, D, id="try41-shortcut-boundary"),
        pytest.param(42, 1 * S, None, D, id="try42-past-shortcut"),
        pytest.param(10**6, 5 * MIN, None, D, id="huge-try"),
        pytest.param(10**18, 5 * MIN, 3 * H, 3 * H, id="enormous-try-with-max-delay"),
        pytest.param(
            10**6,
            1 * S,
            timedelta.max,
            timedelta.max,
            id="huge-try-uncapped-no-overflow",
        ),
    ],
)
def test_with_backoff(
    try_number: int, base: timedelta, max_delay: timedelta | None, expected: timedelta
) -> None:
    assert retry_delay(try_number, base, exponential=True, max_delay=max_delay) == expected


@pytest.mark.parametrize("max_delay", [None, 6 * H], ids=["default-cap", "max-delay"])
def test_backoff_is_monotonic_and_capped(max_delay: timedelta | None) -> None:
    cap = max_delay or D
    delays = [retry_delay(n, 1 * S, exponential=True, max_delay=max_delay) for n in range(1, 200)]
    assert delays == sorted(delays)
    assert max(delays) == cap
    assert delays[0] == 1 * S


@pytest.mark.parametrize(
    ("try_number", "base", "max_delay", "expected"),
    [
        pytest.param(41, timedelta(0), None, timedelta(0), id="zero-base-try41"),
        pytest.param(42, timedelta(0), None, timedelta(0), id="zero-base-try42"),
        pytest.param(100, timedelta(0), None, timedelta(0), id="zero-base-try100"),
        pytest.param(
            42,
            timedelta(microseconds=1),
            timedelta(days=365),
            timedelta(microseconds=2**41),
            id="tiny-base-try42",
        ),
    ],
)
def test_backoff_past_the_overflow_shortcut(
    try_number: int, base: timedelta, max_delay: timedelta | None, expected: timedelta
) -> None:
    """Past try 41 the delay is still base * 2**n up to the cap, whatever the base.

    `retry_delay` once returned the cap as soon as `try_number - 1 > 40`,
    assuming `2**40 * base` exceeds it; that holds for base >= 1s and the
    default cap, but not for a zero or sub-second base (durations like "0s" or
    "250us" are valid) or a large maxRetryDelay: retryDelay 0s with backoff
    waited 0 for tries 1..41 and then one day from try 42. The shortcut now
    depends on the base and the cap.
    """
    assert retry_delay(try_number, base, exponential=True, max_delay=max_delay) == expected
