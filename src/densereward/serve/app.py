"""``densereward serve``: a stateless reward server (Starlette + uvicorn).

The reward is the one ``train grpo`` optimises, built from the same YAML ``reward:`` and
``verifier:`` sections (:func:`densereward.rewards.build_reward_funcs`): for each item the
weighted sum of the reward functions that did not abstain (TRL's ``nansum``), ``None`` when
all abstained. Concurrent requests are micro-batched: items that arrive within
``batch_wait_ms`` of each other (up to ``max_batch``) go to the reward functions in one call,
so the verifier sees one batch; up to ``max_concurrent_batches`` such calls run at once. Sync
reward functions run in a worker thread, one at a time (an in-process model is not shared
between threads); with ``reward.use_async`` (network verifiers: ``openai``, ``sampled``) the
dense reward is awaited on the server's loop, and its reads of concurrent batches overlap.

Endpoints (contracts in :mod:`densereward.serve.contracts`, each a registered
:class:`~densereward.serve.protocols.ServeProtocol`, so a new one needs no edit here):

* ``POST /get_reward`` (alias ``POST /``): OpenRLHF's remote reward model;
* ``POST /slime``: slime's ``--rm-url`` (the answer is the reward, a JSON number; with
  ``?details=1`` ``{"reward", "abstained"}``);
* ``POST /score``, ``POST /rank``: the plain JSON API;
* ``GET /health``; ``GET /metrics``: Prometheus text (requests, latency, items, abstentions,
  refusals by reason, batch sizes, and the ``verifier/*`` quality metrics when labels come).

Every refusal is a 4xx with a message, counted by reason (:mod:`densereward.serve.contracts`);
a client that leaves mid-body is counted as 499; an item whose weighted reward is not finite
is sent as abstained. With ``serve.require_labels`` an item without a label is refused.

OpenRLHF and slime take numbers only: an abstained item is sent as ``serve.abstain_reward``
(default 0.0) and flagged to every client kind: in OpenRLHF's ``extra_logs``
(``densereward_abstained``), in ``/slime?details=1``'s ``{"reward", "abstained"}`` (slime's
``--reward-key reward``), in ``/score``'s ``abstained`` (verl's ``compute_score`` returns
``{"score", "abstained"}``), in the ``X-Densereward-Abstained`` header (the count) of every
answer, and counted in ``densereward_abstentions_total{endpoint}``; ``/score`` answers ``null``.
Nothing is kept between requests beyond counters, so any number of replicas can sit behind a
load balancer.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..rewards._common import check_weights
from .contracts import Item, RequestError, check_labels, parse_body
from .lifecycle import DaemonThreads, Drain
from .protocols import SERVE_PROTOCOLS, ServeProtocol, served_protocols

__all__ = ["ServeConfig", "RewardService", "make_app"]

logger = logging.getLogger(__name__)

ABSTAINED_HEADER = "X-Densereward-Abstained"
"""Response header of ``/get_reward``, ``/slime`` and ``/score``: how many of the answer's items
abstained (sent as ``serve.abstain_reward`` where the contract takes numbers only)."""


@dataclass(frozen=True)
class ServeConfig:
    """The reward server (YAML section ``serve:``)."""

    host: str = "127.0.0.1"
    """Address to listen on (``0.0.0.0`` for every interface)."""
    port: int = 5000
    """TCP port (OpenRLHF's ``serve_rm`` default)."""
    max_batch: int = 64
    """Items per reward call: requests are merged up to this many (a larger request is one call)."""
    batch_wait_ms: float = 5.0
    """How long the first request of a batch waits for others to join it (milliseconds)."""
    max_items: int = 1024
    """Items one request may carry (more -> HTTP 413)."""
    max_body_bytes: int = 8 * 2**20
    """Largest request body (bytes; more -> HTTP 413)."""
    max_concurrent_batches: int = 16
    """Reward calls in flight at once (sync reward functions still take turns on the model)."""
    abstain_reward: float = 0.0
    """What an abstained item is sent as where the contract takes only numbers (OpenRLHF, slime)."""
    shutdown_timeout_s: float = 30.0
    """On SIGTERM / SIGINT: stop accepting, then wait this long for requests in flight (seconds);
    one still running then is answered 503 (:mod:`densereward.serve.lifecycle`)."""
    require_labels: bool | None = None
    """Refuse (422, naming this setting) a request with an item that has no label / reference
    instead of scoring it without one. ``None`` (default) = on when the reward uses references
    (``reward.reference_guided``, or a Math-Verify term: ``sparse``, ``mixed``, ``gated``,
    ``seed_recipe``): without them the reward is the reference-free judge, which
    docs/reward_hacking.md measures as easy to game."""
    quality_history: int = 4096
    """The reward-quality tracker inside the server keeps the last this many labelled items
    (its auto threshold is chosen on them) and as many batch records: memory and the cost per
    batch stay flat however long it runs."""
    math_workers: int = 4
    """Math-Verify worker processes: the checks of concurrent requests run side by side, each
    with its own deadline (``reward.math_timeout_s``), so an answer that hangs SymPy holds one
    worker, not every request."""
    keep_alive_s: float = 75.0
    """How long an idle client connection is kept open (seconds): longer than the client pools'
    own idle timeouts (aiohttp 15 s, httpx 5 s), so the client closes first, never the server
    under a request being sent."""
    protocols: tuple[str, ...] | None = None
    """The request contracts served, names in
    :data:`~densereward.serve.protocols.SERVE_PROTOCOLS` (built in: ``get_reward``, ``slime``,
    ``score``, ``rank``; a plugin may add more); ``None`` (default): every registered one."""

    def __post_init__(self) -> None:
        for name in (
            "max_batch",
            "max_items",
            "max_body_bytes",
            "max_concurrent_batches",
            "quality_history",
            "math_workers",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"serve.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("batch_wait_ms", "shutdown_timeout_s", "abstain_reward"):
            if not math.isfinite(getattr(self, name)):
                raise ConfigError(
                    f"serve.{name} must be a finite number, got {getattr(self, name)!r}"
                )
        if self.batch_wait_ms < 0 or self.shutdown_timeout_s < 0:
            raise ConfigError("serve.batch_wait_ms and serve.shutdown_timeout_s must be >= 0")
        if not self.keep_alive_s > 0:
            raise ConfigError(f"serve.keep_alive_s must be > 0 seconds, got {self.keep_alive_s}")
        if self.protocols is not None:
            if isinstance(self.protocols, str) or not self.protocols:
                raise ConfigError(
                    f"serve.protocols must be a non-empty list of names, got {self.protocols!r}; "
                    f"registered: {SERVE_PROTOCOLS.names()}"
                )
            object.__setattr__(self, "protocols", tuple(self.protocols))
            for name in self.protocols:
                try:
                    SERVE_PROTOCOLS.check(name)
                except ConfigError as e:
                    raise ConfigError(f"serve.protocols: {e}") from None


class _Metrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "densereward_requests", "HTTP requests", ["endpoint", "status"], registry=r
        )
        self.latency = Histogram(
            "densereward_request_seconds", "request latency (s)", ["endpoint"], registry=r
        )
        self.items = Counter("densereward_items", "items scored", registry=r)
        self.abstentions = Counter(
            "densereward_abstentions",
            "items answered as abstained (every reward abstained), by endpoint",
            ["endpoint"],
            registry=r,
        )
        self.batch = Histogram(
            "densereward_batch_items",
            "items per reward call",
            registry=r,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
        )
        self.in_flight = Gauge("densereward_in_flight", "requests being served", registry=r)
        self.quality = Gauge(
            "densereward_verifier_metric", "verifier/* reward-quality metrics", ["name"], registry=r
        )
        self.refusals = Counter(
            "densereward_refusals",
            "requests refused with a 4xx, by reason",
            ["endpoint", "reason"],
            registry=r,
        )
        self.non_finite = Counter(
            "densereward_non_finite",
            "items whose weighted reward was not finite (sent as abstained)",
            registry=r,
        )

    def log_metric(self, name: str, value: float) -> None:
        """Set the ``densereward_verifier_metric`` gauge of ``name``; NaN for a metric the
        latest labelled batch left undefined (the tracker sends those too: logs_undefined)."""
        with contextlib.suppress(TypeError, ValueError):
            self.quality.labels(name=name).set(float(value))

    log_metric.logs_undefined = True  # type: ignore[attr-defined]


class RewardService:
    """The reward functions, a lock around the model, and the micro-batcher.

    Args:
        funcs: TRL-style reward functions (sync or ``async def``), called as
            ``f(prompts=..., completions=..., answer=..., log_metric=...)``.
        weights: one weight per function, or ``None`` (all 1).
        verifier: the :class:`~densereward.verifier.Verifier` (for ``/rank`` and ``/health``).
        config: the server settings.
    """

    def __init__(
        self,
        funcs: Sequence[Any],
        weights: Sequence[float] | None,
        verifier: Any,
        config: ServeConfig,
    ):
        self.funcs = list(funcs)
        self.weights = list(weights) if weights is not None else [1.0] * len(self.funcs)
        if len(self.weights) != len(self.funcs):
            raise ConfigError(f"{len(self.weights)} weights for {len(self.funcs)} reward functions")
        check_weights(self.weights, "reward.weights (the weights of the reward functions)")
        self.verifier = verifier
        self.config = config
        self.labels_why = "serve.require_labels=true"
        """Why labels are required, for the refusal's message (set by the CLI's build)."""
        self.left_running = False
        """True once the shutdown stopped waiting for the verifier's close (a call the drain
        cut off still runs in the backend): the console command then ends the process at once,
        since tearing the runtime down under a running forward pass aborts it (SIGABRT)."""
        self.metrics = _Metrics()
        self.drain = Drain(config.shutdown_timeout_s)
        self.n_calls = 0
        self._lock = threading.Lock()
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()

    # -------------------------------------------------------------- scoring

    async def reward_batch(self, items: Sequence[Item]) -> list[float | None]:
        """The reward of each item (one call of each reward function), ``None`` = abstained."""
        kwargs = {
            "prompts": [it.problem for it in items],
            "completions": [it.response for it in items],
            "answer": [it.label for it in items],
            "log_metric": self.metrics.log_metric,
        }
        self.n_calls += 1

        def locked(f: Any) -> Any:
            if getattr(f, "thread_safe", False):  # e.g. Math-Verify alone: no model to share
                return f(**kwargs)
            with self._lock:
                return f(**kwargs)

        columns = await asyncio.gather(
            *(
                f(**kwargs)
                if inspect.iscoroutinefunction(type(f).__call__) or inspect.iscoroutinefunction(f)
                else asyncio.to_thread(locked, f)
                for f in self.funcs
            )
        )
        out: list[float | None] = []
        for i in range(len(items)):
            parts = [(w, col[i]) for w, col in zip(self.weights, columns, strict=True)]
            # TRL's nansum: None and NaN are abstentions of that function
            got = [w * float(v) for w, v in parts if v is not None and not math.isnan(float(v))]
            total = sum(got) if got else None
            if total is not None and not math.isfinite(total):
                self.metrics.non_finite.inc()
                logger.warning(
                    "serve: item %d's weighted reward is %s; sent as abstained", i, total
                )
                total = None
            out.append(total)
        self.metrics.items.inc(len(items))
        self.metrics.batch.observe(len(items))
        return out

    def rank(self, problem: str, candidates: list[str], pivots: int) -> dict[str, Any]:
        # a served verifier takes concurrent reads: a long /rank does not hold the reward calls
        shared = getattr(getattr(self.verifier, "backend", None), "thread_safe", False)
        with contextlib.nullcontext() if shared else self._lock:
            r = self.verifier.rank(problem=problem, candidates=candidates, pivots=pivots)
        return {
            "winner": int(r.winner),
            "order": [int(i) for i in r.order],
            "win_rate": [float(x) for x in r.win_rate],
            "n_comparisons": int(r.n_comparisons),
        }

    # -------------------------------------------------------------- micro-batching

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(DaemonThreads())  # a hung call never holds the exit
        self.drain.bind(loop)
        self._queue = asyncio.Queue()
        self._slots = asyncio.Semaphore(self.config.max_concurrent_batches)
        self._worker = asyncio.get_running_loop().create_task(self._work())

    async def stop(self) -> None:
        """Finish what is queued within the drain's deadline, then stop the worker; reward calls
        still running then are abandoned (their requests were answered 503). Logs once what the
        drain cut off (:meth:`~densereward.serve.lifecycle.Drain.outcome`), if anything."""
        # wait_for(..., 0) times out even on an empty queue: wait only for work still queued
        if self._queue is not None and self._queue._unfinished_tasks:  # type: ignore[attr-defined]
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._queue.join(), self.drain.left())
        outcome = self.drain.outcome(sum(not t.done() for t in self._tasks))
        if outcome is not None:
            logger.warning("%s", outcome)
        for task in [self._worker, *self._tasks]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def submit(self, items: list[Item]) -> list[float | None]:
        """Queue ``items`` for the next micro-batch; their rewards, in order."""
        if self._queue is None:
            raise RuntimeError("the service is not started")
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        await self._queue.put((items, future))
        return await future

    async def _work(self) -> None:
        assert self._queue is not None
        queue = self._queue
        wait_s = self.config.batch_wait_ms / 1000
        while True:
            batch = [await queue.get()]
            n = len(batch[0][0])
            deadline = time.monotonic() + wait_s
            while n < self.config.max_batch:
                left = deadline - time.monotonic()
                try:
                    nxt = (
                        queue.get_nowait()
                        if left <= 0
                        else await asyncio.wait_for(queue.get(), left)
                    )
                except (asyncio.TimeoutError, asyncio.QueueEmpty):
                    break
                batch.append(nxt)
                n += len(nxt[0])
            await self._slots.acquire()
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[tuple[list[Item], asyncio.Future]]) -> None:
        items = [it for its, _ in batch for it in its]
        try:
            values = await self.reward_batch(items)
        except Exception as e:  # noqa: BLE001 - every waiting request gets the error
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(e)
        else:
            start = 0
            for its, fut in batch:
                if not fut.done():
                    fut.set_result(values[start : start + len(its)])
                start += len(its)
        finally:
            self._slots.release()
            for _ in batch:
                self._queue.task_done()  # type: ignore[union-attr]


