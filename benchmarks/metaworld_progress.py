"""Can a text verifier read a Meta-World reach state? Its progress along a scripted reach.

One MT1 reach-v3 episode (seed 0): a proportional controller moves the gripper from 33 cm
to the goal, and every 10th state is described by :class:`MetaWorldDescriber`. The form is
``describe_state`` for ``--text state`` (mode ``shaping``) or ``describe`` for
``--text trajectory`` (mode ``progress``). The states are read in one batch. For each read the
script prints the progress, the time per read and the start of the text (docs/metaworld.md,
"Measured here").

Run: ``HF_HUB_OFFLINE=1 nice python benchmarks/metaworld_progress.py [--model qwen2.5-coder-0.5b]
[--text trajectory]``
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch

from densereward import Verifier, VerifierConfig, envs


def scripted_reach(n_steps: int = 80, every: int = 10) -> tuple[list[np.ndarray], list[int]]:
    """The observations of one scripted reach episode and the steps to read (every ``every``)."""
    envs.register_robotics()
    env = gym.make("densereward/MetaWorld-reach-v3")
    obs, _ = env.reset(seed=0)
    traj = [obs]
    for _ in range(n_steps):
        tcp = obs[0:3] + envs.meta_world.TCP_OFFSET
        obs, *_ = env.step(np.append(np.clip(10.0 * (obs[36:39] - tcp), -1.0, 1.0), 0.0))
        traj.append(obs)
    env.close()
    return traj, list(range(0, n_steps + 1, every))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="verifier.model (default: embedded 135M)")
    parser.add_argument("--text", choices=("state", "trajectory"), default="state")
    args = parser.parse_args()
    torch.set_num_threads(1)
    traj, steps = scripted_reach()
    d = envs.MetaWorldDescriber("reach-v3")
    if args.text == "state":
        texts = [d.describe_state(traj[t]) for t in steps[:8]]
    else:
        texts = [d.describe(traj[: t + 1], []) for t in steps[1:9]]
    verifier = Verifier(VerifierConfig(model=args.model))
    task = d.task(traj[0])
    verifier.progress_batch(tasks=[task], trajectories=[texts[0]])  # warm-up
    t0 = time.perf_counter()
    reads = verifier.progress_batch(tasks=[task] * len(texts), trajectories=texts)
    seconds = (time.perf_counter() - t0) / len(texts)
    for text, read in zip(texts, reads, strict=True):
        value = "abstained" if read.value is None else f"{read.value:.3f}"
        print(f"{value:>9}  {text[:90]}")
    print(f"{seconds:.2f} s per read (batch of {len(texts)}, 1 torch thread)")
    verifier.close()


if __name__ == "__main__":
    main()
