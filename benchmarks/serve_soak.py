"""Soak test of ``densereward serve`` (issue 40): what a reward service should pass before
anyone trains on it.

Two scripted OpenAI-compatible verifier replicas (``tests/servers.py``, in this process) sit
behind ``densereward serve`` (a real subprocess, ``python -m densereward.cli serve``), and a
bounded load of the three client kinds runs against it for ``--minutes`` (default 10):

* **OpenRLHF** (``--openrlhf-clients``): ``POST /get_reward`` as
  ``openrlhf/utils/agent.py`` (``_fetch_rewards_via_http``, OpenRLHF 3c3be62) sends it: a new
  ``aiohttp`` session per request, 5 tries 1 s apart, ``raise_for_status``;
* **slime** (``--slime-clients``): ``POST /slime`` as ``slime/rollout/rm_hub/__init__.py``
  (``remote_rm``, slime 624b824) sends it: one shared ``aiohttp`` session (limit 64), 10 tries
  with backoff ``min(2**attempt, 30) + U(0, 1)`` s; half the clients ask ``?details=1``;
* **verl** (``--verl-clients``): ``verl_reward.compute_score_batch`` itself (``--verl-batch``
  items a call, in a thread, its own retries).

Every request names its answer: response ``k`` says ``The answer is k.`` and the scripted
verifier reads the score letter ``k mod 20`` (dense reward, G = 20: reward ``(k mod 20) / 19``);
one response in seven says ``ABSTAIN`` instead and gets no score token (an abstention: reward
``serve.abstain_reward`` = -1, flagged). Faults injected on a schedule over the run:

* replica 1 killed at 15 % of the run and restarted on its port at 25 %; replica 0 at 70 / 80 %;
* the server sent SIGTERM at 50 %, and started again on its port as soon as it has exited
  (the *restart window*: from the signal until the new server answers ``/health``, plus 1 s);
* every ``--fault-interval-s``, one of: a body that is not JSON, nested 40 deep, with a lone
  surrogate, of wrong types, with more than ``serve.max_items`` items, over
  ``serve.max_body_bytes`` (with a Content-Length, and chunked without one), a bad slime
  ``?details`` value, lengths that disagree; or a client that disconnects (mid-body, right
  after sending a whole request, or before sending anything).

Counted for every request: answered correctly (the reward and its abstention flag are the
request's own), answered wrongly, refused with a 4xx, lost (no answer after the client's own
retries, or a connection error outside the restart window), gave up in the restart (every try
fell inside a restart window longer than the client's retries: OpenRLHF's span 4 s, so a
restart slowed past that on a loaded machine), and 5xx (any attempt answered 5xx, even one the
client retried); the invalid bodies must get the 4xx they deserve. p50 / p99
latency (first attempt to answer, retries included) and the server's RSS over time (sampled
from ``/proc``; growth = median of the last third minus median of the first third of each
server process's samples) are reported. The server-side statuses come from ``/metrics``,
scraped just before each SIGTERM: what the drain answers after that the clients count. Writes ``--json`` (default
``docs/figures/serve_soak.json``), prints a markdown table, and exits 1 when a target is missed
(0 lost, 0 5xx, 0 wrong, every invalid body its 4xx, no traceback in the server's log).

Run: ``python benchmarks/serve_soak.py --minutes 10``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from servers import Fault, MisbehavingServer, free_port  # noqa: E402

LETTERS = "ABCDEFGHIJKLMNOPQRST"
_ID = re.compile(r"The answer is (\d+)\.")
ABSTAIN_REWARD = -1.0
MAX_ITEMS = 64
MAX_BODY = 64 * 1024
HEADER = "X-Densereward-Abstained"


def _answer(body: dict) -> list[tuple[str, float]]:
    """The scripted verifier: letter ``k mod 20`` for ``The answer is k.``, none for ABSTAIN."""
    users = [str(m.get("content", "")) for m in body["messages"] if m.get("role") == "user"]
    if "ABSTAIN" in users[-1]:
        return [("zebra", -0.01)]
    return [(LETTERS[int(_ID.findall(users[-1])[-1]) % 20], -0.01)]


def _want(k: int) -> tuple[float, bool]:
    """The reward and abstention flag request ``k`` must get."""
    return (ABSTAIN_REWARD, True) if k % 7 == 3 else ((k % 20) / 19, False)


def _text(k: int) -> str:
    return "ABSTAIN" if k % 7 == 3 else f"The answer is {k}."


# ----------------------------------------------------------------------------- bookkeeping


class Tally:
    """Outcomes per client kind, attempts' 5xx and connection errors, and the restart windows."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.outcomes: dict[str, Counter] = defaultdict(Counter)
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.windows: list[list[float]] = []  # [start, end] seconds since t0; end inf while open
        self.errors: list[dict[str, Any]] = []  # the first few unexplained failures, for the report
        self.lock = threading.Lock()
        self._next = 0

    def now(self) -> float:
        return time.monotonic() - self.t0

    def next_id(self) -> int:
        with self.lock:
            self._next += 1
            return self._next

    def explained(self, t: float) -> bool:
        return any(a <= t <= b for a, b in self.windows)

    def count(self, kind: str, what: str, n: int = 1) -> None:
        with self.lock:
            self.outcomes[kind][what] += n

    def connection_error(self, kind: str, error: BaseException) -> None:
        t = self.now()
        inside = self.explained(t)
        self.count(kind, "conn_errors_in_restart" if inside else "conn_errors_outside")
        if not inside:
            self.note(kind, f"connection error at {t:.1f} s: {type(error).__name__}: {error}")

    def note(self, kind: str, what: str) -> None:
        with self.lock:
            if len(self.errors) < 50:
                self.errors.append({"kind": kind, "t": round(self.now(), 2), "what": what[:300]})

    def done(self, kind: str, t_start: float, ok: bool | str | None, detail: str = "") -> None:
        """One valid request finished: ``ok`` True (right), False (wrong), None (lost), or
        ``"refused_4xx"`` (the server refused it)."""
        what = ok if isinstance(ok, str) else {True: "correct", False: "wrong", None: "lost"}[ok]
        if what == "lost" and self.explained(self.now()):
            what = "gave_up_in_restart"  # every try fell in a restart longer than the retries
        self.count(kind, what)
        if ok is True:
            with self.lock:
                self.latencies[kind].append(time.monotonic() - t_start)
        elif detail:
            self.note(kind, f"{what}: {detail}")


