"""Seconds per scored state with camera frames against text, for the tiny random-weight VLM on CPU.

One process, one verifier (``scripts/qwen2vl_random.py``: a 2-layer Qwen2-VL with a 2-block
vision tower, random weights; the ``transformers`` backend in its default dtype), no score
cache. Each round scores the same ``--states`` states (one ``progress_batch`` call, batched as
the SAC path batches) in every mode, the modes interleaved so the machine's load falls on all
of them alike:

* ``text``: the state as text (a FetchReach-like description), no frames;
* ``frames_1``: the state's own frame (the potential of the state), empty text;
* ``frames_4``: the last 4 frames of the trajectory, empty text;
* ``text+frames_1``: the text and the state's frame.

Frames are synthetic ``480 x 480 x 3`` renders (a gradient and a moving disc; FetchReach's
``MUJOCO_GL=egl`` frames have this size), shrunk to ``verifier.frames.max_side`` (448) by the
engine and to at most 64 image tokens each by the model's image processor (``max_pixels`` 64 x
28 x 28). The first round is a warm-up and is not counted. Prints per mode the median seconds
per scored state, prompt tokens per read and the ratio to ``text``; writes
``<output>.json`` and ``<output>.md``.

Random weights show the plumbing and its cost, not quality.

Run: ``HF_HUB_OFFLINE=1 python benchmarks/frames_cost.py --rounds 5 --output docs/figures/frames_cost``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MODES = ("text", "frames_1", "frames_4", "text+frames_1")


def _build_model() -> Path:
    spec = importlib.util.spec_from_file_location(
        "qwen2vl_random", REPO / "scripts/qwen2vl_random.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build()


def frame(t: int, size: int = 480) -> np.ndarray:
    """A smooth synthetic camera frame at step ``t`` (a gradient and a disc that moves)."""
    yy, xx = np.mgrid[0:size, 0:size]
    img = np.stack([xx * 255 // size, yy * 255 // size, np.full_like(xx, 90)], -1)
    img = img.astype(np.uint8)
    cy, cx = size // 2, (40 + 17 * t) % size
    img[(yy - cy) ** 2 + (xx - cx) ** 2 < (size // 10) ** 2] = (230, 40, 40)
    return img


def state_text(i: int) -> str:
    d = 0.25 - 0.02 * i
    return (
        f"gripper at (1.34, 0.75, 0.53) m, target at (1.30, 0.80, {0.45 + 0.01 * i:.2f}) m, "
        f"distance to target {d:.2f} m, gripper opening 0.05 m"
    )


def batch(mode: str, states: int, round_: int) -> dict:
    """``progress_batch`` arguments of one round in ``mode`` (distinct states every round)."""
    base = 100 * round_
    tasks = ["Move the gripper to the red target."] * states
    if mode == "text":
        return {"tasks": tasks, "trajectories": [state_text(base + i) for i in range(states)]}
    n = 4 if mode == "frames_4" else 1
    images = [[frame(base + i + k) for k in range(n)] for i in range(states)]
    texts = [state_text(base + i) if mode.startswith("text") else "" for i in range(states)]
    return {"tasks": tasks, "trajectories": texts, "images": images}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (plus one warm-up)")
    parser.add_argument("--states", type=int, default=4, help="states scored per call")
    parser.add_argument("--output", default="runs/frames_cost", help="path stem for .json/.md")
    args = parser.parse_args(argv)

    import torch

    from densereward.config import VerifierConfig
    from densereward.verifier import Verifier

    model = _build_model()
    verifier = Verifier(VerifierConfig(model=str(model), batch_size=args.states))
    usage = verifier.backend.usage
    seconds: dict[str, list[float]] = {m: [] for m in MODES}
    tokens: dict[str, list[float]] = {m: [] for m in MODES}
    masses: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(args.rounds + 1):
        for mode in MODES:
            kwargs = batch(mode, args.states, r)
            n0, t_tok = usage.n_prompts, usage.n_prompt_tokens
            t0 = time.perf_counter()
            results = verifier.progress_batch(**kwargs)
            dt = time.perf_counter() - t0
            if r == 0:
                continue  # warm-up
            seconds[mode].append(dt / args.states)
            tokens[mode].append((usage.n_prompt_tokens - t_tok) / max(1, usage.n_prompts - n0))
            masses[mode] += [x.mass for x in results if x.mass is not None]
    verifier.close()

    base = statistics.median(seconds["text"])
    rows = []
    for mode in MODES:
        med = statistics.median(seconds[mode])
        rows.append(
            {
                "mode": mode,
                "seconds_per_state_median": med,
                "seconds_per_state_min": min(seconds[mode]),
                "seconds_per_state_max": max(seconds[mode]),
                "ratio_to_text": med / base,
                "prompt_tokens_per_read": statistics.mean(tokens[mode]),
                "mean_mass": statistics.mean(masses[mode]) if masses[mode] else None,
            }
        )
    meta = {
        "model": Path(model).name,
        "dtype": str(getattr(verifier.backend, "dtype", "")),
        "rounds": args.rounds,
        "states_per_call": args.states,
        "frame": "480x480x3 synthetic, shrunk to max_side 448, <= 64 image tokens",
        "torch_threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
        "n_cpus": os.cpu_count(),
        "note": "random weights: the plumbing and its cost, not quality",
    }
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = [
        "# Seconds per scored state: camera frames against text (tiny random-weight Qwen2-VL, CPU)",
        "",
        f"`python benchmarks/frames_cost.py --rounds {args.rounds} --states {args.states}`; "
        f"model `{meta['model']}` ({meta['dtype']}), {meta['n_cpus']} CPUs, "
        f"{meta['torch_threads']} torch threads; {meta['frame']}. Median over {args.rounds} "
        "rounds (after one warm-up) of one `progress_batch` call each, modes interleaved. "
        "Random weights: the plumbing and its cost, not quality.",
        "",
        "| mode | s / state (median) | min - max | x text | prompt tokens / read | mean mass |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        mass = "" if row["mean_mass"] is None else f"{row['mean_mass']:.3f}"
        lines.append(
            f"| {row['mode']} | {row['seconds_per_state_median']:.3f} | "
            f"{row['seconds_per_state_min']:.3f} - {row['seconds_per_state_max']:.3f} | "
            f"{row['ratio_to_text']:.2f} | {row['prompt_tokens_per_read']:.0f} | {mass} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
