#!/usr/bin/env python
"""Launch script: GRPO in TRL with a verifier reward, the same run as ``densereward train grpo``.

    python trainers/grpo.py --config configs/grpo_math_cpu.yaml reward.type=group training.max_steps=5
    torchrun --nproc_per_node 2 trainers/grpo.py --config configs/grpo_math_qwen3_tiny.yaml  # 2 CPU processes
    accelerate launch trainers/grpo.py --config configs/grpo_math_qwen3_8b.yaml              # multi-GPU

The trainer is library code (:mod:`densereward.trainers.grpo`, installed with ``densereward[trl]``);
this file is the repository's top-level entry point (it runs ``densereward train grpo``) and is not
installed with the wheel.
"""

import sys

from densereward.cli import main

if __name__ == "__main__":
    # the CLI's own parsing and error handling: overrides anywhere on the line, one-line errors
    sys.exit(main(["train", "grpo", *sys.argv[1:]]))