# ----------------------------------------------------------------------------- the processes


class Replicas:
    """Two scripted verifier replicas that can be killed and restarted on their ports."""

    def __init__(self, capacity: int, latency_s: float):
        self.capacity, self.latency_s = capacity, latency_s
        self.servers = [self._start(0) for _ in range(2)]
        self.urls = [s.base_url for s in self.servers]

    def _start(self, port: int) -> MisbehavingServer:
        fault = Fault("stall", delay_s=self.latency_s)
        server = MisbehavingServer(default=fault, capacity=self.capacity, answer=_answer, port=port)
        return server.__enter__()

    def kill(self, i: int) -> None:
        self.servers[i].kill()

    def restart(self, i: int) -> None:
        self.servers[i] = self._start(self.servers[i].port)

    def forget(self) -> None:
        """Drop the servers' request records (they would grow for the whole run)."""
        for s in self.servers:
            s.requests, s.answered = [], []

    def close(self) -> None:
        for s in self.servers:
            s.__exit__(None, None, None)


class Server:
    """``densereward serve`` as a subprocess on a fixed port; its RSS, logs and /metrics."""

    def __init__(self, urls: list[str], workdir: Path, shutdown_timeout_s: float):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "serve.yaml"
        self.log = workdir / "serve.log"
        base = ", ".join(urls)
        self.config.write_text(
            "reward: {type: dense, track: false, use_async: true, reference_guided: false}\n"
            "verifier: {backend: openai, granularity: 20, calibrate: false, backend_options: "
            f"{{base_url: [{base}], max_concurrency: 8, health_interval_s: 1, timeout_s: 10}}}}\n"
            f"serve: {{require_labels: false, abstain_reward: {ABSTAIN_REWARD}, max_items: "
            f"{MAX_ITEMS}, max_body_bytes: {MAX_BODY}, shutdown_timeout_s: {shutdown_timeout_s}}}\n"
        )
        self.shutdown_timeout_s = shutdown_timeout_s
        self.proc: subprocess.Popen | None = None
        self.incarnation = 0
        self.statuses: Counter = Counter()  # server-side request statuses, over incarnations
        self.exit_codes: list[int] = []

    def start(self) -> float:
        """Start and wait for ``/health``; the seconds it took."""
        t0 = time.monotonic()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO / "src")}
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "densereward.cli",
                    "serve",
                    "--config",
                    str(self.config),
                    "--port",
                    str(self.port),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self.incarnation += 1
        while time.monotonic() - t0 < 120:
            if self.proc.poll() is not None:
                raise RuntimeError(f"densereward serve exited {self.proc.returncode}: {self.log}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as r:
                    if r.status == 200:
                        return time.monotonic() - t0
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("densereward serve did not answer /health in 120 s")

    def rss_mb(self) -> float | None:
        try:
            text = Path(f"/proc/{self.proc.pid}/status").read_text()
        except (OSError, AttributeError):
            return None
        found = re.search(r"VmRSS:\s+(\d+) kB", text)
        return int(found.group(1)) / 1024 if found else None

    def scrape(self) -> Counter:
        """This incarnation's ``densereward_requests_total`` by status."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as r:
            text = r.read().decode()
        out: Counter = Counter()
        for m in re.finditer(
            r'densereward_requests_total\{[^}]*status="(\d+)"\} ([0-9.e+]+)', text
        ):
            out[m.group(1)] += int(float(m.group(2)))
        return out

    def stop(self) -> int:
        """SIGTERM; wait for the exit (its status)."""
        assert self.proc is not None
        with contextlib.suppress(OSError, urllib.error.URLError):
            self.statuses.update(self.scrape())
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=self.shutdown_timeout_s + 30)
        self.exit_codes.append(rc)
        return rc


# ----------------------------------------------------------------------------- the clients


async def _response(kind: str, r: Any, tally: Tally) -> tuple[str, Any, str | None]:
    """``(what, JSON body or message, the abstention header)`` of an aiohttp response; what is
    ``ok``, ``refused_4xx`` or ``5xx`` (counted: the client tries again)."""
    if r.status < 400:
        return "ok", await r.json(), r.headers.get(HEADER)
    text = f"{r.status}: {await r.text()}"
    if r.status < 500:
        return "refused_4xx", text, None
    tally.count(kind, "5xx")
    tally.note(kind, text)
    return "5xx", text, None


def _openrlhf_payload(c: int, k: int) -> dict[str, Any]:
    prompt = (
        f"<|im_start|>user\nProblem o{c}: what is the number?<|im_end|>\n<|im_start|>assistant\n"
    )
    return {"query": [f"{prompt}{_text(k)}<|im_end|>"], "prompts": [prompt], "labels": [None]}


async def openrlhf_client(c: int, url: str, tally: Tally, stop: asyncio.Event) -> None:
    """OpenRLHF's ``_post_request``: a new session per try, 5 tries, 1 s apart."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=180)
    while not stop.is_set():
        k = tally.next_id()
        want, flag = _want(k)
        t0, result, detail = time.monotonic(), None, ""
        for _ in range(5):
            try:
                async with (
                    aiohttp.ClientSession(timeout=timeout) as session,
                    session.post(f"{url}/get_reward", json=_openrlhf_payload(c, k)) as r,
                ):
                    status, got, header = await _response("OpenRLHF", r, tally)
                if status == "refused_4xx":  # (OpenRLHF would try it again: a bug here either way)
                    result, detail = status, got
                    break
                if status == "ok":
                    result = (
                        got["rewards"] == got["scores"]
                        and len(got["rewards"]) == 1
                        and abs(got["rewards"][0] - want) < 1e-3
                        and got["extra_logs"]["densereward_abstained"] == [float(flag)]
                        and header == str(int(flag))
                    )
                    detail = f"k={k}: {got} header {header}"
                    break
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                tally.connection_error("OpenRLHF", e)
            await asyncio.sleep(1)
        tally.done("OpenRLHF", t0, result, detail or f"k={k}: 5 tries failed")


async def slime_client(c: int, url: str, tally: Tally, stop: asyncio.Event, session: Any) -> None:
    """slime's ``remote_rm``: the shared session, 10 tries, exponential backoff."""
    import aiohttp

    details = c % 2 == 1
    path = f"{url}/slime?details=1" if details else f"{url}/slime"
    while not stop.is_set():
        k = tally.next_id()
        want, flag = _want(k)
        payload = {
            "prompt": f"Problem s{c}: what is the number?",
            "response": _text(k),
            "label": None,
        }
        t0, result, detail = time.monotonic(), None, ""
        for attempt in range(10):
            try:
                async with session.post(path, json=payload) as r:
                    status, got, header = await _response("slime", r, tally)
                if status == "refused_4xx":
                    result, detail = status, got
                    break
                if status == "ok":
                    if details:
                        ok = got["abstained"] is flag and abs(got["reward"] - want) < 1e-3
                    else:
                        ok = isinstance(got, float) and abs(got - want) < 1e-3
                    result = ok and header == str(int(flag))
                    detail = f"k={k}: {got} header {header}"
                    break
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                tally.connection_error("slime", e)
            await asyncio.sleep(min(2**attempt, 30) + random.random())
        tally.done("slime", t0, result, detail or f"k={k}: 10 tries failed")


def _observe_urlopen(tally: Tally) -> Any:
    """Count verl_reward's attempts (it retries inside): its 5xx and connection errors. Returns
    the function that puts ``urlopen`` back."""
    real = urllib.request.urlopen

    def observed(*args: Any, **kwargs: Any) -> Any:
        try:
            return real(*args, **kwargs)
        except urllib.error.HTTPError as e:
            if e.code >= 500:
                tally.count("verl", "5xx")
                tally.note("verl", f"{e.code}")
            raise
        except OSError as e:
            if threading.current_thread().name.startswith("verl"):
                tally.connection_error("verl", e)
            raise

    urllib.request.urlopen = observed
    return lambda: setattr(urllib.request, "urlopen", real)


def verl_client(c: int, url: str, tally: Tally, stop: threading.Event, batch: int) -> None:
    """verl's batch reward manager calling ``compute_score_batch`` (the installed module)."""
    from densereward.serve.verl_reward import compute_score_batch

    while not stop.is_set():
        ks = [tally.next_id() for _ in range(batch)]
        t0, result, detail = time.monotonic(), None, ""
        result: bool | str | None
        try:
            got = compute_score_batch(
                ["gsm8k"] * batch,
                [_text(k) for k in ks],
                [None] * batch,
                [{"question": f"Problem v{c}: what is the number?"}] * batch,
                url=url,
                abstain_reward=ABSTAIN_REWARD,
                timeout_s=60,
            )
            wants = [_want(k) for k in ks]
            result = len(got) == batch and all(
                abs(g["score"] - w) < 1e-3 and g["abstained"] == float(f)
                for g, (w, f) in zip(got, wants, strict=True)
            )
            detail = f"ks={ks}: {got}"
        except RuntimeError as e:
            result, detail = ("refused_4xx" if "refused" in str(e) else None), str(e)
        tally.done("verl", t0, result, detail)


# ----------------------------------------------------------------------------- invalid bodies


def _invalid_bodies() -> list[tuple[str, str, bytes | None, int]]:
    """``(name, path, body, expected status)``; body ``None`` = chunked, over the limit."""
    too_many = json.dumps({"query": ["x"] * (MAX_ITEMS + 1)}).encode()
    oversized = json.dumps({"query": ["y" * (MAX_BODY + 1024)]}).encode()
    return [
        ("not JSON", "/get_reward", b"{not json", 400),
        ("nested 40 deep", "/get_reward", b'{"query": ' + b"[" * 40 + b"]" * 40 + b"}", 400),
        ("lone surrogate", "/score", b'{"problems": ["\\ud800"], "responses": ["a"]}', 400),
        ("wrong types", "/get_reward", b'{"query": [1, 2]}', 422),
        ("too many items", "/get_reward", too_many, 413),
        ("oversized", "/slime", oversized, 413),
        ("oversized chunked", "/score", None, 413),
        ("bad details", "/slime?details=maybe", b'{"prompt": "p", "response": "r"}', 422),
        ("lengths disagree", "/score", b'{"problems": ["a", "b"], "responses": ["c"]}', 422),
        ("slime wrong type", "/slime", b'{"prompt": "p", "response": 5}', 422),
    ]


async def _chunks():
    """A body sent chunked, without a Content-Length, that grows past ``max_body_bytes``."""
    yield b'{"problems": ["'
    for _ in range(MAX_BODY // 4096 + 2):
        yield b"z" * 4096


def _disconnect(port: int, how: str) -> None:
    """A client that leaves: mid-body, right after a whole request, or before a byte."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        if how == "mid-body":
            s.sendall(
                b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b'Content-Length: 1000\r\n\r\n{"query": ['
            )
        elif how == "after request":
            body = json.dumps({"problems": ["Problem d"], "responses": ["The answer is 5."]})
            s.sendall(
                f"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
            )
        time.sleep(0.05)


async def fault_client(
    url: str, port: int, tally: Tally, stop: asyncio.Event, every_s: float
) -> None:
    import httpx

    bodies = _invalid_bodies()
    disconnects = ["mid-body", "after request", "before a byte"]
    i = 0
    async with httpx.AsyncClient(timeout=60) as client:
        while not stop.is_set():
            await asyncio.sleep(every_s)
            i += 1
            if i % 4 == 0:  # one in four: a client that leaves
                how = disconnects[(i // 4) % 3]
                try:
                    await asyncio.to_thread(_disconnect, port, how)
                    tally.count("disconnecting clients", "sent")
                except OSError as e:
                    tally.connection_error("disconnecting clients", e)
                continue
            name, path, body, want = bodies[i % len(bodies)]
            for _ in range(5):
                content = body if body is not None else _chunks()  # no Content-Length
                try:
                    r = await client.post(
                        f"{url}{path}",
                        content=content,
                        headers={"Content-Type": "application/json"},
                    )
                except httpx.TransportError as e:
                    tally.connection_error("invalid bodies", e)
                    await asyncio.sleep(1)
                    continue
                if r.status_code == want and "error" in r.text:
                    tally.count("invalid bodies", "refused_4xx")
                else:
                    kind = "5xx" if r.status_code >= 500 else "wrong"
                    tally.count("invalid bodies", kind)
                    tally.note("invalid bodies", f"{name}: {r.status_code} (want {want}) {r.text}")
                break
            else:
                lost = "gave_up_in_restart" if tally.explained(tally.now()) else "lost"
                tally.count("invalid bodies", lost)


# ----------------------------------------------------------------------------- the run


def _quantile(xs: list[float], q: float) -> float:
    if len(xs) < 2:
        return xs[0] if xs else float("nan")
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1]


def _memory(samples: list[tuple[float, int, float]]) -> list[dict[str, Any]]:
    """Per server process: its RSS at the first and last sample, the max, and -- after a warm-up
    of its first quarter of samples -- the growth (median of the last third minus median of the
    first third) and the least-squares slope (MB per minute)."""
    out = []
    for inc in sorted({s[1] for s in samples}):
        ts = [s[0] for s in samples if s[1] == inc]
        rss = [s[2] for s in samples if s[1] == inc]
        skip = len(rss) // 4
        t, y = ts[skip:], rss[skip:]
        third = max(1, len(y) // 3)
        slope = statistics.linear_regression(t, y).slope * 60 if len(set(t)) > 1 else 0.0
        out.append(
            {
                "incarnation": inc,
                "samples": len(rss),
                "first_mb": round(rss[0], 1),
                "max_mb": round(max(rss), 1),
                "last_mb": round(rss[-1], 1),
                "growth_mb": round(statistics.median(y[-third:]) - statistics.median(y[:third]), 1),
                "slope_mb_per_min": round(slope, 2),
            }
        )
    return out


async def _run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import aiohttp

    duration = args.minutes * 60
    tally = Tally()
    restore = _observe_urlopen(tally)
    replicas = Replicas(args.capacity, args.latency_ms / 1000)
    server = Server(replicas.urls, workdir, args.shutdown_timeout_s)
    events: list[dict[str, Any]] = []
    samples: list[tuple[float, int, float]] = []
    try:
        events.append({"t": 0.0, "event": f"server ready in {server.start():.1f} s"})
        tally.t0 = time.monotonic()
        stop, tstop = asyncio.Event(), threading.Event()
        slime_session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=64, enable_cleanup_closed=True),
            timeout=aiohttp.ClientTimeout(total=120),
        )
        clients = [
            openrlhf_client(c, server.url, tally, stop) for c in range(args.openrlhf_clients)
        ]
        clients += [
            slime_client(c, server.url, tally, stop, slime_session)
            for c in range(args.slime_clients)
        ]
        clients.append(fault_client(server.url, server.port, tally, stop, args.fault_interval_s))
        threads = [
            threading.Thread(
                target=verl_client,
                name=f"verl-{c}",
                daemon=True,
                args=(c, server.url, tally, tstop, args.verl_batch),
            )
            for c in range(args.verl_clients)
        ]
        for t in threads:
            t.start()
        tasks = [asyncio.create_task(c) for c in clients]

        async def at(frac: float) -> None:
            await asyncio.sleep(max(0.0, frac * duration - tally.now()))

        async def schedule() -> None:
            for frac, what in (
                (0.15, "kill 1"),
                (0.25, "restart 1"),
                (0.50, "sigterm"),
                (0.70, "kill 0"),
                (0.80, "restart 0"),
            ):
                await at(frac)
                t = tally.now()
                if what == "sigterm":
                    tally.windows.append([t, float("inf")])
                    rc = await asyncio.to_thread(server.stop)
                    took = await asyncio.to_thread(server.start)
                    tally.windows[-1][1] = tally.now() + 1.0
                    events.append(
                        {
                            "t": round(t, 1),
                            "event": f"server SIGTERM: exit {rc}, "
                            f"restarted in {took:.1f} s; window {tally.now() - t:.1f} s",
                        }
                    )
                elif what.startswith("kill"):
                    replicas.kill(int(what[-1]))
                    events.append({"t": round(t, 1), "event": f"replica {what[-1]} killed"})
                else:
                    replicas.restart(int(what[-1]))
                    events.append({"t": round(t, 1), "event": f"replica {what[-1]} restarted"})

        async def sample_rss() -> None:
            while not stop.is_set():
                rss = server.rss_mb()
                if rss is not None:
                    samples.append((round(tally.now(), 1), server.incarnation, rss))
                replicas.forget()
                await asyncio.sleep(args.rss_interval_s)

        sampler = asyncio.create_task(sample_rss())
        await schedule()
        await at(1.0)
        stop.set()
        tstop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=300)
        for t in threads:
            await asyncio.to_thread(t.join, 300)
        await sampler
        await slime_session.close()
        await asyncio.sleep(0.5)  # the disconnected clients' requests finish on the server
        rc = server.stop()
        events.append(
            {"t": round(tally.now(), 1), "event": f"server SIGTERM at the end: exit {rc}"}
        )
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.proc.kill()
        replicas.close()
        restore()
    log = server.log.read_text()
    return {
        "tally": tally,
        "events": events,
        "samples": samples,
        "server_statuses": server.statuses,
        "exit_codes": server.exit_codes,
        "tracebacks": log.count("Traceback"),
        "seconds": tally.now(),
        "windows_s": [round(b - a, 1) for a, b in tally.windows],
    }


def _shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it."""
    path = path.resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _report(args: argparse.Namespace, run: dict[str, Any]) -> dict[str, Any]:
    tally: Tally = run["tally"]
    rows = []
    for kind in ("OpenRLHF", "slime", "verl", "invalid bodies", "disconnecting clients"):
        o = tally.outcomes[kind]
        lat = tally.latencies[kind]
        rows.append(
            {
                "client": f"verl ({args.verl_batch} items a call)" if kind == "verl" else kind,
                "requests": sum(
                    o[k]
                    for k in (
                        "correct",
                        "wrong",
                        "lost",
                        "refused_4xx",
                        "sent",
                        "gave_up_in_restart",
                    )
                ),
                "gave_up_in_restart": o["gave_up_in_restart"],
                "correct": o["correct"],
                "wrong": o["wrong"],
                "refused_4xx": o["refused_4xx"],
                "lost": o["lost"] + o["conn_errors_outside"],
                "5xx": o["5xx"],
                "retried_in_restart": o["conn_errors_in_restart"],
                "p50_ms": round(1000 * statistics.median(lat), 1) if lat else None,
                "p99_ms": round(1000 * _quantile(lat, 99), 1) if lat else None,
            }
        )
    valid = rows[:3]  # OpenRLHF, slime, verl
    memory = _memory(run["samples"])
    statuses = dict(sorted(run["server_statuses"].items()))
    server_5xx = sum(v for k, v in statuses.items() if k.startswith("5"))
    checks = {
        "0 lost": all(r["lost"] == 0 for r in rows),
        # OpenRLHF's client spans 4 s (5 tries 1 s apart): only a longer restart may outlast it
        "no client gave up in a restart shorter than 4 s": all(
            r["gave_up_in_restart"] == 0 for r in rows
        )
        or min(run["windows_s"]) > 4.0,
        "0 5xx": all(r["5xx"] == 0 for r in rows) and server_5xx == 0,
        "0 wrong": all(r["wrong"] == 0 for r in rows),
        "no valid request refused": all(r["refused_4xx"] == 0 for r in valid),
        "every client kind answered": all(r["correct"] > 0 for r in valid),
        "no traceback in the server log": run["tracebacks"] == 0,
        "server exits 0 on SIGTERM": all(rc == 0 for rc in run["exit_codes"]),
    }
    return {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}, "
        f"load average at the end {os.getloadavg()[0]:.1f}",
        "args": {**vars(args), "json": _shown(args.json)},
        "seconds": round(run["seconds"], 1),
        "rows": rows,
        "server_statuses": statuses,
        "events": run["events"],
        "memory": memory,
        "restart_windows_s": run["windows_s"],
        "rss_samples": run["samples"],
        "errors": tally.errors,
        "checks": checks,
        "passed": all(checks.values()),
    }


def _markdown(result: dict[str, Any]) -> str:
    lines = [
        "| client | requests | answered correctly | refused 4xx | lost | 5xx | retried across the restart | gave up in the restart | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        answered = "-" if r["client"] == "disconnecting clients" else r["correct"]
        cells = [
            r["client"],
            r["requests"],
            answered,
            r["refused_4xx"],
            r["lost"],
            r["5xx"],
            r["retried_in_restart"],
            r["gave_up_in_restart"],
            r["p50_ms"] or "-",
            r["p99_ms"] or "-",
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    mem = "; ".join(
        f"process {m['incarnation']}: {m['first_mb']} -> {m['last_mb']} MB (max {m['max_mb']}; "
        f"after warm-up {m['growth_mb']:+} MB, {m['slope_mb_per_min']:+} MB/min; "
        f"{m['samples']} samples)"
        for m in result["memory"]
    )
    lines += [
        "",
        f"{result['date']}, {result['seconds']:.0f} s; {result['machine']}.",
        "Faults: " + "; ".join(f"{e['t']} s {e['event']}" for e in result["events"]) + ".",
        f"Server-side statuses (/metrics): {result['server_statuses']}. Server RSS: {mem}.",
        "Checks: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in result["checks"].items()),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="how long the load runs")
    ap.add_argument("--openrlhf-clients", type=int, default=4)
    ap.add_argument("--slime-clients", type=int, default=4)
    ap.add_argument("--verl-clients", type=int, default=2)
    ap.add_argument("--verl-batch", type=int, default=8, help="items per compute_score_batch call")
    ap.add_argument("--capacity", type=int, default=4, help="reads a replica serves at once")
    ap.add_argument("--latency-ms", type=float, default=20.0, help="per read, at a replica")
    ap.add_argument("--fault-interval-s", type=float, default=0.5)
    ap.add_argument("--rss-interval-s", type=float, default=5.0)
    ap.add_argument("--shutdown-timeout-s", type=float, default=10.0)
    ap.add_argument("--json", type=Path, default=REPO / "docs/figures/serve_soak.json")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="serve_soak_") as tmp:
        run = asyncio.run(_run(args, Path(tmp)))
    result = _report(args, run)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(_markdown(result))
    for e in result["errors"][:10]:
        print(f"  {e['kind']} at {e['t']} s: {e['what']}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
