"""An executor that runs nothing: every try succeeds at the next poll (benchmarks)."""

from __future__ import annotations

from collections.abc import Sequence

from sluice.executors.base import Inspection, TaskEvent, TaskLaunch
from sluice.spec.states import TaskState


class NoopExecutor:
    name = "noop"
    pods_heartbeat = False  # the scheduler heartbeats the tries it runs

    def __init__(self) -> None:
        self._started: list[TaskLaunch] = []
        self.launched = 0

    def planned_external_id(self, launch: TaskLaunch) -> str | None:
        return None  # known once the process runs

    def start(self, launches: Sequence[TaskLaunch]) -> None:
        self._started.extend(launches)
        self.launched += len(launches)

    def poll(self) -> list[TaskEvent]:
        events = [TaskEvent(t.ti_id, t.try_number, TaskState.SUCCESS, 0) for t in self._started]
        self._started.clear()
        return events

    def alive(self) -> list[tuple[int, int]]:
        return [t.key for t in self._started]

    def external_ids(self) -> dict[tuple[int, int], str]:
        return {t.key: "noop" for t in self._started}

    def inspect(self, key: tuple[int, int], external_id: str | None) -> Inspection:
        return Inspection(state="unknown")

    def adopt(
        self,
        key: tuple[int, int],
        external_id: str,
        *,
        elapsed: float,
        timeout: float | None,
        skip_on_exit_code: frozenset[int],
    ) -> None:
        """Nothing runs, so there is nothing to adopt."""

    def heartbeats_recorded(self, keys: Sequence[tuple[int, int]], at: float) -> None:
        """Nothing to renew: nothing runs."""

    def release(self, key: tuple[int, int]) -> None:
        self._started = [t for t in self._started if t.key != key]

    def kill(self, key: tuple[int, int], reason: str, external_id: str | None = None) -> None:
        self._started = [t for t in self._started if t.key != key]

    def shutdown(self) -> None:
        self._started.clear()
