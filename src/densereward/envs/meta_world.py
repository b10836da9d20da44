"""Meta-World MT1 tasks (Sawyer arm), registered like the Fetch environments, and their describer.

Meta-World (Yu et al. 2019; Farama's ``metaworld`` package, v3 tasks) has 50 manipulation
tasks; MT1 is one of them with 50 goal (and object) positions drawn once, a new one picked
at every reset. Each task is registered as ``densereward/MetaWorld-<task>``
(``densereward/MetaWorld-reach-v3``, ``...-push-v3``, ``...-pick-place-v3``, ...), 500 steps
an episode as in the benchmark, so that ``reward: env`` (Meta-World's own shaped reward,
``[0, 10]`` a step), ``reward: sparse`` (1 on success) and ``reward: verifier`` work as for
``FetchReach-v4``. Observations are Meta-World's 39-vector with the goal visible (MT
benchmarks): ``[0:3]`` hand position (m), ``[3]`` gripper opening (0 closed, 1 open),
``[4:7]`` first object position, ``[7:11]`` its quaternion, ``[11:18]`` a second object,
``[18:36]`` the same 18 values one step earlier, ``[36:39]`` the goal position.

* :class:`MetaWorldMT1`: the wrapper ``gym.make`` builds: the MT1 task switch at reset
  (seeded by ``reset(seed=...)``, which Meta-World itself ignores), ``info["is_success"]``
  from Meta-World's ``info["success"]``, the goal-visible observation space, upright frames.
* :class:`MetaWorldDescriber`: the state as text for a progress verifier (gripper, object
  and goal positions, distances in cm, whether the task's success test holds).

Frames: ``render_mode="rgb_array"`` renders offscreen (``MUJOCO_GL=egl`` is chosen on a
machine without a display, :func:`~densereward.envs.registration.headless_gl`) from camera
``corner3``; Meta-World's corner cameras look at the table upside down (their up axis points
down in the world), so their frames are turned 180 degrees.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from densereward.errors import ConfigError, DataError

from .describers import _cm, _recent_steps, _xyz
from .kinds import DescriberSpec
from .registration import METAWORLD_PREFIX, headless_gl

__all__ = [
    "MetaWorldMT1",
    "MetaWorldDescriber",
    "is_metaworld_id",
    "make_mt1",
]

DEFAULT_CAMERA = "corner3"
"""The camera of ``rgb_array`` frames: arm, table, object and goal in view."""

TCP_OFFSET = np.array([0.0, 0.0, -0.045])
"""The gripper's centre between the fingertips (``SawyerXYZEnv.tcp_center``, which Meta-World's
success tests use) minus the hand position in the observation, in metres. The gripper keeps its
orientation, so this is nearly fixed: measured on reach-v3, -4.50 to -4.43 cm in z and 0 to
+0.8 cm in y as the arm reaches out, so the describer's gripper distances are within about
1 cm of Meta-World's."""

_INSTALL = "Meta-World is not installed: pip install 'densereward[robotics]' (metaworld==3.0.0)"


def is_metaworld_id(env_id: str) -> bool:
    """True for the ids of :func:`~densereward.envs.registration.register_metaworld` (``densereward/MetaWorld-*``)."""
    return env_id.startswith(METAWORLD_PREFIX)


@functools.lru_cache(maxsize=16)
def _mt1_tasks(task: str, tasks_seed: int) -> tuple[Any, ...]:
    """The 50 goal variations of MT1 ``task`` (Meta-World ``Task`` records; immutable, shared)."""
    import metaworld

    return tuple(metaworld.MT1(task, seed=tasks_seed).train_tasks)


