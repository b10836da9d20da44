"""Can the verifier read a FetchReach state? Value-Order Correlation of its progress reads.

Two measurements with one loaded verifier (the progress prompt, G = 20, transformers, float32):

- ``episodes``: FetchReach-v4 episodes of 50 steps, scripted (a steady approach that arrives
  about step 40: successful) and random (uniform actions: failures), seeds 100, 101, ...; every
  ``--stride``-th state is read through the shipped :class:`FetchDescriber` in both forms,
  ``describe_state`` (mode ``shaping``, the SAC default) and ``describe`` (mode ``progress``,
  with history). Per episode: VOC (:func:`value_order_correlation`: progress vs time) and the
  same rank correlation of progress vs closeness (minus the gripper-target distance), which
  tells a read that follows the distance from one that follows the step count.
- ``phrasings``: one state per distance (30 ... 1 cm) in three texts (the shipped
  ``describe_state``, the distance with what is left to the 5 cm success radius, and the form
  of the progress prompt's own demonstrations); the rank correlation of progress vs closeness.

Run: ``HF_HUB_OFFLINE=1 MUJOCO_GL=egl nice python benchmarks/progress_voc.py --model
qwen2.5-coder-0.5b --episodes 3 --stride 5 --json docs/figures/progress_voc_fetchreach.json``
(0.5B: 4.3 s per read on 2 shared cores, ~12 min). ``--phrasings-only --model
qwen2.5-coder-1.5b``: the second measurement alone (4 min).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from densereward import Verifier, VerifierConfig
from densereward.envs import FetchDescriber, make_env
from densereward.metrics.progress import value_order_correlation

TASK = (
    "Move the robot gripper to the target at (1.30, 0.70, 0.40) m. "
    "Success: gripper within 5 cm of the target."
)
DISTANCES_CM = [30, 20, 15, 10, 6, 3, 1]
PHRASINGS = {
    "shipped describe_state": lambda d: (
        f"Gripper-target distance now {d} cm. "
        f"Gripper (1.30, 0.70, {0.40 + d / 100:.2f}) m, target (1.30, 0.70, 0.40) m."
    ),
    "distance + what is left": lambda d: (
        f"Gripper-target distance now {d} cm; success needs 5 cm or less: "
        + ("reached." if d <= 5 else f"{d - 5} cm still to go.")
    ),
    "the demonstrations' own form": lambda d: (
        f"step 1: distance to target 0.30 m\nstep 9: distance to target {d / 100:.2f} m"
    ),
}


def episode(env, kind: str, seed: int) -> tuple[list, list, bool]:
    """One 50-step episode: observations s_0..s_50, actions, and final is_success."""
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    observations, actions, speed, info = [obs], [], 0.0, {}
    for t in range(50):
        if kind == "scripted":  # Fetch moves ~5 cm per unit action; arrive about step 40
            gap = obs["desired_goal"] - obs["achieved_goal"]
            n = float(np.linalg.norm(gap))
            speed = n / 40 / 0.05 if t == 0 else speed
            a = np.zeros(4, dtype=np.float32)
            if n > 1e-3:
                a[:3] = np.clip(gap / n * min(speed, n / 0.05), -1, 1)
        else:
            a = env.action_space.sample()
        obs, _, _, _, info = env.step(a)
        observations.append(obs)
        actions.append(a)
    return observations, actions, bool(info.get("is_success", 0))


def measure_episodes(v: Verifier, n_episodes: int, stride: int) -> dict:
    env = make_env("FetchReach-v4", reward="env", monitor=False)
    d = FetchDescriber("reach")
    rows, n_reads, t0 = [], 0, time.perf_counter()
    for kind in ("scripted", "random"):
        for ep in range(n_episodes):
            obs, acts, success = episode(env, kind, 100 + ep)
            steps = list(range(0, 51, stride))
            dist = [
                float(np.linalg.norm(obs[s]["achieved_goal"] - obs[s]["desired_goal"]))
                for s in steps
            ]
            row = {
                "kind": kind,
                "seed": 100 + ep,
                "success": success,
                "steps": steps,
                "dist_cm": [round(100 * x, 1) for x in dist],
            }
            for form in ("state", "trajectory"):
                texts = [
                    d.describe_state(obs[s])
                    if form == "state"
                    else d.describe(obs[: s + 1], acts[:s])
                    for s in steps
                ]
                res = v.progress_batch(tasks=[d.task(obs[0])] * len(texts), trajectories=texts)
                n_reads += len(texts)
                progress = [r.value for r in res]
                row[form] = {
                    "progress": progress,
                    "voc": value_order_correlation(progress),
                    "dist_corr": value_order_correlation(progress, steps=[-x for x in dist]),
                    "min_mass": min(r.mass for r in res if r.mass is not None),
                }
            rows.append(row)
            print(
                kind,
                ep,
                success,
                {f: round(row[f]["voc"] or 0, 2) for f in ("state", "trajectory")},
                flush=True,
            )
    return {"episodes": rows, "seconds_per_read": (time.perf_counter() - t0) / n_reads}


def measure_phrasings(v: Verifier) -> dict:
    out = {}
    for name, text in PHRASINGS.items():
        res = v.progress_batch(
            tasks=[TASK] * len(DISTANCES_CM), trajectories=[text(d) for d in DISTANCES_CM]
        )
        progress = [r.value for r in res]
        out[name] = {
            "distance_cm": DISTANCES_CM,
            "progress": progress,
            "example": text(10),
            "spearman_vs_closeness": value_order_correlation(progress),
        }
        print(name, [round(p, 3) for p in progress], flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--episodes", type=int, default=3, help="episodes of each kind")
    ap.add_argument("--stride", type=int, default=5, help="environment steps between reads")
    ap.add_argument("--phrasings-only", action="store_true", help="skip the episodes")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    v = Verifier(
        VerifierConfig(
            model=args.model, granularity=20, backend_options={"dtype": "float32", "device": "cpu"}
        )
    )
    out = {"model": args.model}
    if not args.phrasings_only:
        out.update(measure_episodes(v, args.episodes, args.stride))
    out["phrasings"] = measure_phrasings(v)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
