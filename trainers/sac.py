#!/usr/bin/env python
"""Launch script: SAC (stable-baselines3) in a robot environment with a verifier progress reward,
the same run as ``densereward train sac``.

    python trainers/sac.py --config configs/sac_fetchreach_verifier.yaml training.total_timesteps=2000
    python trainers/sac.py --config configs/sac_fetchreach_verifier.yaml --output-dir runs/sac/x --resume

The trainer is library code (:mod:`densereward.trainers.sac`, installed with
``densereward[robotics]``); this file is the repository's top-level entry point (it runs ``densereward train sac``)
and is not installed with the wheel.
"""

import sys

from densereward.cli import main

if __name__ == "__main__":
    # the CLI's own parsing and error handling: overrides anywhere on the line, one-line errors
    sys.exit(main(["train", "sac", *sys.argv[1:]]))