def make_mt1(
    task: str,
    *,
    render_mode: str | None = None,
    camera_name: str | None = DEFAULT_CAMERA,
    width: int = 480,
    height: int = 480,
    tasks_seed: int = 0,
) -> MetaWorldMT1:
    """The entry point of ``densereward/MetaWorld-<task>``: one MT1 environment.

    Args:
        task: a Meta-World v3 task name (``"reach-v3"``).
        render_mode: ``None`` or ``"rgb_array"`` (offscreen; ``MUJOCO_GL=egl`` when headless).
        camera_name: Meta-World camera of the frames (``corner``, ``corner2``, ``corner3``,
            ``topview``, ``behindGripper``, ``gripperPOV``); ``None``: MuJoCo's free camera.
        width, height: frame size in pixels.
        tasks_seed: seed of MT1's 50 goal variations (the benchmark's ``MT1(task, seed=...)``).

    Raises:
        ConfigError: if Meta-World is not installed or ``task`` is not one of its tasks.
    """
    if render_mode is not None:
        headless_gl()  # before MuJoCo's first import in this process, if it is the first
    try:
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS
    except ImportError:
        raise ConfigError(_INSTALL) from None
    if task not in ALL_V3_ENVIRONMENTS:
        import difflib

        close = difflib.get_close_matches(task, list(ALL_V3_ENVIRONMENTS), n=3)
        raise ConfigError(
            f"Meta-World has no task {task!r}" + (f"; did you mean {close}?" if close else "")
        )
    env = ALL_V3_ENVIRONMENTS[task](
        render_mode=render_mode,
        camera_name=camera_name if render_mode else None,
        width=width,
        height=height,
    )
    return MetaWorldMT1(env, _mt1_tasks(task, tasks_seed))


class MetaWorldMT1(gym.Wrapper):
    """A Meta-World environment as an MT1 task: a goal variation drawn at every reset.

    Differences from the bare ``SawyerXYZEnv`` (all needed by the SAC path):

    * ``reset(seed=s)`` seeds the environment (Meta-World ignores the argument and wants
      ``env.seed(s)``), so ``DummyVecEnv.seed`` and evaluation seeds take effect; the goal
      variation is drawn from that generator.
    * ``info["is_success"]`` (``1.0`` / ``0.0``) mirrors ``info["success"]``: the key the
      sparse reward, SB3's ``Monitor`` and the success-rate callbacks read (Fetch's name).
    * ``observation_space`` has the goal's bounds (Meta-World's stays the goal-hidden one,
      zeros, after ``set_task``).
    * The episode length is the ``TimeLimit``'s alone (Meta-World raises past 500 steps).
    * Frames of an upside-down camera (up axis pointing down in the world) are turned 180 degrees.

    Args:
        env: a Meta-World v3 environment (``SawyerXYZEnv``), not yet given a task.
        tasks: MT1 goal variations (``metaworld.MT1(name).train_tasks``); at least one.

    Raises:
        ConfigError: without tasks.
    """

    def __init__(self, env: gym.Env, tasks: Sequence[Any]) -> None:
        if not tasks:
            raise ConfigError("MetaWorldMT1 needs at least one task (goal variation)")
        super().__init__(env)
        self.tasks = tuple(tasks)
        self.task_name = tasks[0].env_name
        raw = env.unwrapped
        raw.set_task(self.tasks[0])
        raw.max_path_length = np.iinfo(np.int64).max  # the TimeLimit ends episodes
        self.observation_space = raw.sawyer_observation_space  # goal visible
        self._upside_down: bool | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        raw = self.env.unwrapped
        if seed is not None:
            raw.seed(int(seed))
        raw.set_task(self.tasks[int(raw.np_random.integers(len(self.tasks)))])
        return self.env.reset(options=options)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        info["is_success"] = float(bool(info["success"]))
        return obs, float(reward), terminated, truncated, info

    def render(self) -> Any:
        frame = self.env.render()
        if frame is None or self.render_mode != "rgb_array":
            return frame
        if self._upside_down is None:
            self._upside_down = _camera_upside_down(self.env.unwrapped)
        return np.ascontiguousarray(frame[::-1, ::-1]) if self._upside_down else frame


