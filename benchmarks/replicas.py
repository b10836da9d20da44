"""Reads/s of one verifier over one replica vs two, side by side in one run (issue 30 item 1).

The replicas are scripted OpenAI-compatible servers (``tests/servers.py``'s
``MisbehavingServer``) that each serve at most ``--capacity`` requests at once with a fixed
``--latency-ms`` per request: a stand-in for a model server with a fixed throughput
(``capacity / latency``). What this measures is the client side -- the routing, the
per-replica concurrency and the failover of :mod:`densereward.backends.replicas` -- not a
model: on this 2-core machine two vLLM CPU servers share the same two cores, so they
could not show a speed-up.

Workload: ``--groups`` GRPO groups of ``--group-size`` reads (pointwise prompts: one
problem per group, different responses), all sent in one ``next_token_logprobs`` call, so
reads of a group share the prompt prefix and stick to one replica. Conditions, interleaved
over ``--repeats`` rounds (median reported):

* ``1 replica``: ``base_url`` is one server;
* ``2 replicas``: ``base_url`` lists two servers;
* ``2, one killed``: two servers, one killed after a third of the expected run time (its
  in-flight reads fail over; reported with the failover count and lost reads, which must be 0).

Run: ``python benchmarks/replicas.py --groups 16 --group-size 8 --repeats 3``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from servers import Fault, MisbehavingServer  # noqa: E402

from densereward.backends.openai_http import OpenAIBackend  # noqa: E402
from densereward.config import VerifierConfig  # noqa: E402
from densereward.prompts import pointwise_prompt  # noqa: E402
from densereward.scale import ScoreScale  # noqa: E402


def _prompts(groups: int, size: int) -> list:
    scale = ScoreScale.letters(20)
    return [
        pointwise_prompt(scale, f"Problem {g}: what is {g} + {g}?", f"It is {g + i}.", "correct")
        for g in range(groups)
        for i in range(size)
    ]


def _run(urls: list[str], prompts: list, args: argparse.Namespace, kill=None) -> dict:
    options = {"base_url": urls, "max_concurrency": args.concurrency, "timeout_s": 30.0}
    cfg = VerifierConfig(backend="openai", backend_options=options)
    with OpenAIBackend(cfg, retry_base_s=0.01, health_interval_s=1.0) as be:
        timer = None
        expected_s = len(prompts) * args.latency_ms / 1000 / args.capacity / len(urls)
        if kill is not None:
            timer = threading.Timer(expected_s / 3, kill.kill)
            timer.start()
        t0 = time.perf_counter()
        outs = be.next_token_logprobs(prompts, ["T", "S"])
        seconds = time.perf_counter() - t0
        if timer is not None:
            timer.join()
        lost = sum(1 for o in outs if "T" not in o.logprobs)
        return {
            "reads_per_s": len(prompts) / seconds,
            "failovers": be.usage.n_failovers,
            "lost": lost + len(prompts) - len(outs),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--capacity", type=int, default=4, help="requests one server serves at once")
    ap.add_argument("--latency-ms", type=float, default=50.0, help="per-request latency")
    ap.add_argument(
        "--concurrency",
        type=int,
        default=8,
        help="verifier.backend_options.max_concurrency (per replica)",
    )
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    prompts = _prompts(args.groups, args.group_size)
    fault = Fault("stall", delay_s=args.latency_ms / 1000)
    rows: dict[str, list[dict]] = {"1 replica": [], "2 replicas": [], "2, one killed": []}
    for _ in range(args.repeats):
        with (
            MisbehavingServer(default=fault, capacity=args.capacity) as a,
            MisbehavingServer(default=fault, capacity=args.capacity) as b,
        ):
            rows["1 replica"].append(_run([a.base_url], prompts, args))
            rows["2 replicas"].append(_run([a.base_url, b.base_url], prompts, args))
        b = MisbehavingServer(default=fault, capacity=args.capacity).__enter__()
        with MisbehavingServer(default=fault, capacity=args.capacity) as a:
            rows["2, one killed"].append(_run([a.base_url, b.base_url], prompts, args, kill=b))
    ceiling = 1000 * args.capacity / args.latency_ms
    print(
        f"{len(prompts)} reads ({args.groups} groups x {args.group_size}); scripted servers: "
        f"capacity {args.capacity}, latency {args.latency_ms:g} ms (ceiling {ceiling:.0f} reads/s "
        f"per server); max_concurrency {args.concurrency} per replica; median of {args.repeats}"
    )
    print(f"{'condition':<16}{'reads/s':>10}{'failovers':>11}{'lost':>6}")
    for name, runs in rows.items():
        rate = statistics.median(r["reads_per_s"] for r in runs)
        fo = statistics.median(r["failovers"] for r in runs)
        lost = max(r["lost"] for r in runs)
        print(f"{name:<16}{rate:>10.1f}{fo:>11g}{lost:>6d}")


if __name__ == "__main__":
    main()
