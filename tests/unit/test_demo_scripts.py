"""The cluster demo's scripts, run for real (bash) but never against a cluster.

`e2e/kind.sh` where Docker is missing or not running: it stops before anything is built,
fetched or started, says why and what to use instead, and exits 1 (a PATH with every
command of this machine's but `docker`, or a `docker` whose engine does not answer, and
a cache directory of the test's own, which must stay empty: no kind built, no kubeconfig
written). Then both demos, `e2e/kind.sh demo` and `hack/demo-cluster.sh`, to the end on
fakes (below).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.hosting import free_port

ROOT = Path(__file__).resolve().parents[2]
KIND_SH = ROOT / "e2e" / "kind.sh"


def _path_without_docker(bin_dir: Path) -> str:
    """A directory with a link to every command on PATH but docker (the first of each name)."""
    bin_dir.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not directory or not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = bin_dir / entry.name
            if entry.name == "docker" or link.exists() or link.is_symlink():
                continue
            if os.access(entry.path, os.X_OK) and not entry.is_dir():
                link.symlink_to(entry.path)
    return str(bin_dir)


def _run(args: list[str], path: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": path,
        "HOME": str(cache.parent),
        "SLUICE_CACHE": str(cache),
        "LANG": "C.UTF-8",
        # kind's published node on the machine's Docker (KIND_MODE=built builds one here).
        "KIND_MODE": "published",
    }
    return subprocess.run(
        ["bash", str(KIND_SH), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("command", ["demo", "up"])
def test_without_a_docker_command_it_says_so_and_exits_1(command: str, tmp_path: Path) -> None:
    path = _path_without_docker(tmp_path / "bin")
    cache = tmp_path / "cache"
    result = _run([command], path, cache)
    assert result.returncode == 1, result.stderr
    assert (
        f"ERROR: e2e/kind.sh {command} needs Docker: kind runs its node as a Docker container,"
        " and there is no docker command on PATH." in result.stderr
    )
    assert "make demo-cluster" in result.stderr  # what works without Docker
    assert "FAILED" not in result.stderr  # a clear stop, not a command that blew up
    assert result.stdout == ""
    assert not cache.exists()  # nothing built (kind), fetched or written (kubeconfig)


def test_with_a_docker_that_has_no_engine_it_says_so_and_exits_1(tmp_path: Path) -> None:
    path = _path_without_docker(tmp_path / "bin")
    fake = tmp_path / "fake-docker"
    fake.mkdir()
    (fake / "docker").write_text(
        "#!/bin/sh\n"
        'echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock." >&2\n'
        'echo "Is the docker daemon running?" >&2\n'
        "exit 1\n"
    )
    (fake / "docker").chmod(0o755)
    cache = tmp_path / "cache"
    result = _run(["demo"], f"{fake}{os.pathsep}{path}", cache)
    assert result.returncode == 1, result.stderr
    assert (
        "ERROR: e2e/kind.sh demo needs Docker: no Docker engine answers (docker info: Cannot"
        " connect to the Docker daemon at unix:///var/run/docker.sock.)." in result.stderr
    )
    assert not cache.exists()


def test_an_unknown_command_lists_demo(tmp_path: Path) -> None:
    result = _run(["bogus"], os.environ["PATH"], tmp_path / "cache")
    assert result.returncode == 1
    assert "usage: e2e/kind.sh up|load|demo|exec CMD...|down|env" in result.stderr


# -- the demo's steps, on fakes -------------------------------------------------------------
#
# Neither demo runs here against a cluster of its own in a unit test (kind's published
# node needs Docker and the internet; `make demo-cluster CLUSTER=kind` runs the built one
# for real), so both scripts run to the end against fake
# docker, kind, kubectl and helm that record every call: the steps, their order and their
# arguments are the scripts' own, the cluster's answers are the fakes'.

FAKE = '''#!{python}
"""A fake {{docker,kind,kubectl,helm}}: records each call, answers what the demo asks."""
import json, os, sys
tool, args = os.path.basename(sys.argv[0]), sys.argv[1:]
stdin = sys.stdin.read() if "-" in args and "-f" in args else ""
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({{"tool": tool, "args": args, "stdin": stdin,
                          "kubeconfig": os.environ.get("KUBECONFIG")}}) + "\\n")
states = os.environ["FAKE_STATES"].split(",")
words, output, i = [], "", 0
while i < len(args):  # the words, without flags and their values
    if args[i] in ("-n", "-o", "-f", "-t", "--name", "--kubeconfig", "--image"):
        output = args[i + 1] if args[i] == "-o" else output
        i += 2
    else:
        words += [] if args[i].startswith("-") else [args[i]]
        i += 1
if tool == "docker" and words[:2] == ["image", "inspect"]:
    sys.exit(1)  # not pulled yet
if tool == "kind" and words[:2] == ["get", "clusters"]:
    sys.exit(0)  # none yet
if tool == "kubectl":
    if words[:2] in (["get", "validatingadmissionpolicy"], ["get", "pv"], ["get", "crd"]):
        sys.exit(1)  # not there: the demo installs it, or makes it
    if words[:2] == ["get", "dags"]:
        print("\\n".join(f"dag.sluice.io/d{{i}}" for i in range(len(states) - 1)))
    elif words[:2] == ["get", "dagruns"]:
        if output == "jsonpath={{.items[0].status.runId}}":
            pass  # below
        elif output.startswith("jsonpath="):
            print("\\n".join(states))
        elif output == "name":
            print("\\n".join(f"dagrun.sluice.io/r{{i}}" for i in range(len(states))))
        else:
            print("NAME  STATE")
            print("\\n".join(f"r{{i}}    {{s}}" for i, s in enumerate(states)))
    elif words[:1] == ["logs"]:
        print("sluice-ready")
    elif words[:1] == ["exec"] and "psql" in args:
        print("archived")  # task_log's state of the try the demo shows
    elif words[:1] == ["exec"] and "logs" in args:
        print("== etl-retries / RUN / extract, try 1: failed", file=sys.stderr)
        print("try 1: the source is flaky today, failing on purpose")
if tool == "kubectl" and output == "jsonpath={{.items[0].status.runId}}":
    print("scheduled__2026-12-06T03:00:00+00:00")
'''
# A fake versitygw: answers HTTP on the --port it is given, as the real one does.
FAKE_S3 = """#!{python}
import http.server, sys
host, port = sys.argv[sys.argv.index("--port") + 1].rsplit(":", 1)
http.server.HTTPServer((host, int(port)), http.server.BaseHTTPRequestHandler).serve_forever()
"""


def _fakes(tmp_path: Path, states: str) -> dict[str, str]:
    """PATH with the fakes first, and their settings."""
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    for tool in ("docker", "kind", "kubectl", "helm"):
        (fakes / tool).write_text(FAKE.format(python=sys.executable))
        (fakes / tool).chmod(0o755)
    return {
        "PATH": f"{fakes}{os.pathsep}{os.environ['PATH']}",
        "FAKE_LOG": str(tmp_path / "calls.jsonl"),
        "FAKE_STATES": states,
    }


def _calls(tmp_path: Path) -> list[dict[str, Any]]:
    lines = (tmp_path / "calls.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _demo(
    args: list[str], tmp_path: Path, states: str, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", *args],
        env={
            **_fakes(tmp_path, states),
            "HOME": str(tmp_path),
            "SLUICE_CACHE": str(tmp_path / "cache"),
            "LANG": "C.UTF-8",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )


def _shared_steps(calls: list[dict[str, Any]], values: str) -> list[dict[str, Any]]:
    """What demo_run did, checked step by step; the calls before it are the caller's."""
    helm = [c for c in calls if c["tool"] == "helm"]
    assert len(helm) == 1
    (install,) = helm
    first = calls.index(install)
    assert install["args"][:6] == [
        "upgrade",
        "--install",
        "sluice",
        str(ROOT / "charts/sluice"),
        "-n",
        "sluice",
    ]
    assert install["args"][6:8] == ["-f", str(ROOT / "charts/sluice/ci" / values)]
    assert install["args"][-3:] == ["--wait", "--timeout", "10m"]
    # A fresh cluster: the release installs the CRDs and the default Pool's protection.
    assert "crds.install=false" not in install["args"]
    assert "defaultPoolProtection.enabled=false" not in install["args"]
    before = [c["args"] for c in calls[:first] if c["tool"] == "kubectl"]
    assert ["label", "namespace", "sluice", "--overwrite",
            "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/warn=restricted"] in before  # fmt: skip
    after = [c for c in calls[first:] if c["tool"] == "kubectl"]
    applied = [c["stdin"] for c in after if c["args"][:4] == ["-n", "sluice", "apply", "-f"]]
    assert len(applied) == len(list((ROOT / "examples").glob("*.yaml")))
    assert all("busybox" not in doc and "localhost/sluice:dev" in doc for doc in applied)
    assert ["-n", "sluice", "create", "-f", str(ROOT / "examples/runs/hello-manual.yaml")] in [
        c["args"] for c in after
    ]
    return calls[:first]


