"""What both Airflow no-op executors share, without importing Airflow (so it is tested in
Sluice's venv): the tries handed over since the last sync, and the one guarded update
that ends them.

A try is ended only if it is still the same try and still queued or running: the
same guard as Sluice's report (`sluice.executors.noop`). Written for the benchmark;
nothing here is copied from Airflow.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

# Airflow 2.10: the task instance's primary key (dag_id, task_id, run_id, map_index).
SUCCEED_BY_KEY = (
    "UPDATE task_instance SET state = 'success', start_date = :now, end_date = :now,"
    " duration = 0 WHERE dag_id = :dag_id AND task_id = :task_id AND run_id = :run_id"
    " AND map_index = :map_index AND try_number = :try_number"
    " AND state IN ('queued', 'running')"
)
# Airflow 3: the task instance's primary key is its id (a UUID).
SUCCEED_BY_ID = (
    "UPDATE task_instance SET state = 'success', start_date = :now, end_date = :now,"
    " duration = 0 WHERE id = :id AND try_number = :try_number"
    " AND state IN ('queued', 'running')"
)


class TryKey(Protocol):
    """The fields of Airflow's TaskInstanceKey the update needs."""

    @property
    def dag_id(self) -> str: ...
    @property
    def task_id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def map_index(self) -> int: ...
    @property
    def try_number(self) -> int: ...


K = TypeVar("K", bound=TryKey)


class Started(Generic[K]):
    """The tries handed to the executor and not yet ended, in the order they came."""

    def __init__(self) -> None:
        self._keys: list[K] = []
        self._ids: dict[K, str] = {}

    def add(self, key: K, ti_id: str | None = None) -> None:
        """A try handed over; `ti_id` is Airflow 3's task instance id."""
        self._keys.append(key)
        if ti_id is not None:
            self._ids[key] = ti_id

    def __len__(self) -> int:
        return len(self._keys)

    def take(self, now: datetime) -> tuple[str, list[dict[str, Any]], list[K]]:
        """Everything handed over so far, once: the update, its parameters (one set per
        try, executed as one batch) and the keys to report as succeeded."""
        keys, ids = self._keys, self._ids
        self._keys, self._ids = [], {}
        if keys and len(ids) == len(keys):
            params = [{"now": now, "id": ids[k], "try_number": k.try_number} for k in keys]
            return SUCCEED_BY_ID, params, keys
        if ids:
            raise ValueError("every try handed over has an id, or none has")
        params = [
            {
                "now": now,
                "dag_id": k.dag_id,
                "task_id": k.task_id,
                "run_id": k.run_id,
                "map_index": k.map_index,
                "try_number": k.try_number,
            }
            for k in keys
        ]
        return SUCCEED_BY_KEY, params, keys

    def clear(self) -> None:
        self._keys, self._ids = [], {}
