"""A scheduler on one machine: embedded Postgres (or a given URL), the loop, the local executor.

Shared by `sluice standalone` and `sluice dags test`. By default the database
lives in a temporary directory that is removed afterwards, so every run
starts clean; `state_dir` keeps it (and the task logs) between runs.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from types import TracebackType

from sqlalchemy import Engine, exists, select
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import sync_dag
from sluice.db.embedded import EmbeddedPostgres, start_embedded_postgres
from sluice.db.engine import make_engine, session_factory
from sluice.db.migrate import upgrade
from sluice.db.models import Dag, DagRun
from sluice.executors.local import LocalExecutor
from sluice.scheduler.config import SchedulerConfig
from sluice.scheduler.loop import SchedulerLoop, TickReport, utcnow
from sluice.spec.models import DagManifest
from sluice.spec.states import ACTIVE_RUN_STATES


class LocalRuntime:
    def __init__(
        self,
        *,
        database_url: str | None = None,
        state_dir: Path | None = None,
        config: SchedulerConfig | None = None,
    ) -> None:
        self._temp: Path | None = None
        if state_dir is None:
            self._temp = state_dir = Path(tempfile.mkdtemp(prefix="sluice-"))
        self.state_dir = state_dir
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._postgres: EmbeddedPostgres | None = None
        if database_url is None:
            self._postgres = start_embedded_postgres(
                self.state_dir / "pgdata", keep_data=self._temp is None
            )
            database_url = self._postgres.url
        self.database_url = database_url
        upgrade(database_url)
        self.engine: Engine = make_engine(database_url)
        self.sessions: sessionmaker[Session] = session_factory(self.engine)
        self.executor = LocalExecutor(self.state_dir / "logs")
        self.loop = SchedulerLoop(self.sessions, self.executor, config or SchedulerConfig())

    def register(self, manifests: list[DagManifest]) -> None:
        with self.sessions() as session:
            for manifest in manifests:
                sync_dag(session, manifest, utcnow())
            session.commit()

    def is_idle(self, now: datetime) -> bool:
        """No run active, none due, nothing running in the executor."""
        if self.executor.alive():
            return False
        with self.sessions() as session:
            active = session.execute(
                select(exists().where(DagRun.state.in_(ACTIVE_RUN_STATES)))
            ).scalar_one()
            due = session.execute(
                select(
                    exists().where(
                        Dag.is_active,
                        Dag.is_paused.is_(False),
                        Dag.broken_reason.is_(None),
                        Dag.next_run_after <= now,
                    )
                )
            ).scalar_one()
        return not active and not due

    def run(
        self,
        until: Callable[[], bool],
        on_tick: Callable[[TickReport], None] | None = None,
    ) -> None:
        while not until():
            report = self.loop.tick()
            if on_tick:
                on_tick(report)
            if not report.busy:
                self.loop.sleep(min(self.loop.config.tick_interval, 0.2))

    def close(self) -> None:
        # No other replica will adopt what is still running: stop it first.
        self.executor.stop_all("sluice standalone is exiting")
        self.loop.close()
        self.engine.dispose()
        if self._postgres is not None:
            self._postgres.stop()
        if self._temp is not None:
            shutil.rmtree(self._temp, ignore_errors=True)

    def __enter__(self) -> LocalRuntime:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
