"""The chart's web UI on the local cluster (issue 32, ADR 0040), with real reviews.

Two people in the release's namespace, as ServiceAccounts bound to Kubernetes'
built-in `view` and `edit` ClusterRoles (which carry Sluice's kinds through the
chart's aggregated roles), sign in with their tokens. The API server says who
they are (TokenReview) and what they may see (SubjectAccessReview): both see the
DAG and its failed run, neither sees the cluster-scoped Pools; the viewer's
clear is refused by the API server (403), the editor's becomes a TaskAction
written as them, which the operator carries out: the task reruns and the run
succeeds. Requests come from inside the UI's pod (`kubectl exec`), as a
port-forward would bring them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, unquote

import pytest

from .chart import Release, installed
from .cluster import Cluster
from .fleet import dag_manifest
from .replicas import wait_for
from .test_chart_operations import FAST_SCHEDULER_ARGS

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(900)]

# Run inside the UI's pod: each step a GET, or a POST of a form with the CSRF token of
# the page GET before it; prints [status, Location or the first 2,000 characters].
CLIENT = r"""
import json, re, sys, urllib.error, urllib.parse, urllib.request

class Stay(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None

opener = urllib.request.build_opener(Stay)

def call(method, path, token, data=None, cookie=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if cookie:
        headers["Cookie"] = cookie
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    request = urllib.request.Request("http://127.0.0.1:8080" + path, body, headers, method=method)
    try:
        response = opener.open(request, timeout=30)
    except urllib.error.HTTPError as error:
        response = error
    text = response.read().decode("utf-8", "replace")
    return response.status, response.headers, text

out = []
for step in json.loads(sys.argv[1]):
    token = step.get("token")
    if "post" in step:
        _, headers, page = call("GET", step["page"], token)
        csrf = re.search(r'name="csrf" value="(\w+)"', page).group(1)
        cookie = headers.get("Set-Cookie", "").split(";")[0]
        form = {"csrf": csrf, **step["form"]}
        status, headers, text = call("POST", step["post"], token, form, cookie)
    else:
        status, headers, text = call("GET", step["get"], token)
    out.append([status, headers.get("Location") or text[:2000]])
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def rel(k8s_cluster: Cluster) -> Iterator[Release]:
    with installed(k8s_cluster) as release:
        release.install("--set-json", "scheduler.extraArgs=" + json.dumps(FAST_SCHEDULER_ARGS))
        yield release


def _person(rel: Release, name: str, role: str) -> str:
    """A ServiceAccount bound to a built-in ClusterRole in the namespace; its token."""
    rel.k("create", "serviceaccount", name)
    account = f"--serviceaccount={rel.namespace}:{name}"
    rel.k("create", "rolebinding", name, f"--clusterrole={role}", account)
    return rel.k("create", "token", name, "--duration=1h").strip()


def _browse(rel: Release, steps: list[dict[str, Any]]) -> list[list[Any]]:
    out = rel.k(
        "exec", f"deploy/{rel.fullname}-ui", "-c", "ui", "--",
        "python", "-c", CLIENT, json.dumps(steps),
    )  # fmt: skip
    result: list[list[Any]] = json.loads(out.strip().splitlines()[-1])
    return result


def test_people_sign_in_with_tokens_and_see_and_do_what_their_rbac_allows(
    rel: Release,
) -> None:
    dag = "ui-clear"
    rel.apply(dag_manifest(dag, [{"name": "flaky", "args": ['[ "$SLUICE_TRY_NUMBER" -ge 2 ]']}]))
    failed = rel.wait_run(dag, timeout=300)
    assert failed["status"]["state"] == "failed", failed["status"]
    run_id, run_object = failed["status"]["runId"], failed["metadata"]["name"]
    viewer = _person(rel, "ui-viewer", "view")
    editor = _person(rel, "ui-editor", "edit")
    run_page = f"/dags/{dag}/runs/{quote(run_id, safe='')}"
    clear = {"action": "clear", "downstream": "true"}

    got = _browse(
        rel,
        [
            {"get": "/"},
            {"get": "/", "token": "not-a-token"},
            {"get": "/", "token": viewer},
            {"get": run_page, "token": viewer},
            {"get": "/pools", "token": viewer},
            {"post": f"{run_page}/tasks/flaky", "page": run_page, "token": viewer, "form": clear},
            {"post": f"{run_page}/tasks/flaky", "page": run_page, "token": editor, "form": clear},
        ],
    )
    anonymous, stranger, listed, run, pools, viewers_clear, editors_clear = got
    assert anonymous == [303, "/login?next=%2F"]
    assert stranger[0] == 401
    assert listed[0] == 200
    assert f'id="dag-{dag}"' in listed[1]
    assert run[0] == 200
    who = f"system:serviceaccount:{rel.namespace}:ui-viewer"
    assert pools == [
        403,
        f"refused: {who} may not list pools.sluice.io cluster-wide (a RoleBinding there to"
        " the view ClusterRole lets them see, to edit lets them act)",
    ]
    assert viewers_clear[0] == 403, viewers_clear
    assert "refused by the Kubernetes API server" in viewers_clear[1]
    assert "taskactions" in viewers_clear[1]
    assert (editors_clear[0], unquote(editors_clear[1])) == (303, unquote(run_page))

    actions = rel.json("taskactions")["items"]
    assert len(actions) == 1
    (action,) = actions
    assert action["metadata"]["annotations"]["sluice.io/requested-by"] == (
        f"system:serviceaccount:{rel.namespace}:ui-editor"
    )
    assert action["spec"] == {
        "dagName": dag,
        "runId": run_id,
        "action": "clear",
        "tasks": ["flaky"],
        "downstream": True,
    }
    wait_for(
        "the run succeeded",
        lambda: rel.json("dagrun", run_object)["status"].get("state") == "success",
        300,
        every=2,
    )
    tries = rel.sql(
        "SELECT tt.try_number, tt.state FROM task_try tt JOIN task_instance ti"
        f" ON ti.id = tt.task_instance_id WHERE ti.dag_id = '{dag}' ORDER BY tt.try_number"
    )
    assert tries == [["1", "failed"], ["2", "success"]]
