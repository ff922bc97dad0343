"""The UI's web application: aiohttp routes rendering Jinja2 templates (ADR 0039).

Pages are whole HTML documents; each polls its own URL for a fresh `<main>` every
`REFRESH_SECONDS` while its tab is visible (a bounded rate: one page's statements every
few seconds per open tab), so a page follows its runs without a JavaScript build.
Database work runs in a thread (SQLAlchemy's sessions are synchronous), one session per
request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

import jinja2
from aiohttp import web
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import SpecCache
from sluice.trylogs import LogNotReadable, TryNotFound, find_try, read_output
from sluice.ui import actions, guard, queries
from sluice.ui.access import Access, Check
from sluice.ui.keys import ACCESS, LOG_DIR, LOG_STORE, SECRET, SESSIONS, SPECS, TEMPLATES
from sluice.ui.render import page

T = TypeVar("T")
HERE = Path(__file__).parent
REFRESH_SECONDS = 5
# What a try's page shows of its output: `sluice logs` has it all.
LOG_LINES = 2000
LOG_BYTES = 1 << 20


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["when"] = _when
    env.filters["url"] = lambda value: quote(str(value), safe="")
    env.globals["letters"] = queries.STATE_LETTERS
    env.globals["refresh_seconds"] = REFRESH_SECONDS
    return env


async def _read(request: web.Request, work: Callable[[Session], T]) -> T:
    sessions = request.app[SESSIONS]

    def run() -> T:
        with sessions() as session:
            return work(session)

    return await asyncio.to_thread(run)


async def _namespace_of(request: web.Request, dag_id: str) -> str | None:
    """The DAG's namespace, once the user may see it there (404 for no such DAG); on a
    loopback UI, None without asking (the page's own query finds a missing DAG)."""
    if request.app[ACCESS] is None:
        return None
    found = await _read(request, lambda s: queries.dag_namespace(s, dag_id))
    if found is None:
        raise web.HTTPNotFound(text=f"no DAG named {dag_id!r}")
    namespace = found[0]
    await guard.permit(request, Check("get", "dags", namespace or ""))
    return namespace


async def dags(request: web.Request) -> web.Response:
    namespace = request.query.get("namespace") or None
    name = request.query.get("name") or None
    state = request.query.get("state") or None
    if state not in (None, *queries.DAG_STATES):
        raise web.HTTPBadRequest(
            text=f"state={state!r}: one of {', '.join(queries.DAG_STATES)} (or none)"
        )
    visible = None
    if request.app[ACCESS] is not None:
        every = await _read(request, queries.dag_namespaces)
        visible = await guard.visible_namespaces(request, every, "list", "dags")
    rows = await _read(
        request,
        lambda s: queries.dag_rows(s, namespace=namespace, name=name, within=visible, state=state),
    )
    return page(
        request,
        "dags.html",
        dags=rows,
        namespace=namespace or "",
        name=name or "",
        state=state or "",
        states=queries.DAG_STATES,
    )


async def dag_grid(request: web.Request) -> web.Response:
    dag_id = request.match_info["dag"]
    await _namespace_of(request, dag_id)
    before = None
    if "before" in request.query:
        try:
            before = datetime.fromisoformat(request.query["before"])
        except ValueError:
            raise web.HTTPBadRequest(
                text=f"before={request.query['before']!r} is not an ISO 8601 date-time"
            ) from None
    specs = request.app[SPECS]
    found = await _read(request, lambda s: queries.grid(s, specs, dag_id, before=before))
    if found is None:
        raise web.HTTPNotFound(text=f"no DAG named {dag_id!r}")
    return page(request, "grid.html", grid=found)


async def run(request: web.Request) -> web.Response:
    dag_id, run_id = request.match_info["dag"], request.match_info["run"]
    await _namespace_of(request, dag_id)
    specs = request.app[SPECS]
    found = await _read(request, lambda s: queries.run_page(s, specs, dag_id, run_id))
    if found is None:
        raise web.HTTPNotFound(text=f"DAG {dag_id!r} has no run {run_id!r}")
    return page(request, "run.html", run=found, now=datetime.now(UTC))


async def try_log(request: web.Request) -> web.Response:
    """A try's output (its last `LOG_LINES` lines, at most `LOG_BYTES`), as `sluice logs`
    reads it: the archive once it is there, else its pod or local file."""
    match = request.match_info
    dag_id, run_id, task_id = match["dag"], match["run"], match["task"]
    try:
        number = int(match["try"])
    except ValueError:
        raise web.HTTPBadRequest(text=f"try {match['try']!r} is not a number") from None
    store, log_dir = request.app[LOG_STORE], request.app[LOG_DIR]
    namespace = await _namespace_of(request, dag_id)
    # Its output is what `kubectl logs` of its pod would show: the same right.
    await guard.permit(request, Check("get", "pods", namespace or "", "log", group=""))
    user, access = guard.who(request), request.app[ACCESS]
    api = access.api_for(user) if access is not None and user is not None else None

    try:
        found = await _read(request, lambda s: find_try(s, dag_id, run_id, task_id, number))
    except TryNotFound as exc:
        raise web.HTTPNotFound(text=str(exc)) from None

    def output() -> tuple[str, str]:  # no database session held while the log is read
        try:
            chunks, where = read_output(
                found, tail=LOG_LINES, log_store=store or None, log_dir=log_dir, api=api
            )
            return found.header(where), _capped(chunks)
        except LogNotReadable as exc:
            return found.header(), f"(no output to show: {exc})"
        finally:
            if api is not None:
                api.close()  # type: ignore[no-untyped-call]  # the user's client: one per page

    header, text = await asyncio.to_thread(output)
    return page(request, "try.html", found=found, header=header, text=text)


def _capped(chunks: Iterable[bytes]) -> str:
    """The output as text, its last LOG_BYTES bytes, with a note if more came before."""
    kept = bytearray()
    dropped = 0
    for chunk in chunks:
        kept += chunk
        if len(kept) > LOG_BYTES:
            dropped += len(kept) - LOG_BYTES
            del kept[: len(kept) - LOG_BYTES]
    note = f"[{dropped} bytes before these not shown: `sluice logs` prints them all]\n"
    return (note if dropped else "") + kept.decode("utf-8", errors="replace")


async def dag_graph(request: web.Request) -> web.Response:
    dag_id = request.match_info["dag"]
    await _namespace_of(request, dag_id)
    run_id = request.query.get("run") or None
    specs = request.app[SPECS]
    found = await _read(request, lambda s: queries.graph_page(s, specs, dag_id, run_id))
    if found is None:
        raise web.HTTPNotFound(text=f"no DAG named {dag_id!r}")
    data = {"nodes": found.nodes, "edges": found.edges, "letters": queries.STATE_LETTERS}
    layout = (HERE / "static" / "vendor" / "dagre.min.js").is_file()
    return page(request, "graph.html", graph=found, data=data, layout=layout)


async def pools(request: web.Request) -> web.Response:
    await guard.permit(request, Check("list", "pools"))
    rows = await _read(request, queries.pool_rows)
    return page(request, "pools.html", pools=rows)


async def backfills(request: web.Request) -> web.Response:
    rows = await _read(request, queries.backfill_rows)
    visible = await guard.visible_namespaces(
        request, [row.namespace for row in rows], "list", "backfills"
    )
    if visible is not None:
        rows = [row for row in rows if row.namespace in visible]
    return page(request, "backfills.html", backfills=rows)


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def make_app(
    sessions: sessionmaker[Session],
    *,
    log_store: str | None = None,
    log_dir: Path | None = None,
    access: Access | None = None,
) -> web.Application:
    """The UI on this database; tries' logs from `log_store` (the schedulers' --log-store)
    once archived, else from their pods or from `log_dir` (the local executor's). With
    `access` (on a cluster) every page needs a user the cluster vouches for (`guard`),
    and actions are objects written as that user (`cluster_actions`)."""
    app = web.Application(middlewares=[guard.identify])
    app[ACCESS] = access
    app[SESSIONS] = sessions
    app[LOG_STORE] = log_store or ""
    app[LOG_DIR] = log_dir or Path("sluice-logs")
    app[SECRET] = actions.new_secret()
    app[SPECS] = SpecCache()
    app[TEMPLATES] = _environment()
    app.router.add_get("/", dags)
    app.router.add_get("/dags/{dag}/grid", dag_grid)
    app.router.add_get("/dags/{dag}/graph", dag_graph)
    app.router.add_get("/dags/{dag}/runs/{run}", run)
    app.router.add_get("/dags/{dag}/runs/{run}/tasks/{task}/tries/{try}", try_log)
    app.router.add_post("/dags/{dag}/pause", actions.pause)
    app.router.add_post("/dags/{dag}/trigger", actions.trigger)
    app.router.add_post("/dags/{dag}/runs/{run}/tasks/{task}", actions.task_action)
    app.router.add_post("/dags/{dag}/runs/{run}", actions.run_action)
    app.router.add_get("/pools", pools)
    app.router.add_get("/backfills", backfills)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/login", guard.login_page)
    app.router.add_post("/login", guard.login)
    app.router.add_post("/logout", guard.logout)
    app.router.add_static("/static", HERE / "static")
    return app
