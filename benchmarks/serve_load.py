"""Load test of ``densereward serve`` on loopback: requests/s, p50/p99 latency, lost and
duplicated rewards, with the verifier on one replica vs two (issue 30 item 4).

A real uvicorn server (in this process, a thread) runs the dense reward (``reward.type:
dense``, the ``openai`` backend, G = 20) over ``verifier.backend_options.base_url`` = one or two replicas;
``--clients`` concurrent clients each send ``--requests`` OpenRLHF requests (one query each,
as OpenRLHF sends them, over ``httpx``). Every response names its request: the response text
carries a number ``k``, and the scripted verifier answers the score letter ``k mod 20``, so a
reward that went to the wrong request, went missing or was read twice shows up. Counted:

* lost: requests without exactly one reward, or whose reward is not their own;
* duplicated: reads the verifier servers answered more than once (each request is one read).

Replicas: by default scripted OpenAI-compatible servers (``tests/servers.py``) that serve at
most ``--capacity`` reads at once with ``--latency-ms`` each, i.e. a model server of fixed
throughput; this measures the reward server, the micro-batching and the routing, not a
model. ``--vllm`` runs real vLLM CPU servers of the embedded SmolLM2-135M instead (then only
lost requests are checked: the model's rewards are not known in advance); on a 2-core machine
two vLLM servers share the cores, so one vs two measures overhead, not a speed-up.

Run: ``python benchmarks/serve_load.py --clients 32 --requests 8``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from servers import Fault, MisbehavingServer, free_port, start_vllm_server  # noqa: E402

LETTERS = "ABCDEFGHIJKLMNOPQRST"
_ID = re.compile(r"The answer is (\d+)\.")


def _answer(body) -> list[tuple[str, float]]:
    users = [m["content"] for m in body["messages"] if m["role"] == "user"]
    k = int(_ID.findall(users[-1])[-1])
    return [(LETTERS[k % 20], -0.01)]


def _serve(base_urls: list[str], args: argparse.Namespace):
    import uvicorn

    from densereward.serve.app import make_app
    from densereward.serve.cli import build_service

    config = {
        "reward": {"type": "dense", "track": False, "reference_guided": False, "use_async": True},
        "verifier": {
            "backend": "openai",
            "granularity": 20,
            "calibrate": False,
            "backend_options": {"base_url": base_urls, "max_concurrency": args.concurrency},
        },
        "serve": {"max_batch": args.max_batch, "batch_wait_ms": args.batch_wait_ms},
    }
    service, close = build_service(config)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            make_app(service, on_close=close),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=30,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{port}", service


async def _load(url: str, args: argparse.Namespace, offset: int) -> tuple[list[float], int]:
    import httpx

    latencies: list[float] = []
    lost = 0
    limits = httpx.Limits(max_connections=args.clients)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:

        async def one_client(c: int) -> None:
            nonlocal lost
            # each client its own problem, as the prompts of a rollout batch (affinity spreads them)
            prompt = f"<|im_start|>user\nProblem {c}: what is the number?<|im_end|>\n<|im_start|>assistant\n"
            for j in range(args.requests):
                k = offset + c * args.requests + j
                payload = {
                    "query": [f"{prompt}The answer is {k}.<|im_end|>"],
                    "prompts": [prompt],
                    "labels": [None],
                }
                t0 = time.perf_counter()
                try:
                    got = (await client.post(f"{url}/get_reward", json=payload)).json()
                except Exception:  # noqa: BLE001 - counted as lost
                    lost += 1
                    continue
                latencies.append(time.perf_counter() - t0)
                rewards = got.get("rewards") or []
                want = (k % 20) / 19
                if len(rewards) != 1 or (not args.vllm and abs(rewards[0] - want) > 1e-3):
                    lost += 1

        await asyncio.gather(*(one_client(c) for c in range(args.clients)))
        return latencies, lost


def _run(base_urls: list[str], args: argparse.Namespace, offset: int) -> dict:
    server, thread, url, service = _serve(base_urls, args)
    try:
        t0 = time.perf_counter()
        latencies, lost = asyncio.run(_load(url, args, offset))
        seconds = time.perf_counter() - t0
    finally:
        server.should_exit = True
        thread.join(timeout=60)
    n = args.clients * args.requests
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [float("nan")] * 99
    return {
        "rps": n / seconds,
        "p50": statistics.median(latencies),
        "p99": q[98],
        "lost": lost,
        "calls": service.n_calls,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=8, help="requests per client")
    ap.add_argument(
        "--capacity", type=int, default=4, help="reads one scripted server serves at once"
    )
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument(
        "--concurrency",
        type=int,
        default=8,
        help="verifier.backend_options.max_concurrency (per replica)",
    )
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--batch-wait-ms", type=float, default=5.0)
    ap.add_argument("--vllm", action="store_true", help="real vLLM CPU servers (embedded SmolLM2)")
    ap.add_argument(
        "--vllm-replicas",
        type=int,
        default=2,
        choices=(1, 2),
        help="with --vllm: start one server (the 1-replica row only) or two",
    )
    args = ap.parse_args()
    rows = {}
    with contextlib.ExitStack() as stack:
        if args.vllm:
            from densereward.backends.default_model import ensure_default_model

            model = ensure_default_model()
            flags = ["--max-logprobs", "40", "-O0"]
            urls = [
                stack.enter_context(start_vllm_server(model, extra_flags=flags)).base_url
                for _ in range(args.vllm_replicas)
            ]
            servers = []
        else:
            fault = Fault("stall", delay_s=args.latency_ms / 1000)
            servers = [
                stack.enter_context(
                    MisbehavingServer(default=fault, capacity=args.capacity, answer=_answer)
                )
                for _ in range(2)
            ]
            urls = [s.base_url for s in servers]
        n = args.clients * args.requests
        rows["1 replica"] = _run(urls[:1], args, 0)
        if len(urls) > 1:
            rows["2 replicas"] = _run(urls, args, n)
        if servers:
            ids = [
                int(
                    _ID.findall([m["content"] for m in b["messages"] if m["role"] == "user"][-1])[
                        -1
                    ]
                )
                for s in servers
                for b in s.answered
            ]
            duplicated = len(ids) - len(set(ids))
            missing = 2 * n - len(set(ids))
        else:
            duplicated = missing = float("nan")
    what = (
        "vLLM CPU (SmolLM2-135M)"
        if args.vllm
        else (
            f"scripted (capacity {args.capacity}, {args.latency_ms:g} ms; ceiling "
            f"{1000 * args.capacity / args.latency_ms:.0f} reads/s per replica)"
        )
    )
    print(
        f"{args.clients} clients x {args.requests} OpenRLHF requests (1 query each) per condition; "
        f"verifier replicas: {what}; max_concurrency {args.concurrency} per replica"
    )
    print(f"{'condition':<12}{'req/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'lost':>6}{'reward calls':>14}")
    for name, r in rows.items():
        print(
            f"{name:<12}{r['rps']:>8.1f}{1000 * r['p50']:>9.1f}{1000 * r['p99']:>9.1f}"
            f"{r['lost']:>6d}{r['calls']:>14d}"
        )
    print(f"verifier reads answered twice: {duplicated}; never answered: {missing}")


if __name__ == "__main__":
    main()
