"""Milliseconds per rendered FetchReach-v4 frame at several ``env.render_size`` values.

Software EGL (``MUJOCO_GL=egl``; Mesa's llvmpipe on a machine without a GPU), one process, one
environment made as the SAC path makes it for a verifier that reads frames (``render_mode=
"rgb_array"``, ``width`` = ``height`` = the size; ``None`` = Fetch's default, 480). Each step is
a random action then ``env.render()``; the median over ``--steps`` steps after ``--warmup`` is
reported, step included (the environment step costs well under a millisecond). Prints one
line per size with the machine (CPU count, load average) so a number is never quoted without
the machine it came from.

Run: ``MUJOCO_GL=egl python benchmarks/render_cost.py --steps 60``
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[480, 224, 128, 56])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()

    from densereward.envs.registration import headless_gl

    headless_gl()
    import gymnasium as gym
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}, MUJOCO_GL={os.environ.get('MUJOCO_GL')}"
    )
    for size in args.sizes:
        env = gym.make("FetchReach-v4", render_mode="rgb_array", width=size, height=size)
        env.reset(seed=0)
        times = []
        for i in range(args.warmup + args.steps):
            t0 = time.perf_counter()
            env.step(env.action_space.sample())
            shape = env.render().shape
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
        env.close()
        print(f"{shape}: {1000 * statistics.median(times):.0f} ms a frame (median of {args.steps})")


if __name__ == "__main__":
    main()
