"""A release of charts/sluice on the test cluster, for the chart's end-to-end tests.

`installed` makes what a user's `helm install` needs there (the namespace with
the restricted Pod Security Standard enforced; on the local cluster, which has no
provisioner, a hostPath volume bound to the bundled Postgres's claim, where kind's
default StorageClass makes one) and yields a
`Release` to install and inspect; it uninstalls and cleans up after. The
schedulers run in pods, so every Job in the namespace is theirs; what the
database says is read with `psql` in the bundled Postgres's pod.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.executors.kubernetes import names
from sluice.handlers.objects import RUN_ID_ANNOTATION

from .cluster import CACHE, CLUSTER_DIR, ROOT, Cluster, apply_crds
from .replicas import wait_for

CHART = ROOT / "charts" / "sluice"
LOCAL_VALUES = CHART / "ci" / "local-values.yaml"
DAG_LABEL = names.LABEL_PREFIX + "dag"


def helm_binary() -> str:
    local = CACHE / "bin" / "helm"
    found = str(local) if local.is_file() else shutil.which("helm")
    if found is None:
        pytest.fail("helm not found: make helm builds it into ~/.cache/sluice/bin", pytrace=False)
    return found


def _images_loaded(cluster: Cluster, wait: float = 60) -> bool:
    # The node's image list, as the kubelet reports it: up to its next status update
    # (about 10 s) after an image was loaded, as `e2e/run.sh` does just before pytest.
    deadline = time.monotonic() + wait
    while True:
        node = cluster.get_json("nodes")["items"][0]
        images = node["status"].get("images") or []
        loaded = {n for image in images for n in image.get("names") or []}
        if any("sluice-postgres" in n for n in loaded):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(2)


class Release:
    def __init__(self, cluster: Cluster, namespace: str, name: str, helm: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.name = name
        self.helm = helm
        self.fullname = f"{name}-sluice"

    # -- helm and kubectl ------------------------------------------------------------

    def run_helm(self, *args: str, timeout: float = 600) -> str:
        cmd = [self.helm, "--kubeconfig", str(self.cluster.kubeconfig), "-n", self.namespace, *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    def install(self, *flags: str, command: str = "install") -> None:
        """`helm install` (or `upgrade`) with the local values and more helm `flags`."""
        args = [command, self.name, str(CHART), "-f", str(LOCAL_VALUES)]
        args += ["--set", "defaultPoolProtection.enabled=false"]  # apply_crds made one
        args += ["--set", "crds.install=false"]  # and the CRDs, which helm cannot take over
        self.run_helm(*args, *flags, "--wait", "--timeout", "8m")

    def installed(self) -> bool:
        return self.name in self.run_helm("list", "-q").split()

    def k(self, *args: str, check: bool = True) -> str:
        return self.cluster.kubectl("-n", self.namespace, *args, check=check).stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.k("get", *args, "-o", "json"))

    def can_i(self, account: str, *args: str) -> bool:
        who = f"system:serviceaccount:{self.namespace}:{self.fullname}-{account}"
        out = self.cluster.kubectl("auth", "can-i", *args, "--as", who, check=False).stdout
        return out.strip() == "yes"

    def pods(self, component: str) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/instance={self.name},app.kubernetes.io/component={component}"
        items: list[dict[str, Any]] = self.json("pods", "-l", selector)["items"]
        return items

    def dump(self) -> str:
        """What went wrong first (the tries that did not succeed, from the database), then
        the pods, Jobs and runs, and the logs."""
        out = [
            self.unsuccessful_tries(),
            self.k("get", "pods,jobs,dagruns", "-o", "wide", check=False),
        ]
        for component in ("scheduler", "operator"):
            out.append(
                self.k(
                    "logs",
                    "-l",
                    f"app.kubernetes.io/component={component}",
                    "--tail=40",
                    "--prefix",
                    "--all-containers",
                    check=False,
                )
            )
        tasks = ["-l", "sluice.io/dag", "--tail=15", "--prefix", "--all-containers"]
        out.append(self.k("logs", *tasks, "--max-log-requests", "50", check=False))
        return "\n".join(out)

    def scheduling_state(self) -> str:
        """The DAGs, runs, task instances and replicas as the database has them, and the
        operator's log: where a run that does not start stands."""
        out = []
        for query in (
            "SELECT dag_id, namespace, is_paused, is_active, next_run_after FROM dag",
            "SELECT id, dag_id, run_id, state, tasks_done, tasks_total FROM dag_run",
            "SELECT id, task_id, state, try_number, running_by_job_id, reason"
            " FROM task_instance ORDER BY id",
            "SELECT id, hostname, state, latest_heartbeat FROM scheduler_job",
        ):
            try:
                out.append(f"{query}\n{self.sql(query)}")
            except Exception as exc:  # the database may be what is wrong
                out.append(f"{query}: {exc}")
        operator = ["-l", "app.kubernetes.io/component=operator", "--tail=100", "--prefix"]
        out.append(self.k("logs", *operator, check=False))
        return "\n".join(out)

    # -- the database, through psql in the bundled Postgres's pod ------------------------

    def sql(self, query: str) -> list[list[str]]:
        """Rows of `query` (tab-separated fields), as the chart's database role sees them."""
        out = self.k(
            "exec", f"{self.fullname}-postgres-0", "-c", "postgres", "--",
            "psql", "-U", "sluice", "-d", "sluice", "-X", "-q", "-t", "-A", "-F", "\t",
            "-v", "ON_ERROR_STOP=1", "-c", query,
        )  # fmt: skip
        return [line.split("\t") for line in out.splitlines() if line]

    def unsuccessful_tries(self, limit: int = 10) -> str:
        """The latest tries that ended other than in success, with reasons and evidence."""
        try:
            rows = self.sql(
                "SELECT ti.dag_id, ti.task_id, tt.try_number, tt.state, tt.external_id,"
                " coalesce(tt.reason, ''), coalesce(tt.evidence::text, '')"
                " FROM task_try tt JOIN task_instance ti ON ti.id = tt.task_instance_id"
                " WHERE tt.state NOT IN ('success', 'running', 'queued')"
                f" ORDER BY tt.end_date DESC LIMIT {limit}"
            )
        except Exception as exc:  # the database cannot be read: say so, dump the rest
            return f"unsuccessful tries: cannot be read: {str(exc)[:300]}"
        lines = [f"unsuccessful tries ({len(rows)}, at most {limit}):"]
        lines += ["  " + " | ".join(row) for row in rows]
        return "\n".join(lines)

    def assert_each_try_started_once(
        self, dag: str, run: dict[str, Any] | None = None, tasks: int | None = None
    ) -> None:
        """No try of `dag` has two Jobs; with `run` (the DagRun object a test waited for),
        each of its `tasks` task instances has a Job.

        Only that run's task instances are counted: a DAG of a test's own may make more
        than one run. (A try that fails as a zombie or could
        not start has its Job deleted, hence no count without a run.)
        """
        tries = self.tries_started(dag)
        assert all(n == 1 for n in tries.values()), f"a try started twice: {tries}"
        if run is None:
            return
        run_id = run["metadata"]["annotations"][RUN_ID_ANNOTATION]
        of_run = {
            row[0]
            for row in self.sql(
                "SELECT ti.id FROM task_instance ti JOIN dag_run r ON r.id = ti.dag_run_id"
                f" WHERE r.dag_id = '{dag}' AND r.run_id = '{run_id}'"
            )
        }
        assert len(of_run) == tasks, f"run {run_id} of {dag} has {len(of_run)} task instances"
        without = sorted(of_run - {ti for ti, _ in tries})
        if without:
            raise AssertionError(
                f"{dag}, run {run_id}: {len(without)} task instances have no Job ({without}):\n"
                f"{self.tries_of(without)}\n{tries}"
            )

    def tries_of(self, ti_ids: list[str]) -> str:
        """Every try of these task instances as the database has it, and what the live
        scheduler pods logged about their Jobs: where a try's Job went."""
        if not ti_ids:
            return ""
        try:
            rows = self.sql(
                "SELECT ti.id, ti.task_id, ti.state, ti.running_by_job_id, tt.try_number, tt.state,"
                " tt.scheduler_job_id,"
                " coalesce(ti.external_id, ''), tt.queued_at, tt.start_date, tt.end_date,"
                " coalesce(tt.reason, '') FROM task_try tt"
                " JOIN task_instance ti ON ti.id = tt.task_instance_id"
                f" WHERE ti.id IN ({', '.join(str(int(i)) for i in ti_ids)})"
                " ORDER BY ti.id, tt.try_number"
            )
            jobs = self.sql("SELECT id, hostname, state, latest_heartbeat FROM scheduler_job")
        except Exception as exc:  # the database cannot be read: say so
            return f"tries: cannot be read: {str(exc)[:300]}"
        lines = ["tries (ti, task, ti state, ti's replica, try, try state, try's replica, Job,"]
        lines += ["  queued, started, ended, reason):"] + ["  " + " | ".join(row) for row in rows]
        lines += ["scheduler jobs (id, host, state, heartbeat):"]
        lines += ["  " + " | ".join(row) for row in jobs]
        logs = self.k(
            "logs",
            "-l",
            "app.kubernetes.io/component=scheduler",
            "--tail=-1",
            "--prefix",
            "-c",
            "scheduler",
            check=False,
        )
        names = {row[7] for row in rows if row[7]} | {"deleted Job", "could not delete"}
        lines += [line for line in logs.splitlines() if any(name in line for name in names)]
        return "\n".join(lines)

    def running_tries_by_host(self) -> dict[str, set[str]]:
        """Task instance ids with a running try, by the live scheduler pod that holds it
        (a replica's hostname is its pod's name)."""
        rows = self.sql(
            "SELECT j.hostname, ti.id FROM task_instance ti"
            " JOIN scheduler_job j ON j.id = ti.running_by_job_id"
            " WHERE ti.state = 'running' AND j.state = 'running'"
        )
        live = {p["metadata"]["name"] for p in self.pods("scheduler")}
        held: dict[str, set[str]] = {}
        for host, ti in rows:
            if host in live:  # not a killed replica that is not yet seen dead
                held.setdefault(host, set()).add(ti)
        return held

    def task_states(self, ti_ids: set[str]) -> dict[str, tuple[str, int]]:
        """(state, try number) of each task instance."""
        rows = self.sql(
            f"SELECT id, state, try_number FROM task_instance WHERE id IN ({','.join(ti_ids)})"
        )
        return {ti: (state, int(try_number)) for ti, state, try_number in rows}

    # -- DAGs, runs and Jobs ------------------------------------------------------------------

    def apply(self, manifest: str) -> None:
        self.cluster.apply(manifest.replace("busybox:1.36", self.cluster.image), self.namespace)

    def wait_run(self, dag: str, timeout: float, run_id: str | None = None) -> dict[str, Any]:
        """The DagRun object of a run of `dag` (the one with `run_id`, or the first to end)
        once its published state is final."""

        def ended() -> dict[str, Any] | None:
            for item in self.json("dagruns")["items"]:
                status = item.get("status") or {}
                annotations = item["metadata"].get("annotations") or {}
                if (
                    item["spec"]["dagName"] == dag
                    and run_id in (None, annotations.get(RUN_ID_ANNOTATION))
                    and status.get("state") in ("success", "failed")
                ):
                    return dict(item)
            return None

        try:
            return wait_for(f"the run of {dag} to end", ended, timeout=timeout, every=2)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.dump()}") from None

    def jobs(self, dag: str | None = None) -> list[dict[str, Any]]:
        selector = f"{DAG_LABEL}={dag}" if dag else names.SELECTOR
        items: list[dict[str, Any]] = self.json("jobs", "-l", selector)["items"]
        return items

    def tries_started(self, dag: str | None = None) -> Counter[tuple[str, str]]:
        """How many Jobs each (task instance, try) has: 1 each, or a try started twice."""
        return Counter(
            (j["metadata"]["labels"][names.TI_LABEL], j["metadata"]["labels"][names.TRY_LABEL])
            for j in self.jobs(dag)
        )

    def running_jobs(self, dag: str) -> list[dict[str, Any]] | None:
        return [j for j in self.jobs(dag) if j.get("status", {}).get("active")] or None


