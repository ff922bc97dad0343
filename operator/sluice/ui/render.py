"""A page of the UI: its template rendered with the CSRF token (set in its cookie too)
and the signed-in user, if any."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from sluice.ui import actions
from sluice.ui.keys import TEMPLATES


def page(request: web.Request, template: str, **context: Any) -> web.Response:
    from sluice.ui.guard import who

    token = actions.csrf_token(request)
    user = who(request)
    html = (
        request.app[TEMPLATES]
        .get_template(template)
        .render(csrf=token, user=user.name if user else None, **context)
    )
    response = web.Response(text=html, content_type="text/html")
    response.set_cookie(actions.CSRF_COOKIE, token, httponly=True, samesite="Strict")
    return response
