"""How ``densereward serve`` starts, drains and stops (uvicorn around the Starlette app).

* **Drain.** On the first SIGTERM or Ctrl-C the server stops accepting, prints that it is
  draining, and gives the requests in flight ``serve.shutdown_timeout_s`` to finish
  (:class:`Drain`). A request still running then is answered ``503`` with a message and
  ``Retry-After`` (the client sends it again, to this server's successor or another replica),
  never a bare 500; a second SIGTERM or Ctrl-C ends the drain at once, the same way. The 503
  names the signal; at the end one log line counts and names the requests cut off (``/rank``
  included) and the reward calls left running. Those calls are abandoned, not awaited: a hung
  verifier read or Math-Verify check cannot hold the exit (work runs in daemon threads,
  :class:`DaemonThreads`).
* **Exit status.** 0 after SIGTERM (a rolling restart), 130 after Ctrl-C (the command's
  "interrupted", docs/configuration.md).
* **Keep-alive.** An idle connection is kept ``serve.keep_alive_s`` (75 s), longer than the
  pools of the clients that call the server (aiohttp 15 s, httpx 5 s; OpenRLHF uses aiohttp),
  so it is always the client that closes an idle connection, never the server under a request
  the client is sending (uvicorn's own default, 5 s, races aiohttp's pool).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TextIO, TypeVar

__all__ = [
    "Drain",
    "DaemonThreads",
    "DRAIN_GRACE_S",
    "signal_words",
    "uvicorn_config",
    "run_server",
]

T = TypeVar("T")

DRAIN_GRACE_S = 2.0
"""uvicorn waits this much longer than ``serve.shutdown_timeout_s`` for its tasks, the time the
503s of the requests cut by the drain take to be written."""


class DaemonThreads(concurrent.futures.ThreadPoolExecutor):
    """The server loop's default executor: each call in its own daemon thread.

    ``asyncio.to_thread`` (the sync reward functions, ``/rank``, Math-Verify checks) runs here.
    A daemon thread never holds the process at exit, and :meth:`shutdown` does not wait, so a
    call that hangs (a verifier read retried ``max_retries`` times) cannot stretch the drain
    past ``serve.shutdown_timeout_s``.
    """

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="densereward-serve")

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as e:  # noqa: BLE001 - handed to the awaiting coroutine
                future.set_exception(e)

        threading.Thread(target=run, name="densereward-serve-call", daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        return None  # nothing to join: the threads are daemons and end with their calls


def signal_words(sig: int) -> str:
    """A signal as the operator sent it: ``"Ctrl-C (SIGINT)"``, ``"SIGTERM"``.

    >>> signal_words(signal.SIGINT), signal_words(signal.SIGTERM)
    ('Ctrl-C (SIGINT)', 'SIGTERM')
    """
    return "Ctrl-C (SIGINT)" if sig == signal.SIGINT else signal.Signals(sig).name


class Drain:
    """The deadline of the requests in flight, set when the server is told to stop, and what
    the drain cut off.

    Args:
        timeout_s: ``serve.shutdown_timeout_s``.
    """

    def __init__(self, timeout_s: float):
        self.timeout_s = float(timeout_s)
        self.started: float | None = None
        self.deadline = math.inf
        self.signals: list[int] = []
        """The signals that began (first) and cut short (second) the drain."""
        self.cut_off: collections.Counter[str] = collections.Counter()
        """Requests answered 503 by the drain, by path (``/rank``, ``/score``, ...)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach to the server's event loop (at start-up)."""
        self._loop = loop
        self._event = asyncio.Event()

    @property
    def draining(self) -> bool:
        return self.started is not None

    def left(self) -> float:
        """Seconds until the deadline (``timeout_s`` when no drain has begun)."""
        if not self.draining:
            return self.timeout_s
        return max(0.0, self.deadline - time.monotonic())

    def begin(self, timeout_s: float | None = None, *, sig: int | None = None) -> None:
        """Start the drain (or shorten it to ``timeout_s``), because of signal ``sig`` when one
        came; safe from a signal handler or any thread."""
        if sig is not None:
            self.signals.append(sig)
        now = time.monotonic()
        t = self.timeout_s if timeout_s is None else max(0.0, float(timeout_s))
        if self.started is None:
            self.started = now
        self.deadline = min(self.deadline, now + t)
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._arm)

    def cause(self) -> str:
        """Why the server stops, for the 503 and the log: ``"SIGTERM"``, ``"SIGTERM, then a
        second Ctrl-C (SIGINT) ended the drain at once"``, or ``"told to stop"`` (no signal)."""
        if not self.signals:
            return "told to stop"
        first = signal_words(self.signals[0])
        if len(self.signals) == 1:
            return first
        return f"{first}, then a second {signal_words(self.signals[-1])} ended the drain at once"

    @property
    def cut_short(self) -> bool:
        """Whether a second signal ended the drain before ``timeout_s``."""
        return len(self.signals) > 1

    def cut(self, path: str) -> None:
        """Count a request answered 503 because the drain ended before it did."""
        self.cut_off[path] += 1

    def outcome(self, abandoned_calls: int) -> str | None:
        """The drain's outcome for the log when it cut anything off (``None`` when every request
        in flight finished): the requests answered 503, by path, and the reward calls (batches
        of several requests' items) left running in their daemon threads."""
        if not self.cut_off and not abandoned_calls:
            return None
        n = sum(self.cut_off.values())
        paths = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in sorted(self.cut_off.items()))
        parts = [f"cut off {n} request(s), answered 503 with Retry-After: {paths}"] if n else []
        if abandoned_calls:
            parts.append(f"abandoned {abandoned_calls} reward call(s) still running")
        return (
            f"serve: the drain ({self.cause()}; serve.shutdown_timeout_s={self.timeout_s:g} s) "
            f"{'; '.join(parts)} (work still running is left to its daemon threads)"
        )

    def _arm(self) -> None:
        assert self._event is not None and self._loop is not None
        left = self.deadline - time.monotonic()
        if left <= 0:
            self._event.set()
        else:
            self._loop.call_later(left, self._arm)

    async def within(self, coro: Coroutine[Any, Any, T]) -> tuple[bool, T | None]:
        """Run ``coro`` until it ends or the drain's deadline passes.

        Returns:
            ``(True, result)``, or ``(False, None)`` when the deadline came first (``coro``
            is cancelled).
        """
        task = asyncio.ensure_future(coro)
        if self._event is None:
            return True, await task
        waiter = asyncio.ensure_future(self._event.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if task.done():
            return True, task.result()
        task.cancel()
        return False, None


def uvicorn_config(app: Any, serve: Any, **overrides: Any) -> Any:
    """The ``uvicorn.Config`` of ``serve`` (:class:`~densereward.serve.app.ServeConfig`):
    address, keep-alive ``serve.keep_alive_s``, graceful shutdown ``serve.shutdown_timeout_s``
    (+ :data:`DRAIN_GRACE_S` for the 503s the drain writes)."""
    import uvicorn

    options: dict[str, Any] = dict(
        host=serve.host,
        port=serve.port,
        timeout_keep_alive=serve.keep_alive_s,
        timeout_graceful_shutdown=serve.shutdown_timeout_s + DRAIN_GRACE_S,
        log_level="warning",
    )
    options.update(overrides)
    return uvicorn.Config(app, **options)


def _server_class() -> type:
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """uvicorn's server with the drain of this module: a message on the first signal, the
        503 deadline, a second SIGTERM or Ctrl-C that ends the drain now (not uvicorn's force
        exit, which cancels the requests into bare 500s), and the signals kept for the exit
        status instead of re-raised."""

        def __init__(self, config: Any, drain: Drain, out: TextIO):
            super().__init__(config)
            self.drain = drain
            self.out = out
            self.signals: list[int] = []

        def handle_exit(self, sig: int, frame: Any) -> None:
            self.signals.append(sig)
            if not self.should_exit:
                self.should_exit = True
                self.drain.begin(sig=sig)
                self._say(
                    f"[serve] {signal.Signals(sig).name}: draining -- no new connections; the "
                    f"requests in flight have {self.drain.timeout_s:g} s (serve.shutdown_timeout_s), "
                    "then get 503. SIGTERM or Ctrl-C again to stop now."
                )
            elif self.drain.left() > 0:
                self.drain.begin(0.0, sig=sig)
                self._say(
                    f"[serve] {signal_words(sig)}: stopping now: the requests in flight get 503"
                )
            else:
                self.force_exit = True

        def _say(self, text: str) -> None:
            loop = self.drain._loop
            if loop is not None and not loop.is_closed():  # never print inside a signal handler
                loop.call_soon_threadsafe(lambda: print(text, file=self.out, flush=True))

    return DrainingServer


def make_server(
    app: Any, serve: Any, drain: Drain, *, out: TextIO | None = None, **overrides: Any
) -> Any:
    """A uvicorn server for ``app`` with the drain, keep-alive and signals of this module."""
    return _server_class()(uvicorn_config(app, serve, **overrides), drain, out or sys.stdout)


def run_server(app: Any, serve: Any, drain: Drain, *, out: TextIO | None = None) -> int:
    """Serve ``app`` until SIGTERM or Ctrl-C and the drain; the exit status (0, 130 after Ctrl-C)."""
    server = make_server(app, serve, drain, out=out)
    server.run()
    if signal.SIGINT in server.signals:
        print("[serve] interrupted", file=out or sys.stdout, flush=True)
        return 130
    return 0
