"""Login and authorization for the UI on a cluster (ADR 0040; `access` asks the cluster).

Every page but `/healthz`, `/login` and the static files needs a user: a bearer
token in the `Authorization` header (scripts), or the token pasted once into the
login page and kept in an HttpOnly, SameSite=Strict cookie (browsers, as the
Kubernetes Dashboard does). A browser without one is sent to the login page; a
script gets 401. What a page shows is then authorized against the DAG's namespace
(`permit`, `visible_namespaces`): `get dags` to see a DAG, `get pods/log` to read
a try's output, `list pools` for the pools. A loopback UI (no `Access`) lets
everything through, as `airflow standalone` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar
from urllib.parse import quote

from aiohttp import web

from sluice.logs import first_line
from sluice.ui.access import Check, Identity
from sluice.ui.keys import ACCESS

TOKEN_COOKIE = "sluice_token"
TOKEN_HOURS = 8
OPEN = ("/healthz", "/login", "/logout")
WHO = web.RequestKey("who", Identity)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
T = TypeVar("T")


def presented_token(request: web.Request) -> tuple[str, bool]:
    """The request's token, and whether it came in the header (a script, not a browser)."""
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip(), True
    return request.cookies.get(TOKEN_COOKIE, ""), False


def _see_other(target: str) -> web.Response:
    return web.Response(status=303, headers={"Location": target})


def _unauthenticated(request: web.Request, why: str, scripted: bool) -> web.StreamResponse:
    if scripted or request.method != "GET":
        return web.Response(status=401, text=f"{why}: present a Kubernetes bearer token")
    response = _see_other(f"/login?next={quote(request.path_qs, safe='')}")
    response.del_cookie(TOKEN_COOKIE)
    return response


@web.middleware
async def identify(request: web.Request, handler: Handler) -> web.StreamResponse:
    access = request.app[ACCESS]
    if access is None or request.path in OPEN or request.path.startswith("/static/"):
        return await handler(request)
    token, scripted = presented_token(request)
    if not token:
        return _unauthenticated(request, "not signed in", scripted)
    who = await ask_cluster(access.authenticate, token)
    if who is None:
        why = "the Kubernetes API server did not accept the token (expired or revoked?)"
        return _unauthenticated(request, why, scripted)
    request[WHO] = who
    return await handler(request)


async def ask_cluster(call: Callable[..., T], *args: object) -> T:
    """A review, in a worker thread; 503 saying so when the API server cannot answer
    (nothing is shown or done without its answer)."""
    try:
        return await asyncio.to_thread(call, *args)
    except Exception as exc:
        raise web.HTTPServiceUnavailable(
            text=f"cannot ask the Kubernetes API server who you are and what you may see:"
            f" {first_line(exc)}; try again"
        ) from None


def who(request: web.Request) -> Identity | None:
    """The signed-in user (None on a loopback UI)."""
    return request.get(WHO)


async def permit(request: web.Request, check: Check) -> None:
    """403, saying what is missing, unless the user may; nothing on a loopback UI."""
    access = request.app[ACCESS]
    if access is None:
        return
    user = request[WHO]
    if not await ask_cluster(access.allowed, user, check):
        raise web.HTTPForbidden(text=check.refusal(user))


async def visible_namespaces(
    request: web.Request, namespaces: Iterable[str | None], verb: str, resource: str
) -> set[str | None] | None:
    """Those of `namespaces` where the user may `verb` `resource` (None: every one, on a
    loopback UI). A row without a namespace (from the CLI) counts as cluster-wide."""
    access = request.app[ACCESS]
    if access is None:
        return None
    user = request[WHO]
    wanted = sorted(set(namespaces), key=lambda ns: ns or "")

    def allowed(ns: str | None) -> bool:
        return access.allowed(user, Check(verb, resource, ns or ""))

    answers = await asyncio.gather(*(ask_cluster(allowed, ns) for ns in wanted))
    return {ns for ns, ok in zip(wanted, answers, strict=True) if ok}


def _next(target: str) -> str:
    """Where to go after signing in: a path of this site only."""
    return target if target.startswith("/") and not target.startswith("//") else "/"


async def login_page(request: web.Request) -> web.Response:
    from sluice.ui.render import page

    target = _next(request.query.get("next", "/"))
    return page(request, "login.html", next=target, error="", hours=TOKEN_HOURS)


async def login(request: web.Request) -> web.StreamResponse:
    """Check the pasted token with the API server; keep it in the cookie if it is good."""
    from sluice.ui.actions import checked
    from sluice.ui.render import page

    form = await request.post()
    checked(request, form)
    target = _next(str(form.get("next") or "/"))
    access = request.app[ACCESS]
    token = str(form.get("token") or "").strip()
    user = await ask_cluster(access.authenticate, token) if access and token else None
    if user is None:
        response = page(
            request,
            "login.html",
            next=target,
            error="The Kubernetes API server did not accept this token.",
            hours=TOKEN_HOURS,
        )
        response.set_status(401)
        return response
    response = _see_other(target)
    response.set_cookie(
        TOKEN_COOKIE,
        token,
        httponly=True,
        samesite="Strict",
        secure=request.secure,
        max_age=TOKEN_HOURS * 3600,
    )
    return response


async def logout(request: web.Request) -> web.StreamResponse:
    from sluice.ui.actions import checked

    checked(request, await request.post())
    response = _see_other("/login")
    response.del_cookie(TOKEN_COOKIE)
    return response
