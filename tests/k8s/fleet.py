"""Replicas of one test on one database and one namespace, and how to look at them.

`sluice scheduler --executor kubernetes` processes (replicas.py) on the test's
Postgres, serving the task API on this machine's address as the cluster's pods reach
it (`Cluster.host_address`), where the task pods' heartbeat sidecars call it. The `fleet`
fixture (conftest.py) makes one per test.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.models import DagRun, TaskInstance, TaskTry
from sluice.executors.kubernetes import names
from tests.hosting import free_port

from .cluster import Cluster
from .replicas import Replica, wait_for


class Fleet:
    """Replicas for one test, on one database and one namespace, and how to look at them."""

    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        db_url: str,
        sessions: sessionmaker[Session],
        workdir: Path,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.db_url = db_url
        self.sessions = sessions
        self.workdir = workdir
        host = cluster.host_address()
        self.task_api = (host, free_port(host))
        self.keys = workdir / "task-api.keys"
        self.keys.write_text(secrets.token_hex(32) + "\n")
        self.replicas: list[Replica] = []
        self.followed: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self.dags = workdir / "dags"
        self.dags.mkdir()

    def add_dag(self, name: str, text: str) -> None:
        (self.dags / f"{name}.yaml").write_text(text.replace("busybox:1.36", self.cluster.image))

    def start(self, name: str, *, sync: bool = True) -> Replica:
        replica = Replica(
            name=name,
            db_url=self.db_url,
            namespace=self.namespace,
            kubeconfig=Path(self.cluster.kubeconfig),
            image=self.cluster.image,
            task_api=self.task_api,
            keys_file=self.keys,
            dags=self.dags if sync else None,
        )
        self.replicas.append(replica)
        replica.registered(self.sessions)
        return replica

    def follow(self, selector: str, container: str) -> None:
        """Keep a container's log while its pods live (a deleted pod takes its log along);
        `logs()` shows it."""
        out = self.workdir / f"follow-{len(self.followed)}.log"
        with out.open("w") as sink:
            proc = subprocess.Popen(
                [
                    self.cluster.kubectl_bin, "--kubeconfig", str(self.cluster.kubeconfig),
                    "-n", self.namespace, "logs", "-f", "--timestamps", "--prefix",
                    "-l", selector, "-c", container,
                ],
                stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        self.followed.append((f"{container} of {selector}", proc, out))

    def logs(self) -> str:
        replicas = [f"===== {r.name} =====\n{r.output()}" for r in self.replicas]
        followed = [
            f"===== {what} =====\n{out.read_text(errors='replace')[-12000:]}"
            for what, _, out in self.followed
        ]
        return "\n".join(replicas + followed)

    def check_alive(self) -> None:
        for replica in self.replicas:
            if replica.name.startswith("doomed"):
                continue
            assert replica.alive(), f"{replica.name} exited:\n{replica.output()}"

    def tis(self, dag_id: str) -> dict[str, TaskInstance]:
        """The task instances of `dag_id`'s first run, the one `run_state` reads (a DAG
        of a test's own may make more than one)."""
        first_run = select(func.min(DagRun.id)).where(DagRun.dag_id == dag_id).scalar_subquery()
        with self.sessions() as session:
            rows = session.execute(
                select(TaskInstance).where(TaskInstance.dag_run_id == first_run)
            ).scalars()
            return {ti.task_id: ti for ti in rows}

    def tries(self, ti_id: int) -> list[TaskTry]:
        with self.sessions() as session:
            return list(
                session.execute(
                    select(TaskTry)
                    .where(TaskTry.task_instance_id == ti_id)
                    .order_by(TaskTry.try_number)
                ).scalars()
            )

    def run_state(self, dag_id: str) -> str | None:
        with self.sessions() as session:
            return session.execute(
                select(DagRun.state).where(DagRun.dag_id == dag_id).order_by(DagRun.id).limit(1)
            ).scalar()

    def wait_run(self, dag_id: str, states: tuple[str, ...], timeout: float = 240) -> str:
        def probe() -> str | None:
            self.check_alive()
            state = self.run_state(dag_id)
            return state if state in states else None

        try:
            return wait_for(f"run of {dag_id} in {states}", probe, timeout=timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.state_dump(dag_id)}\n{self.logs()}") from None

    def wait_task(
        self, dag_id: str, task: str, probe_fn: Any, what: str, timeout: float = 180
    ) -> TaskInstance:
        def probe() -> TaskInstance | None:
            self.check_alive()
            ti = self.tis(dag_id).get(task)
            return ti if ti is not None and probe_fn(ti) else None

        try:
            return wait_for(what, probe, timeout=timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.state_dump(dag_id)}\n{self.logs()}") from None

    def jobs(self, selector: str = names.SELECTOR) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.cluster.get_json(
            "jobs", "-n", self.namespace, "-l", selector
        )["items"]
        return items

    def state_dump(self, dag_id: str) -> str:
        lines = [f"run: {self.run_state(dag_id)}"]
        for task, ti in self.tis(dag_id).items():
            lines.append(
                f"  {task}: {ti.state} try {ti.try_number} ext {ti.external_id} reason {ti.reason}"
            )
        pods = self.cluster.kubectl(
            "-n", self.namespace, "get", "jobs,pods", "-o", "wide", check=False
        )
        return "\n".join(lines) + "\n" + pods.stdout

    def stop(self) -> None:
        for replica in self.replicas:
            replica.stop()
        for _, proc, _ in self.followed:
            proc.terminate()
            proc.wait()


def dag_manifest(name: str, tasks: list[dict[str, Any]]) -> str:
    """A DAG running `sh -c ARGS` tasks, one run (`@once`: an hourly DAG made a second run
    when a test crossed the hour; busybox: `Fleet.add_dag` swaps in the cluster's own
    image)."""
    return json.dumps(
        {
            "apiVersion": "sluice.io/v1alpha1",
            "kind": "DAG",
            "metadata": {"name": name},
            "spec": {
                "schedule": "@once",
                "startDate": "2026-12-01T00:00:00Z",
                "catchup": False,
                "defaults": {"image": "busybox:1.36", "command": ["sh", "-c"]},
                "tasks": tasks,
            },
        }
    )