def _camera_upside_down(raw: Any) -> bool:
    """Whether the rendering camera's up axis (its frame's y column) points down in the world."""
    cam = raw.mujoco_renderer.camera_id
    if cam is None or cam < 0:  # the free camera is kept upright
        return False
    return bool(np.asarray(raw.data.cam_xmat[cam]).reshape(3, 3)[2, 1] < 0)


# --------------------------------------------------------------------------------------
# The describer
# --------------------------------------------------------------------------------------

# task (without "-v3") -> (task sentence, what must reach the goal, success radius in m), for
# the tasks whose success test is that distance of observed positions (Meta-World's
# ``evaluate_state``); tests/test_meta_world.py checks each against ``info["obj_to_target"]``.
_TASKS: dict[str, tuple[str, str, float]] = {
    "reach": ("Move the robot gripper to the goal", "gripper", 0.05),
    "reach-wall": ("Move the robot gripper over the wall to the goal", "gripper", 0.05),
    "push": ("Push the puck on the table to the goal", "object", 0.05),
    "push-wall": ("Push the puck around the wall to the goal", "object", 0.07),
    "push-back": ("Push the puck back to the goal", "object", 0.07),
    "pick-place": ("Pick up the puck and place it at the goal", "object", 0.07),
    "pick-place-wall": (
        "Pick up the puck, lift it over the wall, place it at the goal",
        "object",
        0.07,
    ),
    "sweep-into": ("Sweep the puck into the hole at the goal", "object", 0.05),
    "plate-slide": ("Slide the plate into the goal", "object", 0.07),
}


