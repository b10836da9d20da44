"""One verifier over several OpenAI-compatible servers: routing, health checks, failover.

``verifier.backend_options.base_url`` names one server (a single vLLM server, or a router such as
vllm-router in front of many: it keeps working exactly as before) or a list of replicas
serving the same model. Over a list, :class:`Router` sends each read to one replica:

* **Affinity.** The reads of one GRPO group share the prompt prefix (system turn,
  demonstrations, the problem), so they should hit one replica's prefix cache.
  :func:`affinity_key` hashes that prefix: every turn but the last, and the last turn up
  to the candidate (its first ``<response>``, ``<trajectory>`` or ``Answer:`` marker).
  Rendezvous (highest-random-weight) hashing of the key over the healthy replicas picks
  the preferred one, so a key moves only when its replica leaves or rejoins.
* **Least loaded.** When the preferred replica holds more than ``max_imbalance`` reads
  more than the least-loaded healthy one, the read goes to the least loaded (the
  ``balance_abs_threshold`` rule of SGLang's cache-aware router). Reads without a key go
  to the least loaded.
* **Health.** Every replica has its own check (``GET {url}/models``, which must list the
  verifier's model) every ``health_interval_s`` seconds. A read whose connection to a replica
  is lost takes the replica out at once; a check that passes puts it back. An engine can hang
  while its API server still lists models, so reads count too: :data:`TIMEOUTS_TO_TAKE_OUT`
  consecutive read timeouts take a replica out, and it rejoins only when a probe read (one
  token) answers within ``timeout_s``.
* **Model.** At start every replica must list the model (``verifier.model``, or the model the
  first replica that answers serves): one serving another model starts taken out (a warning
  names both), none serving it is an error; a read answered 404 (the model is gone: a replica
  restarted with another) fails over to another replica.
* **Failover.** A read that fails on a replica with a retryable error (connection lost,
  timeout, 408/429/5xx, malformed answer) is sent at once to a healthy replica it has not
  tried, counted in ``usage.n_failovers`` (and ``usage.n_retries``); when none is left it
  waits the backoff and tries again, ``max_retries`` retries in all. A read returns the one
  answer that arrived, so no read is lost or scored twice.

``max_concurrency`` bounds the reads in flight *per replica*; ``requests_per_minute`` is one
limit for the whole verifier (an API quota).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backend_options import OpenAIOptions
from ..errors import BackendError, BackendRefusedError, BackendUnavailableError
from .base import BackendUsage, ChatPrompt
from .transport import RateLimiter, RetryableError, parse_retry_after

__all__ = ["Replica", "ReplicaSet", "Router", "affinity_key", "replica_urls"]

logger = logging.getLogger(__name__)

_START_IT = "; start it or fix verifier.backend_options.base_url"
"""The fix that ends the message of one replica that does not answer."""

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
TIMEOUTS_TO_TAKE_OUT = 2
"""Consecutive read timeouts on one replica that take it out until a probe read answers."""
_CANDIDATE_MARKERS = ("<response", "<trajectory", "Answer:")


def replica_urls(base_url: str | Sequence[str] | None) -> tuple[str, ...]:
    """The replica URLs of ``verifier.backend_options.base_url`` (one string, a comma-separated string or a list).

    >>> replica_urls("http://a:8000/v1/")
    ('http://a:8000/v1',)
    >>> replica_urls(["http://a/v1", "http://b/v1"])
    ('http://a/v1', 'http://b/v1')
    """
    if not base_url:
        return ()
    items = base_url.split(",") if isinstance(base_url, str) else list(base_url)
    return tuple(str(u).strip().rstrip("/") for u in items if str(u).strip())


def affinity_key(prompt: ChatPrompt) -> str:
    """A hash of the prompt prefix the reads of one group share (the part before the candidate).

    Every turn but the last is hashed whole; the last turn up to its first
    ``<response>``, ``<trajectory>`` or ``Answer:`` marker (the pointwise, progress and
    answer-match prompts put the candidate after them), or whole when it has none.

    Returns:
        16 hex digits.
    """
    *head, last = prompt.messages or ({"role": "", "content": ""},)
    text = str(last.get("content", ""))
    cut = min((i for m in _CANDIDATE_MARKERS if (i := text.find(m)) >= 0), default=len(text))
    h = hashlib.blake2b(digest_size=8)
    for m in head:
        h.update(f"{m.get('role')}\x1f{m.get('content')}\x1e".encode())
    h.update(text[:cut].encode())
    return h.hexdigest()


def _weight(key: str, url: str) -> int:
    digest = hashlib.blake2b(f"{key}|{url}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(eq=False)
class Replica:
    """One server and its counters.

    Attributes:
        url: base URL (``http://host:port/v1``).
        healthy: False while taken out (connection lost or failed health check).
        load: reads assigned and not finished (in flight or waiting for a slot).
        n_requests: requests sent to it.
        n_failures: requests that failed on it (any retryable or fatal error).
        n_taken_out: times it was taken out.
        n_timeouts: consecutive reads that timed out on it (0 after a read answers).
        probe: True while it is out for timeouts: only a read that answers puts it back.
    """

    url: str
    healthy: bool = True
    load: int = 0
    n_requests: int = 0
    n_failures: int = 0
    n_taken_out: int = 0
    n_timeouts: int = 0
    probe: bool = False
    slots: asyncio.Semaphore | None = field(default=None, repr=False)

    def as_dict(self) -> dict[str, Any]:
        keys = ("url", "healthy", "load", "n_requests", "n_failures", "n_taken_out", "n_timeouts")
        return {k: getattr(self, k) for k in keys}


class ReplicaSet:
    """The replicas and the choice of one for a read (no I/O; used on one event loop).

    Args:
        urls: base URLs, at least one.
        max_imbalance: reads the preferred replica may hold beyond the least-loaded one
            before a read leaves it, >= 0.
    """

    def __init__(self, urls: Sequence[str], max_imbalance: int):
        if not urls:
            raise ValueError("at least one replica URL is needed")
        self.replicas = [Replica(u) for u in urls]
        self.max_imbalance = int(max_imbalance)

    def __len__(self) -> int:
        return len(self.replicas)

    def pick(self, key: str | None, exclude: Sequence[Replica] = ()) -> Replica:
        """The replica for a read with affinity ``key``, avoiding ``exclude`` where possible.

        Healthy replicas not in ``exclude`` first; else any not in ``exclude``; else any (a
        read always goes somewhere, and its failure or success is the news).
        """
        pool = [r for r in self.replicas if r.healthy and r not in exclude]
        pool = pool or [r for r in self.replicas if r not in exclude] or self.replicas
        least = min(pool, key=lambda r: r.load)
        if key is None or len(pool) == 1:
            return least
        preferred = max(pool, key=lambda r: _weight(key, r.url))
        return least if preferred.load - least.load > self.max_imbalance else preferred

    def has_other(self, tried: Sequence[Replica]) -> bool:
        """Whether a healthy replica outside ``tried`` is left."""
        return any(r.healthy and r not in tried for r in self.replicas)

    def take_out(self, replica: Replica, why: str) -> None:
        if replica.healthy and len(self.replicas) > 1:
            replica.healthy = False
            replica.n_taken_out += 1
            logger.warning("verifier replica %s taken out: %s", replica.url, why)

    def put_back(self, replica: Replica) -> None:
        if not replica.healthy:
            replica.healthy = True
            logger.warning("verifier replica %s is healthy again and rejoins", replica.url)


class Router:
    """HTTP to a :class:`ReplicaSet`: one ``httpx`` client, per-replica slots, retries, health.

    Lives on the backend's private event loop (create and call it there).

    Args:
        options: the backend's :class:`~densereward.backend_options.OpenAIOptions`; uses
            ``base_url``, ``max_concurrency`` (per replica), ``requests_per_minute``,
            ``timeout_s``, ``max_retries``, ``api_key_env``.
        usage: the backend's counters (``n_calls``, ``n_retries``, ``n_failovers``,
            ``n_failures``, tokens).
        headers: sent with every request (the ``Authorization`` header).
        redact: removes secrets from text that goes into messages and logs.
        wait_s: ``(attempt, error) -> seconds`` of backoff before retry ``attempt`` (1-based).
        name: the backend's name, for messages.
        max_imbalance: see :class:`ReplicaSet`; ``None`` = ``max_concurrency``.
        health_interval_s: seconds between health checks of each replica (lists only).
        health_timeout_s: timeout of one health check, seconds.
    """

    def __init__(
        self,
        options: OpenAIOptions,
        usage: BackendUsage,
        *,
        headers: Mapping[str, str],
        redact: Callable[[str], str],
        wait_s: Callable[[int, BaseException | None], float],
        name: str,
        max_imbalance: int | None = None,
        health_interval_s: float = 5.0,
        health_timeout_s: float = 5.0,
    ):
        import httpx

        self.options = options
        self.usage = usage
        self.redact = redact
        self.wait_s = wait_s
        self.name = name
        urls = replica_urls(options.base_url)
        imbalance = options.max_concurrency if max_imbalance is None else max_imbalance
        self.set = ReplicaSet(urls, imbalance)
        self.health_interval_s = float(health_interval_s)
        self.health_timeout_s = float(health_timeout_s)
        n = options.max_concurrency * len(urls)
        self.client = httpx.AsyncClient(
            headers=dict(headers),
            timeout=httpx.Timeout(options.timeout_s),
            limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
        )
        for r in self.set.replicas:
            r.slots = asyncio.Semaphore(options.max_concurrency)
        self.limiter = RateLimiter(options.requests_per_minute)
        self.model: str | None = None  # the served model every replica must list (start())
        self._health_task: asyncio.Task | None = None

    @property
    def replicas(self) -> list[Replica]:
        return self.set.replicas

    # -------------------------------------------------------------- health

    async def check(self, replica: Replica, timeout_s: float) -> list[Any]:
        """``GET {url}/models``; the listed models.

        Raises:
            BackendUnavailableError: naming the URL, when it does not answer 200 with JSON.
        """
        import httpx

        url = f"{replica.url}/models"
        try:
            resp = await self.client.get(url, timeout=timeout_s)
        except httpx.HTTPError as e:
            raise BackendUnavailableError(
                f"verifier server at {replica.url} is not reachable ({type(e).__name__}: "
                f"{self.redact(str(e)) or 'no answer'}){_START_IT}"
            ) from None
        if resp.status_code in (401, 403):
            raise BackendUnavailableError(
                f"verifier server at {replica.url} refused the credentials (HTTP {resp.status_code}); "
                f"check the key in ${self.options.api_key_env}"
            )
        if resp.status_code != 200:
            raise BackendUnavailableError(
                f"verifier server at {replica.url}: GET {url} returned HTTP {resp.status_code}"
            )
        try:
            data = resp.json()
        except ValueError:
            raise BackendUnavailableError(
                f"verifier server at {replica.url}: GET {url} did not return JSON"
            ) from None
        models = list(data.get("data") or []) if isinstance(data, Mapping) else []
        if not _serves(models, self.model):
            raise BackendUnavailableError(
                f"verifier server at {replica.url} serves {_ids(models) or 'no model'}, not "
                f"{self.model!r}"
            )
        return models

    async def probe(self, replica: Replica) -> None:
        """One read of one token within ``timeout_s``: does the engine behind the API answer?

        Raises:
            BackendUnavailableError: naming the URL, when it does not.
        """
        import httpx

        payload = {
            "model": self.model,
            "messages": [{"role": "user", "content": "Say 1."}],
            "max_tokens": 1,
            "temperature": 0.0,
        }
        try:
            resp = await self.client.post(f"{replica.url}/chat/completions", json=payload)
        except httpx.HTTPError as e:
            raise BackendUnavailableError(
                f"probe read on {replica.url} failed ({type(e).__name__})"
            ) from None
        if resp.status_code != 200:
            raise BackendUnavailableError(f"probe read on {replica.url}: HTTP {resp.status_code}")

    async def start(self, timeout_s: float, model: str | None = None) -> list[Any]:
        """Check every replica once; the models of the first healthy one.

        Replicas that fail, or do not list ``model`` (``None``: the first model of the first
        replica that answers, which every replica that answers must list), start taken out
        (with a warning) and rejoin when a later check passes. Starts the periodic checks
        when there is more than one replica.

        Raises:
            BackendUnavailableError: when no replica answers, none serves the model, or
                ``model`` is ``None`` and the replicas serve different models (naming what each
                serves).
        """
        results = await asyncio.gather(
            *(self.check(r, timeout_s) for r in self.replicas), return_exceptions=True
        )
        for res in results:
            if isinstance(res, BaseException) and not isinstance(res, BackendUnavailableError):
                raise res
        answered = [res for res in results if not isinstance(res, BaseException)]
        if not answered and len(results) == 1:
            raise results[0]  # type: ignore[misc]
        if not answered:  # every one named, not only the first
            raise BackendUnavailableError(
                f"none of the {len(results)} verifier servers answered: "
                + "; ".join(str(res).removesuffix(_START_IT) for res in results)
                + "; start them or fix verifier.backend_options.base_url"
            )
        listed = [ids for ids in map(_ids, answered) if ids]
        if model is None and listed and not all(listed[0][0] in ids for ids in listed):
            raise BackendUnavailableError(
                "the verifier replicas serve different models ("
                + "; ".join(
                    f"{r.url}: {_ids(res)}"
                    for r, res in zip(self.replicas, results, strict=True)
                    if not isinstance(res, BaseException)
                )
                + "); set verifier.model to the one to read, or list only its replicas"
            )
        self.model = model or (listed[0][0] if listed else None)
        serving: list[Any] | None = None
        why: list[str] = []
        for r, res in zip(self.replicas, results, strict=True):
            if not isinstance(res, BaseException) and not _serves(res, self.model):
                res = BackendUnavailableError(
                    f"verifier server at {r.url} serves {_ids(res)}, not {self.model!r}"
                )
            if isinstance(res, BaseException):
                self.set.take_out(r, str(res))
                why.append(str(res))
            elif serving is None:
                serving = res
        if serving is None:
            raise BackendUnavailableError(
                f"no verifier server serves {self.model!r}: {'; '.join(why)} (set verifier.model "
                "to the served name, or fix verifier.backend_options.base_url)"
            )
        if len(self.replicas) > 1:
            self._health_task = asyncio.get_running_loop().create_task(self._health_loop())
        return serving

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval_s)
            results = await asyncio.gather(
                *(self.check(r, self.health_timeout_s) for r in self.replicas),
                return_exceptions=True,
            )
            for r, res in zip(self.replicas, results, strict=True):
                if isinstance(res, BaseException):
                    self.set.take_out(r, f"health check failed: {res}")
                elif r.probe:  # out for read timeouts: the engine must answer a read
                    try:
                        await self.probe(r)
                    except BackendUnavailableError as e:
                        logger.info("%s: %s; stays out", self.name, e)
                        continue
                    r.probe, r.n_timeouts = False, 0
                    self.set.put_back(r)
                else:
                    self.set.put_back(r)

    # -------------------------------------------------------------- requests

    async def post(self, path: str, payload: Mapping[str, Any], key: str | None = None) -> dict:
        """POST JSON to one replica, failing over and retrying as the module docstring says.

        Args:
            path: e.g. ``/chat/completions``.
            payload: the JSON body.
            key: affinity key (:func:`affinity_key`), or ``None``.

        Returns:
            The decoded answer (a dict with a non-empty ``choices`` list).

        Raises:
            BackendError: on a non-retryable HTTP error, or when the retries are exhausted.
        """
        tried: list[Replica] = []
        n_backoff = 0
        attempt = 0
        while True:
            replica = self.set.pick(key, tried)
            try:
                return await self._post_once(replica, path, payload)
            except _TakenOut:  # queued for a replica that left: move, costs no retry
                self.usage.n_failovers += 1
                tried.append(replica)
                continue
            except RetryableError as e:
                replica.n_failures += 1
                replica.n_timeouts = replica.n_timeouts + 1 if e.timed_out else 0
                if e.lost:
                    self.set.take_out(replica, self.redact(str(e)))
                elif replica.n_timeouts >= TIMEOUTS_TO_TAKE_OUT and len(self.replicas) > 1:
                    replica.probe = True
                    self.set.take_out(
                        replica,
                        f"{replica.n_timeouts} reads in a row timed "
                        "out (its engine may hang while its API answers)",
                    )
                tried.append(replica)
                if attempt == self.options.max_retries:
                    self.usage.n_failures += 1
                    raise BackendError(
                        f"{self.name} backend: POST {replica.url}{path} failed after "
                        f"{self.options.max_retries} retries: {self.redact(str(e))}"
                    ) from None
                attempt += 1
                self.usage.n_retries += 1
                if self.set.has_other(tried):
                    self.usage.n_failovers += 1
                    logger.info(
                        "%s: read failed on %s (%s); failing over", self.name, replica.url, e
                    )
                    continue
                tried.clear()
                n_backoff += 1
                logger.warning(
                    "%s: retry %d/%d of POST %s after %s",
                    self.name,
                    attempt,
                    self.options.max_retries,
                    path,
                    self.redact(str(e)),
                )
                await asyncio.sleep(self.wait_s(n_backoff, e))
            except BackendError:
                replica.n_failures += 1
                self.usage.n_failures += 1
                raise

    async def _post_once(
        self, replica: Replica, path: str, payload: Mapping[str, Any]
    ) -> dict[str, Any]:
        import httpx

        url = f"{replica.url}{path}"
        replica.load += 1
        try:
            assert replica.slots is not None
            async with replica.slots:
                if not replica.healthy and self.set.has_other([replica]):
                    raise _TakenOut
                await self.limiter.wait()
                self.usage.n_calls += 1
                replica.n_requests += 1
                try:
                    resp = await self.client.post(url, json=payload)
                except httpx.TimeoutException as e:
                    raise RetryableError(
                        f"timed out after {self.options.timeout_s:g} s ({type(e).__name__})",
                        timed_out=True,
                    ) from None
                except httpx.TransportError as e:
                    raise RetryableError(
                        f"connection error ({type(e).__name__}: {self.redact(str(e))})", lost=True
                    ) from None
        finally:
            replica.load -= 1
        replica.n_timeouts = 0  # it answered
        if resp.status_code != 200:
            detail = self.redact(resp.text)[:300]
            msg = f"HTTP {resp.status_code} from {url}: {detail}"
            if resp.status_code == 404 and self.set.has_other([replica]):
                # the model is gone from this replica (restarted with another): the others serve it
                raise RetryableError(msg, lost=True)
            if resp.status_code in RETRY_STATUS:
                raise RetryableError(msg, parse_retry_after(resp.headers.get("Retry-After")))
            if resp.status_code in (401, 403):
                msg += f" (check the key in ${self.options.api_key_env})"
            raise BackendRefusedError(msg, status=resp.status_code, detail=detail)
        try:
            data = json.loads(resp.content)
        except ValueError:
            raise RetryableError(
                f"malformed JSON from {url}: {self.redact(resp.text)[:120]!r}"
            ) from None
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("choices"), list)
            or not data["choices"]
        ):
            raise RetryableError(
                f"response from {url} has no choices: {self.redact(resp.text)[:120]!r}"
            )
        usage = data.get("usage") or {}
        self.usage.n_prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.usage.n_completion_tokens += int(usage.get("completion_tokens") or 0)
        return data

    async def aclose(self) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
            with _suppress_cancel():
                await self._health_task
        await self.client.aclose()


def _ids(models: Sequence[Any]) -> list[str]:
    """The ``id`` of each model a ``/models`` answer lists."""
    return [str(m.get("id")) for m in models if isinstance(m, Mapping) and m.get("id")]


def _serves(models: Sequence[Any], model: str | None) -> bool:
    """Whether a ``/models`` answer lists ``model`` (a server that lists none cannot be checked)."""
    ids = _ids(models)
    return model is None or not ids or model in ids


class _TakenOut(Exception):
    """A read waited for a slot on a replica that was taken out meanwhile."""


def _suppress_cancel():
    import contextlib

    return contextlib.suppress(asyncio.CancelledError, Exception)