def _wait_for_service_account(cluster: Cluster, namespace: str) -> None:
    # Pods cannot be created before the namespace's default service account.
    wait_for(
        f"the default service account of {namespace}",
        lambda: (
            cluster.kubectl(
                "-n", namespace, "get", "serviceaccount", "default", check=False
            ).returncode
            == 0
        ),
        timeout=60,
    )


@contextlib.contextmanager
def installed(cluster: Cluster, namespace: str | None = None) -> Iterator[Release]:
    """A release's namespace (made here unless given) and volume; uninstalled after.

    The caller installs (`Release.install`), so that it can choose the values.
    """
    if not _images_loaded(cluster):
        pytest.fail(
            "localhost/sluice-postgres:15 is not on the node: hack/load-image.sh loads it"
            " (e2e/kind.sh load on kind)",
            pytrace=False,
        )
    apply_crds(cluster)  # as the other k8s tests do: the default Pool's protection is there
    own_namespace = namespace is None
    ns = namespace or f"sluice-chart-{uuid.uuid4().hex[:8]}"
    if own_namespace:
        cluster.kubectl("create", "namespace", ns)
        _wait_for_service_account(cluster, ns)
    cluster.kubectl(
        "label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted", "--overwrite"
    )
    rel = Release(cluster, ns, f"t{uuid.uuid4().hex[:6]}", helm_binary())
    # The bundled Postgres's volume: the cluster's default StorageClass provides it (kind's);
    # without one (the local cluster), a hostPath volume reserved for the StatefulSet's claim.
    volume = CLUSTER_DIR / "volumes" / f"{ns}-{rel.name}"
    pv = f"{ns}-{rel.name}-postgres"
    provided = cluster.default_storage_class() is not None
    if not provided:
        volume.mkdir(parents=True)
        os.chown(volume, 999, 999)
        volume.chmod(0o700)
        cluster.apply(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolume",
                    "metadata": {"name": pv},
                    "spec": {
                        "capacity": {"storage": "1Gi"},
                        "accessModes": ["ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Retain",
                        "storageClassName": "",
                        "claimRef": {"namespace": ns, "name": f"data-{rel.fullname}-postgres-0"},
                        "hostPath": {"path": str(volume), "type": "Directory"},
                    },
                }
            )
        )
    try:
        yield rel
    finally:
        if rel.installed():
            # As the chart's README says: the Sluice objects first, while the operator runs
            # to take its finalizer off them; then the release.
            deleted = cluster.kubectl(
                "-n", ns, "delete", "backfills,dagruns,dags", "--all", "--timeout=120s",
                check=False, timeout=180,
            )  # fmt: skip
            if deleted.returncode != 0:
                sys.stderr.write(f"deleting {ns}'s Sluice objects: {deleted.stderr[-2000:]}\n")
            rel.run_helm("uninstall", rel.name, "--wait", timeout=300)
        cluster.drop_sluice_finalizers(ns)  # what the operator did not get to
        if not provided:
            cluster.kubectl("delete", "pv", pv, "--wait=false", check=False)
        if own_namespace:
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        if not provided:
            shutil.rmtree(volume, ignore_errors=True)
