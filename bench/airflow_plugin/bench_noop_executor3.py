"""The Airflow 3 side's no-op executor (loaded by module path, runs inside Airflow 3.3).

Airflow 3's scheduler hands an executor workloads (`queue_workload`), and the
base executor's heartbeat passes those it has slots for to `_process_workloads`;
the scheduler already made each one its `ExecuteTask` (with its JWT). Each try
then gets the same work as on Sluice's side and on Airflow 2.10's: it leaves the
executor's queue, and at the next sync one guarded update of the task
instances to success (by their id, Airflow 3's primary key; `noop_batch`), then
the report as an executor event (`self.success`) for the scheduler's
`process_executor_events`. Nothing is executed, so no task process reports to
the execution API. Written for the benchmark; nothing here is copied from Airflow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow._shared.timezones import timezone
from airflow.executors.base_executor import BaseExecutor
from airflow.executors.workloads import ExecuteTask
from airflow.models.taskinstancekey import TaskInstanceKey
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

    def _process_workloads(self, workload_items: Sequence[Any]) -> None:
        for workload in workload_items:
            if not isinstance(workload, ExecuteTask):
                raise ValueError(f"the benchmark's executor runs tasks only, not {workload!r}")
            self.queued_tasks.pop(workload.key)
            self._started.add(workload.key, str(workload.ti.id))

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
