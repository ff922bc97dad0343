"""The Airflow side's no-op executor (loaded by module path, runs inside Airflow 2.10).

Each try gets the same work as on Sluice's side: one guarded update of the
task instance to success (batched per sync, as Sluice batches its reports),
then the report as an executor event (`self.success`), which the scheduler's
`_process_executor_events` reads. Nothing is executed. Written for the
benchmark; nothing here is copied from Airflow.
"""

from __future__ import annotations

from typing import Any

from airflow.executors.base_executor import BaseExecutor
from airflow.models.taskinstancekey import TaskInstanceKey
from airflow.utils import timezone
from airflow.utils.session import create_session
from sqlalchemy import text

_SUCCEED = text(
    "UPDATE task_instance SET state = 'success', start_date = :now, end_date = :now,"
    " duration = 0 WHERE dag_id = :dag_id AND task_id = :task_id AND run_id = :run_id"
    " AND map_index = :map_index AND try_number = :try_number"
    " AND state IN ('queued', 'running')"
)


class BenchNoopExecutor(BaseExecutor):  # type: ignore[misc]
    serve_logs = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._started: list[TaskInstanceKey] = []

    def start(self) -> None:
        pass

    def execute_async(
        self,
        key: TaskInstanceKey,
        command: Any,
        queue: str | None = None,
        executor_config: Any | None = None,
    ) -> None:
        self._started.append(key)

    def sync(self) -> None:
        if not self._started:
            return
        keys, self._started = self._started, []
        now = timezone.utcnow()
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
        with create_session() as session:
            session.execute(_SUCCEED, params)
        for key in keys:
            self.success(key)

    def end(self) -> None:
        self.sync()

    def terminate(self) -> None:
        self._started.clear()
