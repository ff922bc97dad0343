"""The UI on a cluster (`sluice ui --auth kubernetes`, ADR 0040), with the cluster's
answers scripted: who a token is (TokenReview) and what they may do where
(SubjectAccessReview). The real reviews are asked of a real API server in
tests/k8s/test_ui_cluster.py.

Nobody sees a page without a token the cluster vouches for; each sees the DAGs of
the namespaces they may list, and a page of another namespace's DAG is a 403 naming
what is missing; an action is an object written with the user's token (the API
server's refusal is the page's), and nothing in the database changes.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp.test_utils import TestClient, TestServer
from kubernetes.client.exceptions import ApiException
from sqlalchemy import text
from sqlalchemy.exc import InternalError
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.engine import make_engine, session_factory
from sluice.db.models import Dag, TaskInstance
from sluice.spec.states import TaskState
from sluice.spec.validation import parse_dag_manifest
from sluice.ui import cluster_actions
from sluice.ui.access import Check, Identity
from sluice.ui.app import make_app
from tests.support import (
    FakeClock,
    ScriptedExecutor,
    chain,
    make_loop,
    register,
    run_until_idle,
    runs,
    trigger,
)

ALICE = Identity("alice", uid="a1", groups=("team-a",), token="alice-token")
BOB = Identity("bob", uid="b1", groups=("team-a",), token="bob-token")


@dataclass
class FakeAccess:
    """The cluster's answers: alice may see and act in team-a; bob may only see there."""

    rules: set[tuple[str, str, str, str, str]] = field(
        default_factory=lambda: {
            ("alice", "list", "dags", "team-a", ""),
            ("alice", "get", "dags", "team-a", ""),
            ("alice", "get", "pods", "team-a", "log"),
            ("bob", "list", "dags", "team-a", ""),
            ("bob", "get", "dags", "team-a", ""),
        }
    )
    asked: list[tuple[str, Check]] = field(default_factory=list)

    def authenticate(self, token: str) -> Identity | None:
        return {ALICE.token: ALICE, BOB.token: BOB}.get(token)

    def allowed(self, who: Identity, check: Check) -> bool:
        self.asked.append((who.name, check))
        key = (who.name, check.verb, check.resource, check.namespace, check.subresource)
        return key in self.rules

    def api_for(self, who: Identity) -> Any:
        return FakeClient(who.name)  # the fake objects API below acts as this user


class FakeClient(str):
    """A client acting as the user it names (closed after each page or action)."""

    def close(self) -> None:
        pass

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class FakeObjects:
    """CustomObjectsApi as the API server would answer: alice may write, bob may not."""

    user: str
    written: list[tuple[str, str, str, Any]]

    def _as_user(self, resource: str, namespace: str) -> None:
        if self.user != "alice":
            raise ApiException(
                status=403,
                reason="Forbidden",
            ) from None

    def create_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, body: Any
    ) -> Any:
        self._as_user(plural, namespace)
        self.written.append(("create", namespace, plural, body))
        return {"metadata": {"name": f"{body['spec']['dagName']}-ui-x1"}}

    def delete_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> Any:
        self._as_user(plural, namespace)
        self.written.append(("delete", namespace, f"{plural}/{name}", None))
        return {}

    def patch_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, body: Any
    ) -> Any:
        self._as_user(plural, namespace)
        self.written.append(("patch", namespace, f"{plural}/{name}", body))
        return {}


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str, Any]]:
    out: list[tuple[str, str, str, Any]] = []
    monkeypatch.setattr(cluster_actions, "_objects", lambda user: FakeObjects(user, out))
    return out


def _dag(name: str, namespace: str) -> Any:
    return parse_dag_manifest(
        {
            "apiVersion": "sluice.io/v1alpha1",
            "kind": "DAG",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "schedule": None,
                "defaults": {"image": "busybox:1.36"},
                "tasks": chain("extract", "load"),
            },
        }
    )


@pytest.fixture
def failed_run(sessions: sessionmaker[Session]) -> str:
    """`etl` in team-a (its run failed at load) and `payroll` in team-b."""
    clock = FakeClock()
    register(sessions, _dag("etl", "team-a"), clock.now)
    register(sessions, _dag("payroll", "team-b"), clock.now)
    trigger(sessions, "etl", clock.now)
    run_until_idle(make_loop(sessions, ScriptedExecutor({"load": [TaskState.FAILED]}), clock))
    with sessions() as session:
        return runs(session, "etl")[0].run_id


def _call(
    sessions: sessionmaker[Session],
    access: FakeAccess,
    call: Callable[[TestClient[Any, Any]], Awaitable[Any]],
) -> Any:
    async def go() -> Any:
        async with TestClient(TestServer(make_app(sessions, access=access))) as client:
            return await call(client)

    return asyncio.run(go())


