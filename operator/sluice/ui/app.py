"""The UI's web application: aiohttp routes rendering Jinja2 templates (ADR 0039).

Pages are whole HTML documents; each polls its own URL for a fresh `<main>` every
`REFRESH_SECONDS` while its tab is visible (a bounded rate: one page's statements every
few seconds per open tab), so a page follows its runs without a JavaScript build.
Database work runs in a thread (SQLAlchemy's sessions are synchronous), one session per
request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import jinja2
from aiohttp import web
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import SpecCache
from sluice.ui import queries

T = TypeVar("T")
HERE = Path(__file__).parent
REFRESH_SECONDS = 5
SESSIONS: web.AppKey[sessionmaker[Session]] = web.AppKey("sessions", sessionmaker)
SPECS: web.AppKey[SpecCache] = web.AppKey("specs", SpecCache)
TEMPLATES: web.AppKey[jinja2.Environment] = web.AppKey("templates", jinja2.Environment)


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


def _page(request: web.Request, template: str, **context: Any) -> web.Response:
    html = request.app[TEMPLATES].get_template(template).render(**context)
    return web.Response(text=html, content_type="text/html")


async def dags(request: web.Request) -> web.Response:
    namespace = request.query.get("namespace") or None
    name = request.query.get("name") or None
    rows = await _read(request, lambda s: queries.dag_rows(s, namespace=namespace, name=name))
    return _page(request, "dags.html", dags=rows, namespace=namespace or "", name=name or "")


async def dag_grid(request: web.Request) -> web.Response:
    dag_id = request.match_info["dag"]
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
    return _page(request, "grid.html", grid=found)


async def run(request: web.Request) -> web.Response:
    dag_id, run_id = request.match_info["dag"], request.match_info["run"]
    specs = request.app[SPECS]
    found = await _read(request, lambda s: queries.run_page(s, specs, dag_id, run_id))
    if found is None:
        raise web.HTTPNotFound(text=f"DAG {dag_id!r} has no run {run_id!r}")
    return _page(request, "run.html", run=found, now=datetime.now(UTC))


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def make_app(sessions: sessionmaker[Session]) -> web.Application:
    app = web.Application()
    app[SESSIONS] = sessions
    app[SPECS] = SpecCache()
    app[TEMPLATES] = _environment()
    app.router.add_get("/", dags)
    app.router.add_get("/dags/{dag}/grid", dag_grid)
    app.router.add_get("/dags/{dag}/runs/{run}", run)
    app.router.add_get("/healthz", healthz)
    app.router.add_static("/static", HERE / "static")
    return app
