"""Heartbeats wait a moment and go to the database together.

Each request hands its (task instance, try) to the buffer and awaits the
verdict of the flush that carries it. A flush starts `flush_interval` after the
first pending heartbeat, or at once when `max_batch` distinct tries are
pending, and carries at most `max_batch` of them; one flush runs at a time, in
a worker thread (the database calls block), while the next batch gathers. So N
pods cost about N / max_batch statements per flush interval, not N.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable, Sequence

import structlog

from sluice.api.heartbeats import TryKey, Verdict
from sluice.logs import first_line
from sluice.metrics import families

log = structlog.get_logger("sluice.api")

WriteBatch = Callable[[Sequence[TryKey]], dict[TryKey, Verdict]]


class FlushFailed(Exception):
    """The batch carrying a heartbeat could not be written (the database is unreachable)."""


class HeartbeatBuffer:
    """Gathers heartbeats on one event loop and writes them in batches with `write`.

    Create it, and call `run` as a task, on the loop that serves the requests.
    """

    def __init__(
        self,
        write: WriteBatch,
        *,
        flush_interval: float = 0.2,
        max_batch: int = 500,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1 (got {max_batch})")
        self._write = write
        self._flush_interval = flush_interval
        self._max_batch = max_batch
        self._pending: dict[TryKey, list[asyncio.Future[Verdict]]] = {}
        self._some = asyncio.Event()
        self._full = asyncio.Event()
        # One worker: flushes never overlap, so one connection does all the writing.
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="heartbeats")
        self.flushes = 0

    async def submit(self, key: TryKey) -> Verdict:
        """The verdict of the flush that writes this heartbeat; `FlushFailed` if it failed."""
        future: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(key, []).append(future)
        self._some.set()
        if len(self._pending) >= self._max_batch:
            self._full.set()
        return await future

    async def run(self) -> None:
        """Flush batches until cancelled; a failed flush fails its requests, never the loop."""
        loop = asyncio.get_running_loop()
        while True:
            await self._some.wait()
            if len(self._pending) < self._max_batch:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), self._flush_interval)
            batch = self._take()
            keys = list(batch)
            families.HEARTBEAT_FLUSH_SIZE.observe(len(keys))
            try:
                verdicts = await loop.run_in_executor(self._thread, self._write, keys)
            except asyncio.CancelledError:
                _fail(batch, "the task API is shutting down")
                raise
            except Exception as exc:
                log.warning("heartbeat flush failed", tries=len(keys), error=first_line(exc))
                # Pods get no database error text: it names hosts and users.
                _fail(batch, "the heartbeats could not be written; retry")
                continue
            finally:
                self.flushes += 1
            for key, futures in batch.items():
                for future in futures:
                    if not future.done():  # the client may have gone away
                        future.set_result(verdicts[key])

    def _take(self) -> dict[TryKey, list[asyncio.Future[Verdict]]]:
        keys = list(self._pending)[: self._max_batch]
        batch = {key: self._pending.pop(key) for key in keys}
        if len(self._pending) < self._max_batch:
            self._full.clear()
        if not self._pending:
            self._some.clear()
        return batch

    def close(self) -> None:
        """Fail whatever is still pending and stop the worker thread (after `run` ended)."""
        _fail(self._pending, "the task API is shutting down")
        self._pending.clear()
        self._thread.shutdown(wait=True)


def _fail(batch: dict[TryKey, list[asyncio.Future[Verdict]]], reason: str) -> None:
    for futures in batch.values():
        for future in futures:
            if not future.done():
                future.set_exception(FlushFailed(reason))
