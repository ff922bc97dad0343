"""When a failed try may run again: Airflow's retry delay with exponential backoff."""

from __future__ import annotations

from datetime import timedelta

# Airflow caps exponential backoff at one day when a task sets no maxRetryDelay.
DEFAULT_MAX_RETRY_DELAY = timedelta(days=1)


def retry_delay(
    try_number: int,
    base: timedelta,
    *,
    exponential: bool,
    max_delay: timedelta | None,
) -> timedelta:
    """The wait after failed try `try_number` (1-based) before the next try is scheduled.

    With backoff the wait doubles per try: base, 2*base, 4*base, ... capped at
    `max_delay` (one day when unset). Unlike Airflow no random jitter is added,
    so a schedule is reproducible in tests and in the chaos checker.
    """
    if not exponential:
        return base  # as Airflow: maxRetryDelay only caps the backoff
    cap = max_delay if max_delay is not None else DEFAULT_MAX_RETRY_DELAY
    if base <= timedelta(0):
        return timedelta(0)
    exponent = max(try_number - 1, 0)
    # base * 2**exponent > cap as soon as 2**exponent > cap // base; stop there,
    # before the multiplication can overflow timedelta.
    if exponent >= (cap // base).bit_length():
        return cap
    return min(base * (1 << exponent), cap)