def _as(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_nobody_sees_a_page_without_a_token_the_cluster_vouches_for(
    sessions: sessionmaker[Session], failed_run: str
) -> None:
    async def call(client: TestClient[Any, Any]) -> list[Any]:
        browser = await client.get("/dags/etl/grid", allow_redirects=False)
        script = await client.get("/", headers=_as("stolen"))
        health = await client.get("/healthz")
        post = await client.post("/dags/etl/pause", data={"paused": "true"})
        login = await client.get("/login")
        return [
            (browser.status, browser.headers.get("Location")),
            (script.status, await script.text()),
            health.status,
            post.status,
            login.status,
        ]

    got = _call(sessions, FakeAccess(), call)
    assert got[0] == (303, "/login?next=%2Fdags%2Fetl%2Fgrid")
    assert got[1][0] == 401
    assert "did not accept the token" in got[1][1]
    assert got[2:] == [200, 401, 200]


def test_signing_in_keeps_a_vouched_token_in_an_http_only_cookie(
    sessions: sessionmaker[Session], failed_run: str
) -> None:
    async def call(client: TestClient[Any, Any]) -> list[Any]:
        page = await (await client.get("/login?next=/dags/etl/grid")).text()
        csrf = re.search(r'name="csrf" value="(\w+)"', page)
        assert csrf is not None
        form = {"csrf": csrf.group(1), "next": "/dags/etl/grid"}
        bad = await client.post("/login", data={**form, "token": "nope"})
        good = await client.post(
            "/login", data={**form, "token": ALICE.token}, allow_redirects=False
        )
        cookie = good.headers.get("Set-Cookie", "")
        grid = await client.get("/dags/etl/grid")  # the cookie jar now holds the token
        return [bad.status, await bad.text(), good.status, cookie, grid.status, await grid.text()]

    bad, bad_text, good, cookie, grid, grid_text = _call(sessions, FakeAccess(), call)
    assert (bad, good, grid) == (401, 303, 200)
    assert "did not accept this token" in bad_text
    assert "sluice_token=alice-token" in cookie
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert '<span id="user">alice</span>' in grid_text


def test_each_user_sees_the_namespaces_they_may_and_a_403_says_what_is_missing(
    sessions: sessionmaker[Session], failed_run: str
) -> None:
    run_page = f"/dags/etl/runs/{quote(failed_run, safe='')}"
    log_page = f"{run_page}/tasks/load/tries/1"

    async def call(client: TestClient[Any, Any]) -> list[Any]:
        out = []
        for path, token in [
            ("/", ALICE.token),
            ("/dags/payroll/grid", ALICE.token),
            ("/dags/etl/graph", ALICE.token),
            (run_page, ALICE.token),
            (log_page, ALICE.token),
            (log_page, BOB.token),
            ("/pools", ALICE.token),
        ]:
            response = await client.get(path, headers=_as(token))
            out.append((response.status, await response.text()))
        return out

    access = FakeAccess()
    listed, payroll, graph, run, log, bobs_log, pools = _call(sessions, access, call)
    assert listed[0] == 200
    assert 'id="dag-etl"' in listed[1]
    assert "payroll" not in listed[1]
    assert payroll == (
        403,
        "refused: alice may not get dags.sluice.io in namespace team-b (a RoleBinding there"
        " to the view ClusterRole lets them see, to edit lets them act)",
    )
    assert (graph[0], run[0], log[0]) == (200, 200, 200)
    assert bobs_log[0] == 403
    assert "bob may not get pods/log in namespace team-a" in bobs_log[1]
    assert pools[0] == 403
    assert "list pools.sluice.io cluster-wide" in pools[1]
    # The list asked once per namespace, not once per DAG.
    listing = [check for who, check in access.asked if check.verb == "list"]
    assert sorted(c.namespace for c in listing if c.resource == "dags") == ["team-a", "team-b"]


def test_actions_are_objects_written_as_the_user_and_change_nothing_in_the_database(
    sessions: sessionmaker[Session], failed_run: str, written: list[Any]
) -> None:
    run_page = f"/dags/etl/runs/{quote(failed_run, safe='')}"

    async def call(client: TestClient[Any, Any]) -> list[Any]:
        out = []
        for token in (ALICE.token, BOB.token):
            page = await (await client.get(run_page, headers=_as(token))).text()
            csrf = re.search(r'name="csrf" value="(\w+)"', page)
            assert csrf is not None
            for path, form in [
                (f"{run_page}/tasks/load", {"action": "clear", "downstream": "true"}),
                ("/dags/etl/pause", {"paused": "true"}),
                ("/dags/etl/trigger", {"conf": '{"k": 1}'}),
                ("/dags/etl/trigger", {"conf": "[1]"}),
            ]:
                response = await client.post(
                    path,
                    data={"csrf": csrf.group(1), **form},
                    headers=_as(token),
                    allow_redirects=False,
                )
                out.append((response.status, await response.text()))
        return out

    got = _call(sessions, FakeAccess(), call)
    assert [status for status, _ in got] == [303, 303, 303, 400, 403, 403, 403, 400]
    assert "refused by the Kubernetes API server: Forbidden" in got[4][1]
    assert "conf must be a JSON object" in got[3][1]
    assert written == [
        (
            "create",
            "team-a",
            "taskactions",
            {
                "apiVersion": "sluice.io/v1alpha1",
                "kind": "TaskAction",
                "metadata": {
                    "generateName": "etl-ui-",
                    "annotations": {"sluice.io/requested-by": "alice"},
                },
                "spec": {
                    "dagName": "etl",
                    "runId": failed_run,
                    "action": "clear",
                    "tasks": ["load"],
                    "downstream": True,
                },
            },
        ),
        ("patch", "team-a", "dags/etl", {"spec": {"paused": True}}),
        (
            "create",
            "team-a",
            "dagruns",
            {
                "apiVersion": "sluice.io/v1alpha1",
                "kind": "DagRun",
                "metadata": {
                    "generateName": "etl-ui-",
                    "annotations": {"sluice.io/requested-by": "alice"},
                },
                "spec": {"dagName": "etl", "conf": {"k": 1}},
            },
        ),
    ]
    with sessions() as session:  # the operator carries them out; the UI wrote nothing
        assert not session.get_one(Dag, "etl").is_paused
        load = session.query(TaskInstance).filter_by(task_id="load", dag_id="etl").one()
        assert load.state == TaskState.FAILED
        assert len(runs(session, "etl")) == 1


def test_the_clusters_ui_connection_only_reads(db_url: str) -> None:
    engine = make_engine(db_url, application_name="sluice-ui", read_only=True)
    try:
        with session_factory(engine)() as session:
            assert session.execute(text("SELECT count(*) FROM dag")).scalar_one() >= 0
            with pytest.raises(InternalError, match="read-only transaction"):
                session.execute(text("UPDATE dag SET is_paused = true"))
    finally:
        engine.dispose()


def test_a_run_is_marked_or_cancelled_through_its_dagrun_object(
    sessions: sessionmaker[Session], failed_run: str, written: list[Any]
) -> None:
    """Marking a run patches its DagRun object's spec.state, cancelling deletes it: the
    object the scheduler published for it (a run without one yet is a 409)."""
    run_page = f"/dags/etl/runs/{quote(failed_run, safe='')}"

    async def post(client: TestClient[Any, Any], action: str) -> tuple[int, str]:
        page = await (await client.get(run_page, headers=_as(ALICE.token))).text()
        csrf = re.search(r'name="csrf" value="(\w+)"', page)
        assert csrf is not None
        response = await client.post(
            run_page,
            data={"csrf": csrf.group(1), "action": action},
            headers=_as(ALICE.token),
            allow_redirects=False,
        )
        return response.status, await response.text()

    async def before(client: TestClient[Any, Any]) -> list[tuple[int, str]]:
        return [await post(client, "failed")]

    ((status, body),) = _call(sessions, FakeAccess(), before)
    assert status == 409
    assert "has no DagRun object yet" in body
    with sessions() as session:
        session.execute(
            text(
                "INSERT INTO run_publication (dag_run_id, namespace, object_name)"
                " SELECT id, 'team-a', 'etl-published' FROM dag_run WHERE dag_id = 'etl'"
            )
        )
        session.commit()

    async def after(client: TestClient[Any, Any]) -> list[tuple[int, str]]:
        return [await post(client, "failed"), await post(client, "cancel")]

    assert [status for status, _ in _call(sessions, FakeAccess(), after)] == [303, 303]
    assert written == [
        ("patch", "team-a", "dagruns/etl-published", {"spec": {"state": "failed"}}),
        ("delete", "team-a", "dagruns/etl-published", None),
    ]


def test_one_users_page_token_is_no_good_for_another(
    sessions: sessionmaker[Session], failed_run: str, written: list[Any]
) -> None:
    """The CSRF token is bound to the sign-in token: a form token taken from alice's page
    does not let a POST carrying bob's credentials through (nor the reverse)."""

    async def call(client: TestClient[Any, Any]) -> tuple[int, str]:
        page = await (await client.get("/", headers=_as(ALICE.token))).text()
        csrf = re.search(r'name="csrf" value="(\w+)"', page)
        assert csrf is not None
        response = await client.post(
            "/dags/etl/pause",
            data={"csrf": csrf.group(1), "paused": "true"},
            headers=_as(BOB.token),
            allow_redirects=False,
        )
        return response.status, await response.text()

    assert _call(sessions, FakeAccess(), call) == (
        403,
        "refused: the form's CSRF token is missing or stale; reload",
    )
    assert written == []


class Unreachable(FakeAccess):
    def authenticate(self, token: str) -> Identity | None:
        raise ConnectionError("connection refused by 10.96.0.1:443")


def test_without_the_api_servers_answer_nothing_is_shown(
    sessions: sessionmaker[Session], failed_run: str
) -> None:
    async def call(client: TestClient[Any, Any]) -> tuple[int, str]:
        response = await client.get("/", headers=_as(ALICE.token))
        return response.status, await response.text()

    assert _call(sessions, Unreachable(), call) == (
        503,
        "cannot ask the Kubernetes API server who you are and what you may see:"
        " connection refused by 10.96.0.1:443; try again",
    )
