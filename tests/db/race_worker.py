"""One scheduler replica for the race tests, run as its own process.

`python -m tests.db.race_worker DB_URL LOG_PATH STOP_FILE [DISPATCH_BATCH]` runs the real loop
against the database with an in-process executor whose tries "run" for a few
tens of milliseconds. Every start and end is appended to LOG_PATH as a JSON line
(with this process's pid) before the database hears of it, so the checker can
replay who ran what, when. Tasks named `flaky-*` fail their first try; tasks named
`slow-*` run for 2 s (long enough to be cleared while running).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from sluice.db.engine import make_engine, session_factory
from sluice.executors.base import Inspection, TaskEvent, TaskLaunch
from sluice.scheduler.config import SchedulerConfig
from sluice.scheduler.loop import SchedulerLoop
from sluice.spec.states import TaskState


class TimedExecutor:
    name = "timed"

    def __init__(self, log_path: Path, seed: int) -> None:
        self.log = log_path.open("a", buffering=1)
        self.random = random.Random(seed)
        self.running: dict[tuple[int, int], tuple[TaskLaunch, float]] = {}

    def _write(self, event: str, launch: TaskLaunch) -> None:
        record = {
            "event": event,
            "ti": launch.ti_id,
            "try": launch.try_number,
            "task": launch.task_id,
            "dag": launch.dag_id,
            "run": launch.run_id,
            "pid": os.getpid(),
            "t": time.time(),
        }
        self.log.write(json.dumps(record) + "\n")

    pods_heartbeat = False

    def planned_external_id(self, launch: TaskLaunch) -> str | None:
        return None

    def start(self, launches: Sequence[TaskLaunch]) -> None:
        for launch in launches:
            self._write("start", launch)
            took = 2.0 if launch.task_id.startswith("slow-") else self.random.uniform(0.01, 0.08)
            self.running[launch.key] = (launch, time.monotonic() + took)

    def poll(self) -> list[TaskEvent]:
        now = time.monotonic()
        events = []
        for key, (launch, done_at) in list(self.running.items()):
            if now < done_at:
                continue
            del self.running[key]
            failed = launch.task_id.startswith("flaky-") and launch.try_number == 1
            state = TaskState.FAILED if failed else TaskState.SUCCESS
            self._write("end", launch)
            events.append(TaskEvent(launch.ti_id, launch.try_number, state, 1 if failed else 0))
        return events

    def alive(self) -> list[tuple[int, int]]:
        return list(self.running)

    def external_ids(self) -> dict[tuple[int, int], str]:
        return {key: f"timed:{os.getpid()}" for key in self.running}

    def inspect(self, key: tuple[int, int], external_id: str | None) -> Inspection:
        return Inspection(state="unknown")

    def adopt(self, key: tuple[int, int], external_id: str, **_: object) -> None:
        raise AssertionError("no replica dies in this test, so nothing is adopted")

    def heartbeats_recorded(self, keys: Sequence[tuple[int, int]], at: float) -> None:
        pass

    def release(self, key: tuple[int, int]) -> None:
        self.running.pop(key, None)

    def kill(self, key: tuple[int, int], reason: str, external_id: str | None = None) -> None:
        entry = self.running.pop(key, None)
        if entry:
            self._write("end", entry[0])

    def shutdown(self) -> None:
        for key in list(self.running):
            self.kill(key, "shutdown")


def main(argv: list[str]) -> None:
    db_url, log_path, stop_file, *rest = argv
    dispatch_batch = int(rest[0]) if rest else 4
    engine = make_engine(db_url)
    executor = TimedExecutor(Path(log_path), seed=os.getpid())
    config = SchedulerConfig(
        tick_interval=0.02,
        runs_created_per_tick=3,
        runs_examined_per_tick=5,
        max_tis_per_query=4,
        dispatch_batch=dispatch_batch,
        heartbeat_interval=1.0,
    )
    loop = SchedulerLoop(session_factory(engine), executor, config)
    try:
        loop.run(lambda: Path(stop_file).exists())
    finally:
        loop.close()
        engine.dispose()


if __name__ == "__main__":
    main(sys.argv[1:])
