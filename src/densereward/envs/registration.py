"""Registration of the Gymnasium-Robotics environments (a leaf: both the environment factory
and the describers' rendering probe import it)."""

from __future__ import annotations

import os

import gymnasium as gym

__all__ = ["register_robotics", "headless_gl"]


def headless_gl() -> None:
    """Pick MuJoCo's EGL backend on a machine with no display, before MuJoCo is imported.

    MuJoCo chooses its OpenGL backend from ``MUJOCO_GL`` when it is first imported and defaults
    to GLFW, which needs a display; on a headless machine (no ``DISPLAY``) ``egl`` renders
    offscreen (FetchReach: 480x480x3 frames here). A ``MUJOCO_GL`` the user set is kept.
    """
    if "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
        os.environ["MUJOCO_GL"] = "egl"


def register_robotics() -> None:
    """Register Gymnasium-Robotics environments (``FetchReach-v4``, ...); idempotent.

    Its import prints a ``farama_notifications`` notice about the Adroit hand environments'
    rewards (not used here) on every start; that one line is dropped, anything else printed
    to stderr during the import is passed through.
    """
    import contextlib
    import io
    import sys

    headless_gl()
    buf = io.StringIO()
    with contextlib.redirect_stderr(buf):
        import gymnasium_robotics
    for line in buf.getvalue().splitlines(keepends=True):
        notice = "AdroitHand" in line and ("farama" in line.lower() or "Gymnasium-Robotics" in line)
        if not notice:
            sys.stderr.write(line)

    gym.register_envs(gymnasium_robotics)
