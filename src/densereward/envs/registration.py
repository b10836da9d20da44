"""Registration of the Gymnasium-Robotics environments (a leaf: both the environment factory
and the describers' rendering probe import it)."""

from __future__ import annotations

import gymnasium as gym

__all__ = ["register_robotics"]


def register_robotics() -> None:
    """Register Gymnasium-Robotics environments (``FetchReach-v4``, ...); idempotent.

    Its import prints a ``farama_notifications`` notice about the Adroit hand environments'
    rewards (not used here) on every start; that one line is dropped, anything else printed
    to stderr during the import is passed through.
    """
    import contextlib
    import io
    import sys

    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        import gymnasium_robotics
    for line in buf.getvalue().splitlines(keepends=True):
        notice = "AdroitHand" in line and ("farama" in line.lower() or "Gymnasium-Robotics" in line)
        if not notice:
            sys.stderr.write(line)

    gym.register_envs(gymnasium_robotics)
