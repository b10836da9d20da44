"""Registration of the Gymnasium-Robotics environments, and Gymnasium's ``"module:Id"`` form
of an environment id (a leaf: both the environment factory and the describers' rendering probe
import it)."""

from __future__ import annotations

import os

import gymnasium as gym

from ..errors import ConfigError

__all__ = [
    "register_robotics",
    "register_metaworld",
    "headless_gl",
    "registered_id",
    "import_env_module",
    "require_registered",
]


def headless_gl() -> None:
    """Pick MuJoCo's EGL backend on a machine with no display, before MuJoCo is imported.

    MuJoCo chooses its OpenGL backend from ``MUJOCO_GL`` when it is first imported and defaults
    to GLFW, which needs a display; on a headless machine (no ``DISPLAY``) ``egl`` renders
    offscreen (FetchReach: 480x480x3 frames here). A ``MUJOCO_GL`` the user set is kept.
    With ``egl`` or ``osmesa`` (software rendering without a GPU), triton is loaded now, before
    any frame renders (:func:`densereward.progress_fn.load_triton_before_gl`: loaded after, it
    crashes the process).
    """
    if "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
        os.environ["MUJOCO_GL"] = "egl"
    if os.environ.get("MUJOCO_GL") in ("egl", "osmesa"):
        from ..progress_fn import load_triton_before_gl

        load_triton_before_gl()


def register_robotics() -> None:
    """Register Gymnasium-Robotics environments (``FetchReach-v4``, ...) and Meta-World's MT1
    tasks (``densereward/MetaWorld-reach-v3``, ..., if ``metaworld`` is installed); idempotent.

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
    register_metaworld()


METAWORLD_PREFIX = "densereward/MetaWorld-"
"""Meta-World ids are ``METAWORLD_PREFIX + <task>``, e.g. ``densereward/MetaWorld-reach-v3``."""

METAWORLD_EPISODE_STEPS = 500
"""Meta-World's task horizon (``SawyerXYZEnv.max_path_length``); ``gym.make(..., max_episode_steps=N)`` changes it."""


def register_metaworld() -> list[str]:
    """Register ``densereward/MetaWorld-<task>`` for every v3 task of the installed Meta-World.

    Idempotent; registers nothing (and returns ``[]``) when ``metaworld`` is not installed.
    The entry point, :func:`densereward.envs.meta_world.make_mt1`, is a ``"module:function"``
    string resolved when an environment is made (MT1's goals are drawn then).

    Returns:
        The ids, sorted.
    """
    try:
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS
    except ImportError:
        return []
    ids = []
    for task in ALL_V3_ENVIRONMENTS:
        env_id = METAWORLD_PREFIX + task
        if env_id not in gym.registry:
            gym.register(
                env_id,
                entry_point="densereward.envs.meta_world:make_mt1",
                kwargs={"task": task},
                max_episode_steps=METAWORLD_EPISODE_STEPS,
            )
        ids.append(env_id)
    return sorted(ids)


def registered_id(env_id: str) -> str:
    """The registry id of ``env_id``: ``Id`` of Gymnasium's ``"module:Id"`` form, else ``env_id``.

    Text only (nothing imported); :func:`import_env_module` imports the module.

    >>> registered_id("myreach:Reach1D-v0"), registered_id("FetchReach-v4")
    ('Reach1D-v0', 'FetchReach-v4')
    """
    return env_id.partition(":")[2] if ":" in env_id else env_id


def import_env_module(env_id: str) -> str:
    """Import the module of an id in Gymnasium's ``"module:Id"`` form and return ``Id``.

    ``gymnasium.make("module:Id")`` imports ``module`` first (which registers ``Id`` with
    ``gymnasium.register``) and then makes ``Id``; this does the import the same way, so that
    an id of one's own environment (``myreach:Reach1D-v0``) is checked, described and made as a
    registered one. An id without ``:`` is returned as is and imports nothing.

    Raises:
        ConfigError: naming the module when it cannot be imported (not installed, not on
            ``PYTHONPATH``, or its import raised).
    """
    if ":" not in env_id:
        return env_id
    import importlib

    module = env_id.partition(":")[0]
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module == missing or module.startswith(missing + "."):
            raise ConfigError(
                f"environment id {env_id!r}: no module named {module!r} (the 'module:Id' form "
                f"imports it to register {registered_id(env_id)!r}); install it or put its "
                "directory on PYTHONPATH"
            ) from None
        raise _import_failed(env_id, module, exc) from None
    except Exception as exc:  # noqa: BLE001 - the user's module: report it as the id's
        raise _import_failed(env_id, module, exc) from None
    return registered_id(env_id)


def _import_failed(env_id: str, module: str, exc: BaseException) -> ConfigError:
    first = (str(exc).strip().splitlines() or [""])[0]
    return ConfigError(
        f"environment id {env_id!r}: importing module {module!r} failed: "
        f"{type(exc).__name__}: {first}"
    )


def _module_ids(module: str) -> list[str]:
    """The registry ids whose entry point lives in ``module`` (or a submodule of it)."""
    out = []
    for env_id, spec in gym.registry.items():
        ep = spec.entry_point
        where = ep.partition(":")[0] if isinstance(ep, str) else getattr(ep, "__module__", "")
        if where == module or str(where).startswith(module + "."):
            out.append(env_id)
    return sorted(out)


_OWN_ENV_FIX = (
    "for your own environment give 'module:Id' (e.g. env.id=myreach:Reach1D-v0, where "
    "importing myreach.py registers Reach1D-v0; run with PYTHONPATH=. when the file is in the "
    "current directory; docs/extending.md, 'Bring your own environment')"
)


def require_registered(env_id: str) -> str:
    """Import the module of a ``"module:Id"`` id (:func:`import_env_module`) and return the
    registry id, which must be registered.

    An unknown plain id suggests close ids of the whole registry and says how to name one's
    own environment (the ``"module:Id"`` form, ``PYTHONPATH=.``). For the ``"module:Id"`` form
    the suggestions come only from the ids that module registered (another package's id is no
    answer to a typo in one's own), written as ``"module:Id"``, the form to type, and a module
    that registered none says so.

    Raises:
        ConfigError: for a module that cannot be imported (naming it) or an id that is not
            registered (with the suggestions above, or none).
    """
    import difflib

    name = import_env_module(env_id)
    if name in gym.registry:
        return name
    if ":" not in env_id:
        close = difflib.get_close_matches(name, list(gym.registry), n=3)
        raise ConfigError(
            f"unknown environment {env_id!r}"
            + (f" (did you mean {close}?)" if close else "")
            + f"; {_OWN_ENV_FIX}"
        )
    module = env_id.partition(":")[0]
    own = _module_ids(module)
    if not own:
        raise ConfigError(
            f"unknown environment {env_id!r}: importing module {module!r} registered no "
            f"environment (it must call gymnasium.register(id={name!r}, entry_point=...) when "
            "imported)"
        )
    # the suggestions in the form to type: 'myreach:Reach1D-v0', not the registry's bare id,
    # which would not import the module
    close = [f"{module}:{c}" for c in difflib.get_close_matches(name, own, n=3)]
    hint = (
        f"did you mean {close}?"
        if close
        else f"module {module!r} registers {own[:10]} (give one as env.id={module}:{own[0]})"
    )
    raise ConfigError(f"unknown environment {env_id!r}: {hint}")
