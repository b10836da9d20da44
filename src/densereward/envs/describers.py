"""Compact text of a robot task, of its trajectory so far, or of one state, for a progress verifier.

A describer implements :class:`densereward.wrappers.TrajectoryDescriber`:
``task(first_observation) -> str``, ``describe(observations, actions) -> str`` (the
trajectory, with history: read in reward modes ``progress`` and ``mixture``) and
``describe_state(observation) -> str`` (the current state alone, no history and no step
count: read in mode ``shaping``, whose potential must be a function of the state). Texts
stay short (well under 300 tokens) because the verifier reads one per scored step, and
distances are rounded to centimetres so that revisited states give the same text and hit
the progress cache.

* :class:`FetchDescriber`: Gymnasium-Robotics Fetch tasks with dict observations
  (``FetchReach``: gripper to goal; ``FetchPush``: block to goal). Distances in cm with the
  success radius and the state's relation to success in words (for push: which stage), not
  raw coordinates: the 0.5B/1.5B verifiers read no progress from positions
  (``docs/robotics.md``, "Does the verifier read progress?").
* :class:`BoxDescriber`: any ``Box`` observation, rounded vector of the current and a few
  recent states, with a task text supplied by the user.
* :class:`RenderHook`: the image hook for multimodal verifiers (rendered ``rgb_array``
  frames), with :func:`rendering_available` to check for an OpenGL context first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from densereward.errors import ConfigError, DataError

from .kinds import DescriberSpec

__all__ = ["FetchDescriber", "BoxDescriber", "RenderHook", "rendering_available"]

_FETCH_TASKS = ("reach", "push")


def _xyz(v: np.ndarray) -> str:
    """A position in metres rounded to cm: ``(1.34, 0.75, 0.53)`` (the Meta-World describer)."""
    return "(" + ", ".join(f"{float(x):.2f}" for x in np.asarray(v)[:3]) + ")"


def _cm(d: float) -> str:
    return f"{100.0 * float(d):.0f}"


def _recent_steps(t: int, n_recent: int, stride: int) -> list[int]:
    """Up to ``n_recent`` steps before ``t`` at ``stride``, oldest first (``t`` excluded)."""
    steps = list(range(t - stride, 0, -stride))[:n_recent]
    return sorted(steps)


class FetchDescriber:
    """Text for Fetch tasks from the ``{'observation', 'achieved_goal', 'desired_goal'}`` dict.

    Observation layout (Gymnasium-Robotics ``MujocoFetchEnv._get_obs``): ``observation[0:3]``
    gripper position; with an object, ``[3:6]`` object position; ``achieved_goal`` is the
    gripper (reach) or object (push) position; ``desired_goal`` the target; all in metres.

    Args:
        task: ``"reach"`` (move the gripper to the goal) or ``"push"`` (push the block).
        distance_threshold: success radius in metres (Fetch: 0.05).
        n_recent: how many earlier distances to list.
        stride: environment steps between the listed distances.

    Raises:
        ConfigError: on an unknown task or non-positive sizes.

    >>> d = FetchDescriber("reach")
    >>> o = {"observation": np.array([1.30, 0.70, 0.50] + [0.0] * 7),
    ...      "achieved_goal": np.array([1.30, 0.70, 0.50]), "desired_goal": np.array([1.30, 0.70, 0.40])}
    >>> d.task(o)
    'Move the robot gripper to the target. Success: gripper within 5 cm of the target.'
    >>> d.describe([o, o], [np.zeros(4)])
    'Step 1. Gripper-target distance: at start 10 cm; now 10 cm (success: at most 5 cm). The gripper is near the target, not within the success radius yet.'
    >>> d.describe_state(o)
    'Gripper-target distance now 10 cm (success: at most 5 cm). The gripper is near the target, not within the success radius yet.'
    """

    env_ids: tuple[str, ...] = ("FetchReach*", "FetchPush*")
    """The env ids (``fnmatch`` patterns) this describer is chosen for by default
    (:func:`densereward.envs.make_describer`; registry name ``fetch``)."""

    def __init__(
        self,
        task: Literal["reach", "push"],
        *,
        distance_threshold: float = 0.05,
        n_recent: int = 3,
        stride: int = 5,
    ) -> None:
        if task not in _FETCH_TASKS:
            raise ConfigError(f"FetchDescriber task {task!r}; use one of {_FETCH_TASKS}")
        if distance_threshold <= 0 or n_recent < 0 or stride < 1:
            raise ConfigError(
                "FetchDescriber needs distance_threshold > 0, n_recent >= 0, stride >= 1"
            )
        self.kind = task
        self.distance_threshold = float(distance_threshold)
        self.n_recent = int(n_recent)
        self.stride = int(stride)

    @classmethod
    def for_env_id(cls, env_id: str, **kwargs: Any) -> FetchDescriber:
        """The describer for a Fetch env id (``FetchReach-v4``, ``FetchPushDense-v4``, ...).

        Raises:
            ConfigError: for an env id that is not FetchReach or FetchPush.
        """
        name = env_id.split("/")[-1].lower()
        for kind in _FETCH_TASKS:
            if name.startswith(f"fetch{kind}"):
                return cls(kind, **kwargs)  # type: ignore[arg-type]
        raise ConfigError(
            f"no Fetch describer for {env_id!r}; supported: FetchReach-*, FetchPush-*"
        )

    def _check(self, obs: Any) -> None:
        """Refuse an observation that lacks what this task's text reads.

        Gymnasium-Robotics' ``_get_obs`` sets ``achieved_goal`` to the gripper position
        (``observation[0:3]``) without an object and to the object position
        (``observation[3:6]``) with one, so that equality tells a reach observation from a
        push one.
        """
        if not isinstance(obs, dict) or not {"observation", "achieved_goal", "desired_goal"} <= set(
            obs
        ):
            raise DataError(
                "FetchDescriber needs dict observations with observation/achieved_goal/desired_goal"
            )
        vec = np.asarray(obs["observation"], dtype=np.float64).ravel()
        achieved = np.asarray(obs["achieved_goal"], dtype=np.float64).ravel()
        where = slice(0, 3) if self.kind == "reach" else slice(3, 6)
        part = "gripper" if self.kind == "reach" else "object (block)"
        if vec.size < where.stop or not np.allclose(vec[where], achieved, atol=1e-6):
            other = "FetchReach-*" if self.kind == "push" else "FetchPush-*"
            raise DataError(
                f"FetchDescriber({self.kind!r}) reads the {part} position from observation"
                f"[{where.start}:{where.stop}] and expects achieved_goal to equal it, but this "
                f"observation (observation has {vec.size} values) does not: it is not a "
                f"Fetch{self.kind.capitalize()} observation (a {other} one?). Use "
                "FetchDescriber.for_env_id(env_id) or envs.default_describer(env_id)."
            )

    def _goal_distance(self, obs: dict[str, np.ndarray]) -> float:
        return float(
            np.linalg.norm(np.asarray(obs["achieved_goal"]) - np.asarray(obs["desired_goal"]))
        )

    def task(self, observation: Any) -> str:
        """Task text with the success radius (no coordinates: the state text gives distances)."""
        self._check(observation)
        radius = _cm(self.distance_threshold)
        if self.kind == "reach":
            return f"Move the robot gripper to the target. Success: gripper within {radius} cm of the target."
        return (
            "Use the robot gripper to push the block on the table to the target. "
            f"Success: block within {radius} cm of the target."
        )

    def describe(self, observations: Sequence[Any], actions: Sequence[np.ndarray]) -> str:
        """Trajectory text: distance at start, a few recent distances, now, and the stage.

        Args:
            observations: ``s_0 .. s_t`` (``t + 1`` dict observations).
            actions: ``a_0 .. a_{t-1}`` (not shown; kept for the protocol).

        Raises:
            DataError: on empty or non-Fetch observations.
        """
        if not observations:
            raise DataError("describe() needs at least the initial observation")
        now = observations[-1]
        self._check(now)
        t = len(observations) - 1
        what = "Gripper" if self.kind == "reach" else "Block"
        recent = _recent_steps(t, self.n_recent, self.stride)
        dist = f"{what}-target distance: at start {_cm(self._goal_distance(observations[0]))} cm"
        if recent:
            dist += "; steps " + ", ".join(map(str, recent)) + ": "
            dist += ", ".join(_cm(self._goal_distance(observations[s])) for s in recent) + " cm"
        dist += f"; now {_cm(self._goal_distance(now))} cm (success: at most {_cm(self.distance_threshold)} cm)."
        before = observations[-2] if t else now  # step 0: no move yet
        change = self._goal_distance(before) - self._goal_distance(now)  # m, > 0: closer
        since = f"step {t - 1}" if t else "the start"
        return f"Step {t}. {dist} {self._relation(now, (change, since))}"

    def describe_state(self, observation: Any) -> str:
        """The current state alone: goal distance, the success radius and the stage in words.

        A function of ``observation`` only (no start distance, no recent distances, no step
        number), so a potential read from it is a potential of the state.

        Raises:
            DataError: on a non-Fetch observation.
        """
        self._check(observation)
        what = "Gripper" if self.kind == "reach" else "Block"
        return (
            f"{what}-target distance now {_cm(self._goal_distance(observation))} cm "
            f"(success: at most {_cm(self.distance_threshold)} cm). " + self._relation(observation)
        )

    def _relation(self, obs: dict[str, Any], trend: tuple[float, str] | None = None) -> str:
        """The state's relation to success in words (relational quantities, not coordinates).

        Small verifiers do not derive progress from raw positions or compare two distances
        (docs/robotics.md, "Does the verifier read progress?"); stated relations are the
        form Text2Reward (arXiv 2309.11489) and Eureka give a model. Bands are multiples of
        the success radius ``r``: within ``r`` the success condition holds, within ``2r`` near,
        within ``4r`` closing in, beyond that far. Push has two stages: reach the block
        (gripper more than :attr:`AT_BLOCK` from its centre), then push it.

        ``trend`` (the trajectory text only): ``(change, since)``, the goal distance's decrease
        in metres since the step named ``since``. "Closing in" is said only when it exceeds
        :attr:`TREND_TOLERANCE`; otherwise that band says "no change in distance since ..." or
        "farther than at ...". Without it (the state text) the band is named as before.
        """
        r = self.distance_threshold
        d = self._goal_distance(obs)
        if trend is not None:
            change, since = trend
            tol = self.TREND_TOLERANCE
            trend = (1 if change > tol else 0 if change >= -tol else -1, since)
        if self.kind == "reach":
            return _band("The gripper", "the target", d, r, trend)
        grip = np.asarray(obs["observation"], dtype=np.float64)[:3]
        block = np.asarray(obs["observation"], dtype=np.float64)[3:6]
        gb = float(np.linalg.norm(grip - block))
        if d <= r:
            return "Stage done: the block is at the target: the success condition holds."
        if gb <= self.AT_BLOCK:
            return "Stage 2 of 2 (push the block): the gripper is at the block. " + _band(
                "The block", "the target", d, r, trend
            )
        return (
            f"Stage 1 of 2 (reach the block): the gripper is {_cm(gb)} cm from the block, "
            "not at it yet; the block has to be pushed next."
        )

    AT_BLOCK = 0.06
    """Gripper-block centre distance (m) within which a push state counts as "at the block"."""

    TREND_TOLERANCE = 0.005
    """Goal-distance change (m; half the texts' 1 cm rounding) within which the trajectory text
    says "no change in distance" instead of "closing in"."""


def _band(
    subject: str, place: str, d: float, r: float, trend: tuple[int, str] | None = None
) -> str:
    """``subject``'s relation to ``place`` at distance ``d`` with success radius ``r`` (m).

    ``trend``: ``(sign, since)``, +1 closer / 0 no change / -1 farther since ``since``; in the
    ``(2r, 4r]`` band only +1 or ``None`` (no history) says "closing in".

    >>> _band("The gripper", "the target", 0.03, 0.05)
    'The gripper is at the target: the success condition holds.'
    >>> _band("The gripper", "the target", 0.15, 0.05)
    'The gripper is closing in on the target, not within the success radius yet.'
    >>> _band("The gripper", "the target", 0.15, 0.05, (0, "the start"))
    'The gripper is within 20 cm of the target, no change in distance since the start, not within the success radius yet.'
    """
    if d <= r:
        return f"{subject} is at {place}: the success condition holds."
    if d <= 2 * r:
        return f"{subject} is near {place}, not within the success radius yet."
    if d <= 4 * r:
        if trend is None or trend[0] > 0:
            return f"{subject} is closing in on {place}, not within the success radius yet."
        how = "no change in distance since" if trend[0] == 0 else "farther than at"
        return (
            f"{subject} is within {_cm(4 * r)} cm of {place}, {how} {trend[1]}, "
            "not within the success radius yet."
        )
    return f"{subject} is far from {place}."


class BoxDescriber:
    """Generic text for ``Box`` observations: rounded current and recent state vectors.

    Args:
        task: the task description shown to the verifier (the observation alone says nothing).
        decimals: rounding of each component.
        max_dims: at most this many leading components are shown (longer vectors are cut,
            and the text says so).
        n_recent: earlier states listed, every ``stride`` steps.
        stride: environment steps between listed states.
        show_action: also show the last action.

    Raises:
        ConfigError: on a task that is empty or not text, or invalid sizes.

    >>> d = BoxDescriber("Balance the pole.", decimals=1, n_recent=0)
    >>> d.describe([np.array([0.0, 0.12]), np.array([0.04, -0.33])], [np.array([1.0])])
    'Step 1. State now: [0.0, -0.3]. Last action: [1.0].'
    >>> d.describe_state(np.array([0.04, -0.33]))
    'State now: [0.0, -0.3].'
    """

    env_ids: tuple[str, ...] = ()
    """None: chosen by name (``env.describer: box``), or when no other describer fits an env
    and ``env.task`` is given (registry name ``box``)."""
    needs_task = True
    """:meth:`for_env_id` takes ``env.task``."""

    def __init__(
        self,
        task: str,
        *,
        decimals: int = 2,
        max_dims: int = 16,
        n_recent: int = 2,
        stride: int = 5,
        show_action: bool = True,
    ) -> None:
        if task is not None and not isinstance(task, str):
            raise ConfigError(
                "BoxDescriber's task must be text (the task description), got "
                f"{type(task).__name__} {task!r}"
            )
        if not task or not task.strip():
            raise ConfigError("BoxDescriber needs a non-empty task description")
        if decimals < 0 or max_dims < 1 or n_recent < 0 or stride < 1:
            raise ConfigError(
                "BoxDescriber needs decimals >= 0, max_dims >= 1, n_recent >= 0, stride >= 1"
            )
        self._task = task.strip()
        self.decimals = decimals
        self.max_dims = max_dims
        self.n_recent = n_recent
        self.stride = stride
        self.show_action = show_action

    @classmethod
    def for_env_id(cls, env_id: str, *, task: str, **kwargs: Any) -> BoxDescriber:
        """``BoxDescriber(task, **kwargs)``: any env id; the text comes from ``task``.

        Raises:
            ConfigError: on an empty task (as the constructor).
        """
        return cls(task, **kwargs)

    def _vec(self, x: Any) -> str:
        a = np.asarray(x, dtype=np.float64).ravel()
        cut = a.size > self.max_dims
        vals = ", ".join(
            f"{v:.{self.decimals}f}" for v in np.round(a[: self.max_dims], self.decimals) + 0.0
        )
        return f"[{vals}{', ...' if cut else ''}]"

    def task(self, observation: Any) -> str:
        """The task text given at construction."""
        return self._task

    def describe(self, observations: Sequence[Any], actions: Sequence[np.ndarray]) -> str:
        """``Step t. State at step s: [...]. ... State now: [...]. Last action: [...].``

        Raises:
            DataError: on an empty trajectory.
        """
        if not observations:
            raise DataError("describe() needs at least the initial observation")
        t = len(observations) - 1
        parts = [f"Step {t}."]
        parts += [
            f"State at step {s}: {self._vec(observations[s])}."
            for s in _recent_steps(t, self.n_recent, self.stride)
        ]
        parts.append(f"State now: {self._vec(observations[-1])}.")
        if self.show_action and actions:
            parts.append(f"Last action: {self._vec(actions[-1])}.")
        return " ".join(parts)

    def describe_state(self, observation: Any) -> str:
        """``State now: [...].``: the rounded state alone (no history, step or action)."""
        return f"State now: {self._vec(observation)}."


def rendering_available() -> bool:
    """True when MuJoCo can create an offscreen OpenGL context (``MUJOCO_GL`` egl/osmesa/glfw)."""
    try:
        import gymnasium as gym

        from .registration import register_robotics

        register_robotics()
        env = gym.make("FetchReach-v4", render_mode="rgb_array")
        try:
            env.reset(seed=0)
            return env.render() is not None
        finally:
            env.close()
    except Exception:  # noqa: BLE001 - any GL failure means "not available"
        return False


class RenderHook:
    """Image hook for multimodal verifiers: a downsampled ``rgb_array`` frame of an environment.

    The wrappers capture frames themselves when ``reward.render_frames`` is on; this hook
    is for custom progress functions that want frames of a given environment.

    Args:
        stride: keep every ``stride``-th pixel in each direction (1 = full resolution).

    Raises:
        ConfigError: if ``stride < 1``; at call time if the environment cannot render.
    """

    def __init__(self, stride: int = 1) -> None:
        if stride < 1:
            raise ConfigError(f"RenderHook stride must be >= 1, got {stride}")
        self.stride = stride

    def __call__(self, env: Any) -> np.ndarray:
        """``(H / stride, W / stride, 3)`` uint8 frame of ``env`` (made with ``render_mode='rgb_array'``)."""
        if getattr(env, "render_mode", None) != "rgb_array":
            raise ConfigError("RenderHook needs an environment made with render_mode='rgb_array'")
        frame = env.render()
        if frame is None:
            raise ConfigError(
                "the environment returned no frame; is an OpenGL context available (MUJOCO_GL)?"
            )
        return np.asarray(frame)[:: self.stride, :: self.stride]


FETCH = DescriberSpec(FetchDescriber, env_ids=FetchDescriber.env_ids, priority=10)
"""Registry entry ``fetch`` (:data:`densereward.envs.DESCRIBERS`): FetchReach / FetchPush ids."""
BOX = DescriberSpec(BoxDescriber, needs_task=True)
"""Registry entry ``box``: chosen by name, or when no describer matches and ``env.task`` is set."""
