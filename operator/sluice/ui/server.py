"""The UI beside a running scheduler (`sluice standalone --ui-port`): its own thread and
event loop, so the scheduler's synchronous loop is not touched (as the task API runs)."""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path

from aiohttp import web
from sqlalchemy.orm import Session, sessionmaker

from sluice.ui.access import Access
from sluice.ui.app import make_app


class UiServer:
    """Serve the UI on `host:port` (port 0: any free one) until `stop()`."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        host: str,
        port: int,
        log_dir: Path,
        access: Access | None = None,
    ) -> None:
        self._app = make_app(sessions, log_dir=log_dir, access=access)
        self._host, self._requested = host, port
        self._loop = asyncio.new_event_loop()
        self._runner = web.AppRunner(self._app)
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}/"

    def __enter__(self) -> UiServer:
        # Bound here, on the caller's thread: a port in use fails at once.
        sock = socket.create_server((self._host, self._requested))
        self.port = sock.getsockname()[1]
        self._loop.run_until_complete(self._runner.setup())
        self._loop.run_until_complete(web.SockSite(self._runner, sock).start())
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="sluice-ui", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()
        self._thread = None
