"""Share of SAC wall time spent in the verifier reward, with and without each cost lever.

Runs SAC on FetchReach side by side in one process (``densereward.trainers.sac.run``, the
trainer itself, no copies) for ``--steps`` environment steps each:

* ``sparse``: ``configs/sac_fetchreach_sparse.yaml`` (no verifier: the baseline steps/s);
* ``verifier``: ``configs/sac_fetchreach_verifier.yaml`` as shipped (online potential-based
  shaping on the state-only description, ``score_every: 10``, 2 environments scored in one
  batched call, the transformers backend with its kept prefix caches);

and the same verifier config with one lever changed at a time (``--variants``):
``no_prefix_cache`` (``backend_options.prefix_cache_size=0``: no key/value cache kept across
calls), ``float32`` / ``bfloat16`` (the verifier's dtype), ``float32_no_prefix_cache`` (the
verifier as it ran before issue 18 on a CPU), ``score_every_25``,
``n_envs_4`` (4 environments per batched call).

For each run it prints steps/s, the seconds inside the progress function (the wrapper's own
clock, ``VerifierCallStats.seconds``), the verifier share of the learning wall time, the
seconds per verifier call and per scored state, and the other (non-verifier) seconds per
environment step -- the measured limit: the share is ``v / (v + o)`` with ``v`` the verifier
seconds per environment step (seconds per call x calls per step) and ``o`` the rest.

``sac.learning_starts`` is lowered to ``--learning-starts`` (default 100) so that most of the
few hundred steps include SAC's gradient update, as in a long run; evaluation, checkpoints and
W&B are off. Results go to ``<output>/sac_verifier_share.json`` (atomically).

Run: ``HF_HUB_OFFLINE=1 python benchmarks/sac_verifier_share.py --steps 400 --output runs/share``
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
VARIANTS: dict[str, list[str]] = {
    "verifier": [],
    "no_prefix_cache": ["verifier.backend_options={prefix_cache_size: 0}"],
    "float32": ["verifier.backend_options.dtype=float32"],
    "float32_no_prefix_cache": [
        "verifier.backend_options.dtype=float32",
        "verifier.backend_options={prefix_cache_size: 0}",
    ],
    "bfloat16": ["verifier.backend_options.dtype=bfloat16"],
    "score_every_25": ["reward.score_every=25"],
    "n_envs_4": ["env.n_envs=4"],
}
"""Overrides of ``configs/sac_fetchreach_verifier.yaml`` per variant (one lever each)."""


def one_run(config_path: Path, overrides: Sequence[str], out: Path) -> dict[str, Any]:
    """Run the SAC trainer on ``config_path`` + ``overrides``; the timing summary."""
    from densereward.config import apply_overrides, load_yaml
    from densereward.trainers.sac import run

    config = apply_overrides(copy.deepcopy(load_yaml(config_path)), list(overrides))
    t0 = time.perf_counter()
    summary = run(config, output_dir=out)
    total = time.perf_counter() - t0
    steps = summary["env_steps"]
    seconds = summary["seconds"]
    vs = summary.get("verifier_stats") or {}
    v_s = float(vs.get("seconds", 0.0))
    n_calls = int(vs.get("n_calls", 0))
    n_scored = int(vs.get("n_scored", 0))
    return {
        "overrides": list(overrides),
        "env_steps": steps,
        "learn_seconds": seconds,
        "total_seconds_with_setup": total,
        "steps_per_second": summary["steps_per_second"],
        "verifier_seconds": v_s,
        "verifier_share": v_s / seconds if seconds > 0 else float("nan"),
        "verifier_calls": n_calls,
        "verifier_queries": int(vs.get("n_queries", 0)),
        "verifier_cache_hits": int(vs.get("n_cache_hits", 0)),
        "verifier_scored": n_scored,
        "seconds_per_call": v_s / n_calls if n_calls else None,
        "seconds_per_scored_state": v_s / n_scored if n_scored else None,
        "verifier_seconds_per_env_step": v_s / steps if steps else None,
        "other_seconds_per_env_step": (seconds - v_s) / steps if steps else None,
        "engine_stats": summary.get("verifier_engine_stats"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=400, help="environment steps per run")
    ap.add_argument("--learning-starts", type=int, default=100)
    ap.add_argument(
        "--variants",
        nargs="+",
        default=["verifier", "no_prefix_cache", "score_every_25"],
        choices=sorted(VARIANTS),
        help="verifier runs besides the sparse baseline",
    )
    ap.add_argument("--output", type=Path, required=True, help="directory for the JSON result")
    args = ap.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("WANDB_MODE", "disabled")
    from densereward.io import atomic_write_json, to_jsonable

    common = [
        f"training.total_timesteps={args.steps}",
        f"sac.learning_starts={args.learning_starts}",
        "training.eval_every=0",
        "training.checkpoint_every=0",
        f"training.curve_every={args.steps}",
        "training.wandb=false",
    ]
    runs: list[tuple[str, Path, list[str]]] = [
        ("sparse", REPO / "configs" / "sac_fetchreach_sparse.yaml", common)
    ]
    runs += [
        (name, REPO / "configs" / "sac_fetchreach_verifier.yaml", common + VARIANTS[name])
        for name in args.variants
    ]
    args.output.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"steps": args.steps, "learning_starts": args.learning_starts}
    with tempfile.TemporaryDirectory(prefix="sac-share-") as tmp:
        for name, path, overrides in runs:
            r = one_run(path, overrides, Path(tmp) / name)
            result[name] = r
            print(
                f"{name:16s} {r['steps_per_second']:7.1f} steps/s  verifier "
                f"{r['verifier_seconds']:6.1f} s of {r['learn_seconds']:6.1f} s "
                f"({100 * r['verifier_share']:4.1f} %)  calls {r['verifier_calls']}",
                flush=True,
            )
            atomic_write_json(args.output / "sac_verifier_share.json", to_jsonable(result))
    base = result["sparse"]["steps_per_second"]
    print(
        f"\n{'run':16s} {'steps/s':>8s} {'vs sparse':>9s} {'share':>6s} {'s/call':>7s} "
        f"{'v s/step':>9s} {'other s/step':>12s}"
    )
    for name, *_ in runs:
        r = result[name]
        per_call = r["seconds_per_call"]
        print(
            f"{name:16s} {r['steps_per_second']:8.1f} {r['steps_per_second'] / base:9.2f} "
            f"{100 * r['verifier_share']:5.1f}% "
            f"{per_call if per_call is not None else float('nan'):7.3f} "
            f"{r['verifier_seconds_per_env_step']:9.4f} {r['other_seconds_per_env_step']:12.4f}"
        )
    print(f"wrote {args.output / 'sac_verifier_share.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
