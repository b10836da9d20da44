"""Transport pieces of the HTTP backends: a private event loop, a rate limiter, retry signals.

:class:`~densereward.backends.openai_http.OpenAIBackend` owns one :class:`LoopThread` (an
asyncio loop in a daemon thread, so sync and async callers share one ``httpx`` client); its
:class:`~densereward.backends.replicas.Router` holds one :class:`RateLimiter` (requests per
minute) and raises :class:`RetryableError` for failures
worth retrying (HTTP 408/409/425/429/5xx, timeouts, connection errors, malformed JSON),
with the server's ``Retry-After`` (:func:`parse_retry_after`) when it gave one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Awaitable
from typing import TypeVar

from ..errors import BackendError

__all__ = ["Secret", "RetryableError", "parse_retry_after", "LoopThread", "RateLimiter"]

T = TypeVar("T")


class Secret(str):
    """A string whose ``repr`` is masked, so a key held in an attribute never shows in reprs."""

    def __repr__(self) -> str:
        return "'***'"


class RetryableError(BackendError):
    """A transient failure worth retrying; ``retry_after`` (s) from the server, if given.

    ``lost`` is True when the connection itself failed (refused, reset, dropped): the
    replica is taken out until its health check passes (:mod:`.replicas`). ``timed_out`` is
    True when the read got no answer within the timeout (consecutive ones take the replica out
    until a read answers again).
    """

    def __init__(
        self,
        message: str,
        retry_after: float | None = None,
        *,
        lost: bool = False,
        timed_out: bool = False,
    ):
        super().__init__(message)
        self.retry_after = retry_after
        self.lost = lost
        self.timed_out = timed_out


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


async def _cancel_pending() -> None:
    """Cancel every other task of the running loop and wait until each has finished."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class LoopThread:
    """A private asyncio event loop running in a daemon thread."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Awaitable[T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self) -> None:
        """Cancel the tasks still pending on the loop and wait (up to 5 s) until they have
        unwound, then stop and close it: a loop closed under a pending task logs "Task was
        destroyed but it is pending!" with a traceback (a reward server abandoning a hung read
        at shutdown did)."""
        if self.loop.is_closed():
            return
        if self.loop.is_running() and not self.in_loop_thread():
            with contextlib.suppress(Exception):
                self.submit(_cancel_pending()).result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        if self.in_loop_thread():  # e.g. garbage-collected on the loop thread: cannot join itself
            return
        self._thread.join(timeout=10)
        self.loop.close()


class RateLimiter:
    """Spaces request starts at least ``60 / requests_per_minute`` seconds apart."""

    def __init__(self, requests_per_minute: float | None):
        self.interval = 60.0 / requests_per_minute if requests_per_minute else 0.0
        self._next = 0.0
        self._lock = asyncio.Lock()

    async def wait(self) -> None:
        if self.interval <= 0:
            return
        async with self._lock:
            now = time.monotonic()
            delay = self._next - now
            self._next = max(now, self._next) + self.interval
        if delay > 0:
            await asyncio.sleep(delay)
