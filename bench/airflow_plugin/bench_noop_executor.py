"""The Airflow 2.10 side's no-op executor (loaded by module path, runs inside Airflow 2.10).

Each try gets the same work as on Sluice's side: one guarded update of the
task instance to success (batched per sync, as Sluice batches its reports;
`noop_batch`), then the report as an executor event (`self.success`), which the
scheduler's `_process_executor_events` reads. Nothing is executed. Written for
the benchmark; nothing here is copied from Airflow.
"""

from __future__ import annotations

from typing import Any

from airflow.executors.base_executor import BaseExecutor
from airflow.models.taskinstancekey import TaskInstanceKey
from airflow.utils import timezone
from airflow.utils.session import create_session
from noop_batch import Started
from sqlalchemy import text


class BenchNoopExecutor(BaseExecutor):  # type: ignore[misc]
    serve_logs = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._started: Started[TaskInstanceKey] = Started()

    def start(self) -> None:
        pass

    def execute_async(
        self,
        key: TaskInstanceKey,
        command: Any,
        queue: str | None = None,
        executor_config: Any | None = None,
    ) -> None:
        self._started.add(key)

    def sync(self) -> None:
        if not self._started:
            return
        statement, params, keys = self._started.take(timezone.utcnow())
        with create_session() as session:
            session.execute(text(statement), params)
        for key in keys:
            self.success(key)

    def end(self) -> None:
        self.sync()

    def terminate(self) -> None:
        self._started.clear()
