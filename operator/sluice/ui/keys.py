"""What the UI's application holds (aiohttp app keys), shared by its pages and actions."""

from __future__ import annotations

from pathlib import Path

import jinja2
from aiohttp import web
from sqlalchemy.orm import Session, sessionmaker

from sluice.db.dags import SpecCache
from sluice.ui.access import Access

SESSIONS: web.AppKey[sessionmaker[Session]] = web.AppKey("sessions", sessionmaker)
SPECS: web.AppKey[SpecCache] = web.AppKey("specs", SpecCache)
TEMPLATES: web.AppKey[jinja2.Environment] = web.AppKey("templates", jinja2.Environment)
LOG_STORE: web.AppKey[str] = web.AppKey("log_store", str)
LOG_DIR: web.AppKey[Path] = web.AppKey("log_dir", Path)
SECRET: web.AppKey[bytes] = web.AppKey("csrf_secret", bytes)
# On a cluster, who may do what (`access`); None: a loopback UI, without login.
ACCESS: web.AppKey[Access | None] = web.AppKey("access")