def _kind_demo(tmp_path: Path, states: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`e2e/kind.sh demo` with KIND_MODE=published: the machine's Docker (a fake here)."""
    return _demo([str(KIND_SH), "demo"], tmp_path, states, KIND_MODE="published", **env)


def test_kind_demo_builds_loads_installs_and_waits_for_every_run(tmp_path: Path) -> None:
    result = _kind_demo(tmp_path, "success,success,success,success")
    assert result.returncode == 0, result.stderr
    calls = _calls(tmp_path)
    kubeconfig = str(tmp_path / "cache/kind/admin.kubeconfig")
    before = _shared_steps(calls, "kind-values.yaml")
    install = next(c for c in calls if c["tool"] == "helm")
    assert install["args"][8:12] == [
        "--set", "postgres.image.repository=docker.io/library/postgres",
        "--set-string", "postgres.image.tag=16",
    ]  # fmt: skip
    assert install["kubeconfig"] == kubeconfig  # kind's, not the local cluster's
    steps = [(c["tool"], *c["args"][:3]) for c in before if c["tool"] in ("docker", "kind")]
    assert steps == [
        ("docker", "info"),  # need_docker demo
        ("docker", "info"),  # need_docker up
        ("kind", "get", "clusters"),
        ("kind", "create", "cluster", "--name"),
        ("docker", "build", "-t", "localhost/sluice:dev"),
        ("kind", "load", "docker-image", "localhost/sluice:dev"),
        ("docker", "image", "inspect", "docker.io/library/postgres:16"),
        ("docker", "pull", "docker.io/library/postgres:16"),
        ("kind", "load", "docker-image", "docker.io/library/postgres:16"),
    ]
    assert "demo: 4 runs ended, 0 not successful" in result.stderr
    assert f"Look around: export KUBECONFIG={kubeconfig};" in result.stdout


def test_kind_demo_fails_when_a_run_fails(tmp_path: Path) -> None:
    result = _kind_demo(tmp_path, "success,failed,success,success")
    assert result.returncode == 1
    assert "ERROR: demo: 1 runs did not succeed" in result.stderr


def test_kind_demo_gives_up_after_its_timeout(tmp_path: Path) -> None:
    result = _kind_demo(tmp_path, "success,running,success,success", SLUICE_DEMO_TIMEOUT="0")
    assert result.returncode == 1
    assert "ERROR: demo: after 0s, 3 of 4 runs have ended (4 expected)" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="the local demo chowns the volume to uid 999")
