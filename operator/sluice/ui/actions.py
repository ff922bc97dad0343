"""The UI's actions: the same code the CLI and kubectl paths run, behind a CSRF check.

- Pause or unpause a DAG (`sluice dags pause|unpause`: `db.dags.set_paused`).
- Trigger a run, with a conf (`sluice dags trigger`: `scheduler.triggers.trigger_run`).
- Clear a task of a run, with its downstream if asked, or mark it success or failed
  (`sluice tasks clear|mark`: `scheduler.clearing`).
- Mark a run success or failed, or cancel it (what a DagRun object's `spec.state` and
  its deletion do: `handlers.store.mark_run_as`, `cancel_run`).

Every action is a form POST. CSRF: each page carries a token (an HMAC of the
process's secret, and on a cluster of the user's sign-in token) in a `SameSite=Strict`
cookie and in every form; a POST whose
form token does not match its cookie, or whose `Origin` is another site, is
refused with 403. A refused action (an unknown task, a bad conf) is a 400 page
saying why; nothing changes.

On a cluster (`guard`) the same actions are the objects kubectl would write (a DAG's
`spec.paused`, a DagRun, a TaskAction), written with the user's own token, so the API
server's RBAC decides them and the operator carries them out (`cluster_actions`);
the UI's own database connection only reads.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

from aiohttp import web
from sqlalchemy.orm import Session

from sluice.db.dags import SpecCache, set_paused
from sluice.handlers import store
from sluice.handlers.ownership import RunRecord
from sluice.scheduler import clearing
from sluice.scheduler.past import wake_next_runs
from sluice.scheduler.transitions import lock_runs
from sluice.scheduler.triggers import TriggerError, trigger_run
from sluice.spec.states import TaskState
from sluice.ui import cluster_actions, queries
from sluice.ui.keys import ACCESS, SECRET, SESSIONS

# An action's work, in one transaction: (session, form) -> where to go next, and the run
# whose next runs' dependsOnPast tasks may wake (woken in a transaction of its own).
Work = Callable[[Session, Any], tuple[str, int | None]]

CSRF_COOKIE = "sluice_csrf"
CSRF_FIELD = "csrf"


def csrf_token(request: web.Request) -> str:
    """The page's token: an HMAC of the process's secret and, on a cluster, of the token
    the user signed in with, so one user's pages carry no token good for another's."""
    from sluice.ui.guard import presented_token

    signed_in = presented_token(request)[0] if request.app[ACCESS] is not None else ""
    subject = b"sluice-ui-csrf:" + hashlib.sha256(signed_in.encode()).digest()
    return hmac.new(request.app[SECRET], subject, "sha256").hexdigest()


def new_secret() -> bytes:
    return secrets.token_bytes(32)


def checked(request: web.Request, form: Any) -> None:
    """403 unless the form's token is the page's (double submit) and the POST comes from
    this site."""
    expected = csrf_token(request)
    cookie = request.cookies.get(CSRF_COOKIE, "")
    given = str(form.get(CSRF_FIELD, ""))
    if not (hmac.compare_digest(cookie, expected) and hmac.compare_digest(given, expected)):
        raise web.HTTPForbidden(text="refused: the form's CSRF token is missing or stale; reload")
    origin = request.headers.get("Origin")
    if origin and urlsplit(origin).netloc != request.host:
        raise web.HTTPForbidden(text=f"refused: a POST from another site ({origin})")


def _path(*parts: str) -> str:
    return "/" + "/".join(quote(part, safe="") for part in parts)


async def _act(request: web.Request, work: Work) -> web.Response:
    """Check the form, do the work in one transaction, redirect where it says."""
    form = await request.post()
    checked(request, form)
    sessions = request.app[SESSIONS]

    def run() -> str:
        with sessions() as session:
            try:
                target, woken = work(session, form)
            except (clearing.ActionError, TriggerError, ValueError) as exc:
                session.rollback()
                raise web.HTTPBadRequest(text=f"refused: {exc}") from None
            session.commit()
        if woken is not None:
            with sessions() as session:
                wake_next_runs(session, [woken])
                session.commit()
        return target

    target = await asyncio.to_thread(run)
    raise web.HTTPSeeOther(target)


# On a cluster: (the user's client, the DAG's namespace, the form, the user's name) ->
# where to go next, after writing the object as them (`cluster_actions`).
ClusterWork = Callable[[Any, str, Any, str], str]


async def _on_cluster(request: web.Request, dag_id: str, work: ClusterWork) -> web.Response:
    """Check the form, then write the action's object with the user's own token."""
    from sluice.ui import guard

    form = await request.post()
    checked(request, form)
    access, user = request.app[ACCESS], guard.who(request)
    if access is None or user is None:  # `guard.identify` lets none through without one
        raise web.HTTPUnauthorized(text="not signed in")

    def run() -> str:
        with request.app[SESSIONS]() as session:
            found = queries.dag_namespace(session, dag_id)
        if found is None:
            raise web.HTTPNotFound(text=f"no DAG named {dag_id!r}")
        if found[0] is None:
            raise web.HTTPBadRequest(
                text=f"DAG {dag_id!r} has no object on the cluster (it came from the sluice"
                " CLI): act on it with the CLI"
            )
        with access.api_for(user) as api:  # the user's client: one per action
            return work(api, found[0], form, user.name)

    raise web.HTTPSeeOther(await asyncio.to_thread(run))


def _conf(form: Any) -> dict[str, Any] | None:
    text = str(form.get("conf") or "").strip()
    try:
        return json.loads(text) if text else None
    except ValueError as exc:
        raise ValueError(f'conf is not JSON ({exc}); e.g. {{"key": "value"}}') from None


async def pause(request: web.Request) -> web.Response:
    dag_id = request.match_info["dag"]
    if request.app[ACCESS] is not None:

        def patch(api: Any, namespace: str, form: Any, user: str) -> str:
            cluster_actions.pause(api, namespace, dag_id, form.get("paused") == "true")
            return _path("dags", dag_id, "grid")

        return await _on_cluster(request, dag_id, patch)

    def work(session: Session, form: Any) -> tuple[str, int | None]:
        paused = form.get("paused") == "true"
        if not set_paused(session, dag_id, paused):
            raise clearing.ActionError(f"no DAG named {dag_id!r}")
        return _path("dags", dag_id, "grid"), None

    return await _act(request, work)


async def trigger(request: web.Request) -> web.Response:
    dag_id = request.match_info["dag"]
    if request.app[ACCESS] is not None:

        def create(api: Any, namespace: str, form: Any, user: str) -> str:
            try:
                conf = _conf(form)
            except ValueError as exc:
                raise web.HTTPBadRequest(text=f"refused: {exc}") from None
            if conf is not None and not isinstance(conf, dict):
                raise web.HTTPBadRequest(text="refused: conf must be a JSON object")
            cluster_actions.trigger(api, namespace, dag_id, conf, user)
            return _path("dags", dag_id, "grid")  # its run id comes once the operator made it

        return await _on_cluster(request, dag_id, create)

    def work(session: Session, form: Any) -> tuple[str, int | None]:
        conf = _conf(form)
        new = trigger_run(session, SpecCache(), dag_id, datetime.now(UTC), conf=conf)
        return _path("dags", dag_id, "runs", new.run_id), None

    return await _act(request, work)


async def task_action(request: web.Request) -> web.Response:
    """Clear (with its downstream when asked) or mark a task of a run."""
    dag_id, run_id, task_id = (request.match_info[k] for k in ("dag", "run", "task"))
    if request.app[ACCESS] is not None:

        def create(api: Any, namespace: str, form: Any, user: str) -> str:
            cluster_actions.task_action(
                api, namespace, dag_id, run_id, task_id, str(form.get("action") or ""),
                downstream=form.get("downstream") == "true", user=user,
            )  # fmt: skip
            return _path("dags", dag_id, "runs", run_id)

        return await _on_cluster(request, dag_id, create)

    def work(session: Session, form: Any) -> tuple[str, int | None]:
        run = clearing.find_run(session, dag_id, run_id)
        action = str(form.get("action") or "")
        downstream = form.get("downstream") == "true"
        now = datetime.now(UTC)
        target = _path("dags", dag_id, "runs", run_id)
        if action == "clear":
            clearing.clear(
                session, SpecCache(), run, [task_id], downstream=downstream,
                reason="cleared from the UI", now=now,
            )  # fmt: skip
            return target, None
        if action in ("success", "failed"):
            clearing.mark(
                session, SpecCache(), run, [task_id], TaskState(action),
                downstream=downstream, reason=f"marked {action} from the UI", now=now,
            )  # fmt: skip
            return target, run.id
        raise ValueError(f"action {action!r}: one of clear, success, failed")

    return await _act(request, work)


async def run_action(request: web.Request) -> web.Response:
    """Mark a run success or failed, or cancel it."""
    dag_id, run_id = request.match_info["dag"], request.match_info["run"]
    target = _path("dags", dag_id, "runs", run_id)
    if request.app[ACCESS] is not None:

        def write(api: Any, namespace: str, form: Any, user: str) -> str:
            with request.app[SESSIONS]() as session:
                found = queries.run_object(session, dag_id, run_id)
            if found is None:
                raise web.HTTPConflict(
                    text=f"run {run_id!r} has no DagRun object yet: try again in a moment"
                )
            cluster_actions.run_action(api, found[0], found[1], str(form.get("action") or ""))
            return target

        return await _on_cluster(request, dag_id, write)

    def work(session: Session, form: Any) -> tuple[str, int | None]:
        action = str(form.get("action") or "")
        if action not in ("success", "failed", "cancel"):
            raise ValueError(f"action {action!r}: one of success, failed, cancel")
        run = clearing.find_run(session, dag_id, run_id)
        lock_runs(session, [run.id])
        session.refresh(run)
        # What the kubectl path's mark and cancel read of a run (the rest ties objects).
        record = RunRecord(
            id=run.id, dag_id=dag_id, run_id=run_id, state=run.state, dag_namespace=None,
            object_namespace=None, object_name=None, object_uid=None,
            published_namespace=None, published_uid=None, published_gone=False,
            scheduler_object_name=None,
        )  # fmt: skip
        now = datetime.now(UTC)
        if action == "cancel":
            store.cancel_run(session, record, "cancelled from the UI", now)
        else:
            try:
                store.mark_run_as(session, record, action, now)
            except store.MarkRefused as exc:
                raise ValueError(str(exc)) from None
        return target, run.id

    return await _act(request, work)