def model_name(verifier: Any) -> str:
    """The verifier model's name for ``/health``: ``verifier.model`` as configured, a served
    model's name, or the embedded default's name -- never the cache directory it loads from.

    >>> from types import SimpleNamespace as NS
    >>> model_name(NS(config=NS(model=None), backend=NS(model_id="/root/.cache/x/smollm2-135m")))
    'SmolLM2-135M-Instruct'
    >>> model_name(NS(config=NS(model=None), backend=NS(model_id="Qwen/Qwen3-8B")))
    'Qwen/Qwen3-8B'
    """
    import os

    from ..backends.default_model import DEFAULT_MODEL_NAME

    configured = getattr(getattr(verifier, "config", None), "model", None)
    if configured:
        return str(configured)
    served = getattr(getattr(verifier, "backend", None), "model_id", None)
    if served and not os.path.isabs(str(served)):  # an OpenAI-compatible server's model name
        return str(served)
    return DEFAULT_MODEL_NAME


def make_app(service: RewardService, *, on_close: Callable[[], None] | None = None):
    """The Starlette application around ``service``.

    ``on_close`` runs at shutdown after the last queued item is scored (e.g. closing the
    verifier).
    """
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    cfg = service.config
    m = service.metrics

    async def body_of(request: Request) -> Any:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > cfg.max_body_bytes:
            raise RequestError(
                f"body of {length} bytes; at most {cfg.max_body_bytes} (serve.max_body_bytes)",
                413,
                "too_large",
            )
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > cfg.max_body_bytes:
                raise RequestError(
                    f"body over {cfg.max_body_bytes} bytes; at most {cfg.max_body_bytes} "
                    "(serve.max_body_bytes)",
                    413,
                    "too_large",
                )
        return parse_body(bytes(raw))

    def labelled(items: list[Item], field: str) -> list[Item]:
        if cfg.require_labels:
            check_labels(items, field, service.labels_why)
        return items

    def draining(request: Request) -> Response:
        service.drain.cut(request.url.path)
        return JSONResponse(
            {
                "error": f"the server is shutting down ({service.drain.cause()}) and stopped "
                "waiting for this request"
                + (
                    ""
                    if service.drain.cut_short
                    else " at the end of its drain (serve.shutdown_timeout_s="
                    f"{cfg.shutdown_timeout_s:g} s; a second SIGTERM or Ctrl-C ends it at once)"
                )
                + "; send it again"
            },
            status_code=503,
            headers={"Retry-After": "1", "Connection": "close"},
        )

    def endpoint(name: str, protocol: ServeProtocol):
        async def answer(request: Request) -> Any:
            items, state = protocol.parse(await body_of(request), request.query_params, cfg)
            if protocol.label_field is not None:
                items = labelled(list(items), protocol.label_field)
            if protocol.score is not None:
                result = await protocol.score(service, items, state)
            else:
                result = await service.submit(list(items))
            return protocol.respond(result, state, cfg)

        async def route(request: Request) -> Response:
            t0 = time.perf_counter()
            m.in_flight.inc()
            status = 200
            try:
                finished, result = await service.drain.within(answer(request))
                if not finished:
                    status = 503
                    return draining(request)
                body, abstained = result
                if abstained is None:  # /rank: no reward, nothing to flag
                    return JSONResponse(body)
                m.abstentions.labels(endpoint=name).inc(abstained)
                return JSONResponse(body, headers={ABSTAINED_HEADER: str(abstained)})
            except asyncio.CancelledError:  # uvicorn's force exit: still an answer, not a bare 500
                status = 503
                return draining(request)
            except RequestError as e:
                status = e.status
                m.refusals.labels(endpoint=name, reason=e.reason).inc()
                return JSONResponse({"error": str(e)}, status_code=e.status)
            except ClientDisconnect:  # the client left mid-body: nobody to answer, not our fault
                status = 499
                return Response(status_code=499)
            except Exception as e:  # noqa: BLE001 - the client gets a message, the log the trace
                status = 500
                logger.exception("serve: %s failed", name)
                return JSONResponse({"error": f"{type(e).__name__}: {e}"}, status_code=500)
            finally:
                m.in_flight.dec()
                m.requests.labels(endpoint=name, status=str(status)).inc()
                m.latency.labels(endpoint=name).observe(time.perf_counter() - t0)

        return route

    async def health(request: Request) -> Response:
        return JSONResponse(
            {"status": "ok", "model": model_name(service.verifier), "reward_calls": service.n_calls}
        )

    async def metrics(request: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any):
        await service.start()
        try:
            yield
        finally:
            await service.stop()
            if on_close is not None:  # bounded too: closing waits for nothing that hangs
                try:
                    await asyncio.wait_for(
                        asyncio.to_thread(on_close), max(service.drain.left(), 5.0)
                    )
                except asyncio.TimeoutError:  # a cut-off call still runs in the backend
                    service.left_running = True
                    logger.warning(
                        "serve: closing the verifier did not finish: a call the drain cut off "
                        "still runs in it; the server ends without waiting for it"
                    )

    routes = [
        Route(path, endpoint(name, protocol), methods=["POST"])
        for name, protocol in served_protocols(cfg.protocols)
        for path in protocol.paths
    ]
    routes += [
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.service = service
    return app