class MetaWorldDescriber:
    """Text of a Meta-World MT1 state for a progress verifier (positions in m, distances in cm).

    For the tasks whose success test is a distance between observed positions (reach, push,
    pick-place and their variants, sweep-into, plate-slide) the text leads with that distance
    and says whether it is within the task's success radius; for the other tasks it gives
    the gripper, object and goal positions and their distances without a success claim.
    Positions are rounded to cm so that revisited states give the same text (progress cache).

    Args:
        task: a Meta-World task name (``"reach-v3"``); see :meth:`for_env_id`.
        n_recent: earlier distances listed by :meth:`describe`.
        stride: environment steps between them.

    Raises:
        ConfigError: on an empty task or invalid sizes.

    >>> d = MetaWorldDescriber("reach-v3")
    >>> o = np.zeros(39); o[0:3] = [0.0, 0.6, 0.195]; o[3] = 1.0; o[36:39] = [0.0, 0.8, 0.15]
    >>> d.task(o)
    'Move the robot gripper to the goal at (0.00, 0.80, 0.15) m. Success: gripper within 5 cm of the goal.'
    >>> d.describe_state(o)
    'Gripper-goal distance now 20 cm (success: no). Gripper (0.00, 0.60, 0.15) m, open; goal (0.00, 0.80, 0.15) m.'
    """

    env_ids: tuple[str, ...] = (METAWORLD_PREFIX + "*",)
    """The env ids (``fnmatch`` patterns) this describer is chosen for by default
    (:func:`densereward.envs.make_describer`; registry name ``metaworld``)."""

    def __init__(self, task: str, *, n_recent: int = 3, stride: int = 10) -> None:
        if not task or not task.strip():
            raise ConfigError("MetaWorldDescriber needs a Meta-World task name, e.g. 'reach-v3'")
        if n_recent < 0 or stride < 1:
            raise ConfigError("MetaWorldDescriber needs n_recent >= 0 and stride >= 1")
        self.name = task.strip()
        base = self.name.rsplit("-v", 1)[0]
        self.sentence, self.subject, self.radius = _TASKS.get(
            base, (f"Do the Meta-World task '{base.replace('-', ' ')}'", "", 0.0)
        )
        self.n_recent = int(n_recent)
        self.stride = int(stride)

    @classmethod
    def for_env_id(cls, env_id: str, **kwargs: Any) -> MetaWorldDescriber:
        """The describer of ``densereward/MetaWorld-<task>``.

        Raises:
            ConfigError: for an id that is not a registered Meta-World one.
        """
        if not is_metaworld_id(env_id):
            raise ConfigError(f"{env_id!r} is not a Meta-World id ({METAWORLD_PREFIX}<task>)")
        return cls(env_id[len(METAWORLD_PREFIX) :], **kwargs)

    @staticmethod
    def _parts(obs: Any) -> dict[str, np.ndarray]:
        v = np.asarray(obs, dtype=np.float64).ravel()
        if v.size != 39:
            raise DataError(
                f"MetaWorldDescriber reads Meta-World's 39-value observation, got {v.size} values"
            )
        return {
            "gripper": v[0:3] + TCP_OFFSET,
            "opening": v[3:4],
            "object": v[4:7],
            "goal": v[36:39],
        }

    def _distance(self, obs: Any) -> float | None:
        """The success test's distance (m), or ``None`` for a task without a distance test."""
        if not self.subject:
            return None
        p = self._parts(obs)
        return float(np.linalg.norm(p[self.subject] - p["goal"]))

    def task(self, observation: Any) -> str:
        """Task text with the goal position (from the first observation)."""
        goal = _xyz(self._parts(observation)["goal"])
        if not self.subject:
            return f"{self.sentence} with the robot arm; the goal is at {goal} m."
        return (
            f"{self.sentence} at {goal} m. Success: {self.subject} within "
            f"{_cm(self.radius)} cm of the goal."
        )

    def _now(self, obs: Any) -> str:
        """Current distances and success, then positions."""
        p = self._parts(obs)
        grip = f"Gripper {_xyz(p['gripper'])} m, {'open' if p['opening'][0] > 0.5 else 'closed'}"
        if self.subject == "gripper":
            return f"{grip}; goal {_xyz(p['goal'])} m."
        to_obj = _cm(np.linalg.norm(p["gripper"] - p["object"]))
        text = f"{grip}; object {_xyz(p['object'])} m; goal {_xyz(p['goal'])} m; gripper-object distance {to_obj} cm"
        if not self.subject:
            text += f"; object-goal distance {_cm(np.linalg.norm(p['object'] - p['goal']))} cm"
        return text + "."

    def _lead(self, obs: Any) -> str:
        d = self._distance(obs)
        if d is None:
            return ""
        return f"{self.subject.capitalize()}-goal distance now {_cm(d)} cm (success: {'yes' if d <= self.radius else 'no'}). "

    def describe_state(self, observation: Any) -> str:
        """The state alone (no history, no step number): a potential of the state reads it.

        Raises:
            DataError: on an observation that is not Meta-World's 39-vector.
        """
        return self._lead(observation) + self._now(observation)

    def describe(self, observations: Sequence[Any], actions: Sequence[np.ndarray]) -> str:
        """Trajectory text: the step, the distance at start and a few recent steps, the state now.

        Raises:
            DataError: on an empty trajectory or a non-Meta-World observation.
        """
        if not observations:
            raise DataError("describe() needs at least the initial observation")
        t = len(observations) - 1
        start = self._distance(observations[0])
        history = ""
        if start is not None:
            steps = _recent_steps(t, self.n_recent, self.stride)
            history = f"{self.subject.capitalize()}-goal distance at start {_cm(start)} cm"
            if steps:
                history += "; steps " + ", ".join(map(str, steps)) + ": "
                history += (
                    ", ".join(_cm(self._distance(observations[s]) or 0.0) for s in steps) + " cm"
                )
            history += ". "
        return f"Step {t}. {history}{self.describe_state(observations[-1])}"


METAWORLD = DescriberSpec(MetaWorldDescriber, env_ids=MetaWorldDescriber.env_ids, priority=10)
"""Registry entry ``metaworld`` (:data:`densereward.envs.DESCRIBERS`): ``densereward/MetaWorld-*``."""
