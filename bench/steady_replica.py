"""One `sluice scheduler` for `bench/steady_cpu.py`, with a probe the harness reads.

    python -m bench.steady_replica SNAPSHOT [--profile DIR] -- scheduler ARGS...

Runs the real CLI (`sluice scheduler ARGS...`) and adds two things that cost
nothing measurable: a count of the SQL statements each thread sends (an
SQLAlchemy `before_cursor_execute` listener on every engine), and, on SIGUSR1, a
snapshot written to SNAPSHOT (JSON, replaced atomically): each thread's CPU
seconds (`pthread_getcpuclockid`: nanoseconds, per thread), the process's, the
statement counts, and the loop's tick and phase counts from its own metrics
(`sluice_loop_tick_duration_seconds`, ADR 0020), with the CPU time of each
phase (the loop's phase timer, wrapped). With `--profile DIR`, the
first SIGUSR1 starts cProfile (on CPU time) on the loop's thread and the second
writes DIR/MainThread.pstats; the status publisher's and the task API's threads
are profiled from their start to their end (DIR/<thread>.pstats at exit).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import re
import signal
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from sqlalchemy import Engine, event

from sluice.db.prepared import sql_of
from sluice.metrics import families
from sluice.scheduler import ticks

_statements: Counter[str] = Counter()  # by thread name
_loop_statements: Counter[str] = Counter()  # the loop's, by the statement as sent
_publisher_statements: Counter[str] = Counter()  # the status publisher's
_SPACES = re.compile(r"\s+")
_phase_cpu: defaultdict[str, float] = defaultdict(float)  # the loop thread's CPU s per phase
_timed = ticks.timed


@contextlib.contextmanager
def _timed_on_cpu(phase: str) -> Iterator[None]:
    """The loop's phase timer, also adding up the phase's CPU time (not only its wall time)."""
    start = time.thread_time()
    try:
        with _timed(phase):
            yield
    finally:
        _phase_cpu[phase] += time.thread_time() - start


def _label(statement: str) -> str:
    sql = sql_of(statement) or "(prepare)"
    return _SPACES.sub(" ", sql).strip()[:90]


def _count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
    # Cheap: labels are made at snapshot time (a statement string's hash is cached).
    name = threading.current_thread().name
    _statements[name] += 1
    if name == "MainThread":
        _loop_statements[statement] += 1
    elif name == "status-publisher":
        _publisher_statements[statement] += 1


def _labelled(counts: Counter[str]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for statement, n in counts.items():
        out[_label(statement)] += n
    return dict(out)


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each live thread, by name (threads of one name summed)."""
    out: defaultdict[str, float] = defaultdict(float)
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            clock = time.pthread_getcpuclockid(thread.ident)
            out[thread.name] += time.clock_gettime(clock)
        except (OSError, ProcessLookupError):
            continue
    return dict(out)


def _samples(metric: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in metric.collect():
        for sample in family.samples:
            if sample.name.endswith(("_count", "_sum")):
                phase = sample.labels.get("phase", "tick")
                out[f"{phase}{sample.name[sample.name.rfind('_') :]}"] = sample.value
    return out


def snapshot() -> dict[str, Any]:
    return {
        "monotonic": time.monotonic(),
        "process_cpu": time.process_time(),
        "threads": thread_cpu(),
        "statements": dict(_statements),
        "loop_statements": _labelled(_loop_statements),
        "publisher_statements": _labelled(_publisher_statements),
        "ticks": _samples(families.LOOP_TICK_SECONDS),
        "phases": _samples(families.LOOP_PHASE_SECONDS),
        "phase_cpu": dict(_phase_cpu),
    }


def _profile_threads(directory: Path, names: tuple[str, ...]) -> None:
    """Run the threads of these names under cProfile (CPU time), dumped when they end."""
    original = threading.Thread.run

    def run(self: threading.Thread) -> None:
        if self.name not in names:
            original(self)
            return
        profiler = cProfile.Profile(time.thread_time)
        profiler.enable()
        try:
            original(self)
        finally:
            profiler.disable()
            profiler.dump_stats(directory / f"{self.name}.pstats")

    threading.Thread.run = run  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.steady_replica")
    parser.add_argument("snapshot", type=Path)
    parser.add_argument("--profile", type=Path, default=None, help="a directory")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    cli = argv[split + 1 :]
    event.listen(Engine, "before_cursor_execute", _count)
    ticks.timed = _timed_on_cpu
    # CPU time of the loop's thread, not wall time (which its idle waits would fill).
    profiler = cProfile.Profile(time.thread_time) if args.profile else None
    probes = {"n": 0}

    def probe(signum: int, frame: FrameType | None) -> None:
        probes["n"] += 1
        if profiler is not None and args.profile is not None:
            if probes["n"] == 1:
                profiler.enable()
            elif probes["n"] == 2:
                profiler.disable()
                profiler.dump_stats(args.profile / "MainThread.pstats")
        taken = snapshot()
        tmp = args.snapshot.with_suffix(".tmp")
        tmp.write_text(json.dumps(taken))
        os.replace(tmp, args.snapshot)

    signal.signal(signal.SIGUSR1, probe)
    if args.profile is not None:
        _profile_threads(args.profile, ("status-publisher", "task-api"))
    sys.argv = ["sluice", *cli]
    from sluice.cli import main as sluice_main

    sluice_main()


if __name__ == "__main__":
    main()