def test_local_demo_inside_the_namespace_makes_the_volume_then_the_shared_steps(
    tmp_path: Path,
) -> None:
    """hack/demo-cluster.sh from where hack/in-cluster.sh starts it again: inside the
    cluster's network namespace. "Inside" is faked by naming this process's own network
    namespace as the cluster's (SLUICE_NETNS_PATH is /run/netns/$SLUICE_NETNS)."""
    cluster_dir = tmp_path / "cluster"
    # What the cluster's start writes and builds: its env file, versitygw (a fake here).
    cluster_dir.mkdir()
    (cluster_dir / "env").write_text("NODE_IP=127.0.0.1\n")
    bin_dir = tmp_path / "cache" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "versitygw").write_text(FAKE_S3.format(python=sys.executable))
    (bin_dir / "versitygw").chmod(0o755)
    port = free_port()
    # The path goes through /run/netns, which exists once any network namespace was named
    # on this machine (`ip netns add` makes it); on a fresh machine it does not yet.
    Path("/run/netns").mkdir(parents=True, exist_ok=True)
    fake_inside = {"SLUICE_NETNS": "../../proc/self/ns/net", "SLUICE_CLUSTER_DIR": str(cluster_dir)}
    # Outside, the script would start the local cluster (hack/cluster-up.sh): never here.
    inside = subprocess.run(
        ["bash", "-c", f"source {ROOT}/hack/lib.sh && inside_cluster_netns"],
        env={**os.environ, **fake_inside},
        check=False,
    )
    assert inside.returncode == 0, "the fake 'inside the namespace' does not hold"
    try:
        result = _demo(
            [str(ROOT / "hack/demo-cluster.sh")], tmp_path, "success,success,success,success",
            **fake_inside, SLUICE_DEMO_S3_PORT=str(port),
        )  # fmt: skip
    finally:
        pid_file = cluster_dir / "pids/demo-s3.pid"
        if pid_file.exists():  # what make cluster-down stops
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
    assert result.returncode == 0, result.stderr
    calls = _calls(tmp_path)
    before = _shared_steps(calls, "local-values.yaml")
    # The task logs' store: started on the node's address, its credentials kept private
    # and handed to the schedulers in a Secret, named to the chart.
    assert pid_file.exists()
    assert (cluster_dir / "demo-s3/credentials").stat().st_mode & 0o777 == 0o600
    assert (cluster_dir / "demo-s3/root/sluice-logs").is_dir()
    install = next(c for c in calls if c["tool"] == "helm")
    store = f"logs.store=s3://sluice-logs/demo?endpoint=http://127.0.0.1:{port}&allow_http=true"
    assert ["--set-string", store] == install["args"][8:10]
    assert install["args"][10:12] == ["--set", "logs.existingSecret=sluice-demo-logs"]
    secret = next(c["args"] for c in before if c["args"][2:5] == ["create", "secret", "generic"])
    assert secret[:5] == ["-n", "sluice", "create", "secret", "generic"]
    assert secret[5] == "sluice-demo-logs"
    assert any(a.startswith("--from-literal=AWS_SECRET_ACCESS_KEY=") for a in secret)
    # Then a failed try's log, read after its Jobs and pods were deleted.
    after = [c["args"] for c in calls[calls.index(install) :] if c["tool"] == "kubectl"]
    deleted = after.index(["-n", "sluice", "delete", "jobs", "-l", "sluice.io/dag=etl-retries",
                           "--wait=true"])  # fmt: skip
    shown = after.index(
        ["-n", "sluice", "exec", "deploy/sluice-scheduler", "-c", "scheduler", "--", "sluice",
         "logs", "etl-retries", "--run", "scheduled__2026-12-06T03:00:00+00:00", "--task",
         "extract", "--try", "1"]
    )  # fmt: skip
    assert deleted < shown
    assert result.stdout.endswith("try 1: the source is flaky today, failing on purpose\n")
    assert not [c for c in calls if c["tool"] in ("docker", "kind")]
    pv = next(c for c in before if c["args"][:2] == ["apply", "-f"])
    volume = cluster_dir / "volumes/sluice-demo-sluice-sluice-postgres"
    assert "claimRef: {namespace: sluice, name: data-sluice-postgres-0}" in pv["stdin"]
    assert f"hostPath: {{path: {volume}, type: Directory}}" in pv["stdin"]
    assert volume.is_dir()
    assert (volume.stat().st_uid, volume.stat().st_mode & 0o777) == (999, 0o700)
    assert "Look around: make sh-cluster, then kubectl -n sluice get dagruns" in result.stdout


def test_an_unknown_kind_mode_is_refused_naming_the_choices(tmp_path: Path) -> None:
    result = subprocess.run(
        ["bash", str(KIND_SH), "demo"],
        env={**os.environ, "KIND_MODE": "cloud", "SLUICE_CACHE": str(tmp_path / "cache")},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert "KIND_MODE must be built, published or auto, not 'cloud'" in result.stderr
    assert not (tmp_path / "cache").exists()
