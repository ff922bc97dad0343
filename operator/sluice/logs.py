"""Logging setup: structlog for the loop, key=value on a terminal, JSON when asked.

`sluice scheduler` and `sluice operator` take the same `--log-level` and `--log-json`
(sluice.cli.common); the operator's standard-library records (kopf's, its handlers')
are formatted by kopf, JSON too when asked (sluice.cli.operator).
"""

from __future__ import annotations

import logging
import sys

import structlog


def level_number(level: str) -> int:
    """A --log-level name as logging's number; INFO for a name logging does not know."""
    return logging.getLevelNamesMapping().get(level.upper(), logging.INFO)


def configure_logging(level: str = "info", *, json: bool = False) -> None:
    numeric = level_number(level)
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info if json else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # Looked up per call, not cached: sys.stderr may be swapped (tests, CliRunner).
        logger_factory=lambda *args: structlog.PrintLogger(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def first_line(exc: BaseException) -> str:
    """An error's first line for a log field; its type's name when it has no message."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
