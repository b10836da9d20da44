"""GRPO reward kinds: the registry behind ``reward.type`` (YAML, ``--reward``, ``build_reward_funcs``).

A reward kind is a :class:`RewardKind` spec registered under a name in :data:`GRPO_REWARDS`:
its *builder* (``build(ctx: RewardContext) -> (reward_funcs, reward_weights)``), its options
dataclass (``reward.options`` in YAML, validated into it when the config is read), the
``reward.weights`` it takes, its own checks of the reward section and of the trainer's
arguments, and what the rest of the library asks of it (``servable``: ``densereward serve``
can serve it; ``needs_groups``: it ranks a prompt's completions together; ``continuous``,
``checks_answer``, ``uses_verifier``). Every caller reads the spec, never the kind's name.

Built-in kinds: ``sparse``, ``dense``, ``group``, ``mixed``, ``gated``, ``seed_recipe`` (the
specs below). A kind of your own is one file plus one line, either at run time::

    from densereward.rewards import GRPO_REWARDS
    GRPO_REWARDS.register("length", "my_pkg.length_reward:KIND")

or, without importing densereward, as an entry point of the group ``densereward.grpo_rewards``
in the plugin's ``pyproject.toml``::

    [project.entry-points."densereward.grpo_rewards"]
    length = "my_pkg.length_reward:KIND"

after which ``reward.type: length`` (and ``reward.options: {...}``) works in YAML and
``--reward length`` on the command line (docs/extending.md). Something that is not a
:class:`RewardKind` is refused when it is registered (an object) or first loaded (a string).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..registry import Registry, entry_point_group, instances_of
from .gated import GATED_WEIGHTS, AsyncGatedVerifierReward, GatedVerifierReward
from .group import AsyncGroupVerifierReward, GroupVerifierReward
from .math import AnswerFormatReward, MathChecker, MathCorrectnessReward
from .tracking import RewardQualityTracker
from .verifier import AsyncVerifierMonitor, AsyncVerifierReward, VerifierMonitor, VerifierReward

__all__ = [
    "GRPO_REWARDS",
    "RewardBuilder",
    "RewardContext",
    "RewardKind",
    "CONTINUOUS_KINDS",
    "default_scale_rewards",
    "reward_kind",
]


def default_scale_rewards(kind: str) -> str:
    """The ``GRPOConfig.scale_rewards`` the library runs a reward kind with.

    ``"none"`` (Dr. GRPO, arXiv 2503.20783: advantages are centred, not divided by the group's
    spread) for a kind whose spec says ``continuous``: dividing by the spread would blow a
    judge's small differences in a group where every completion is equally correct up to unit
    size and cancel every weight that bounds the judge. TRL's default ``"group"`` otherwise
    (``sparse``, plugin kinds unless they declare ``continuous=True``).

    >>> default_scale_rewards("gated"), default_scale_rewards("sparse")
    ('none', 'group')
    """
    return "none" if reward_kind(kind).continuous else "group"


@dataclass(frozen=True)
class RewardContext:
    """What a GRPO reward builder is given (built by :func:`~densereward.rewards.build_reward_funcs`)."""

    config: Any
    """The :class:`~densereward.rewards.RewardConfig` (YAML ``reward:``); ``config.type`` is
    the kind being built, ``config.weights`` the user's ``reward.weights`` (or ``None``)."""
    verifier: Any
    """A ``Verifier`` or a zero-argument factory of one (call it only when scoring: a dry run
    builds the reward functions without loading weights)."""
    checker: MathChecker
    """The Math-Verify checker shared by the sparse reward and the tracker."""
    tracker: RewardQualityTracker | None
    """The reward-quality tracker (``None`` when ``reward.track`` is off)."""
    num_generations: int | None
    """``GRPOConfig.num_generations`` (GRPO group size), if known."""
    options: Any = None
    """The kind's validated ``reward.options`` (an instance of :attr:`RewardKind.options`), or
    ``None`` for a kind without options (``config.options`` holds the same object)."""

    def verifier_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of the verifier reward classes (:class:`VerifierReward`,
        :class:`GroupVerifierReward`, the monitors) from the config: tracker, checker,
        group size, reference guidance, prompt, injection pre-filter, guard, input."""
        c = self.config
        return {
            "tracker": self.tracker,
            "checker": self.checker,
            "num_generations": self.num_generations,
            "reference_guided": c.reference_guided,
            "verifier_input": c.verifier_input,
            "reference_prompt": c.reference_prompt,
            "injection_penalty": c.injection_penalty,
            "guard_prompt": c.guard_prompt,
        }


RewardBuilder = Callable[[RewardContext], tuple[list[Any], "list[float] | None"]]
"""``build(ctx) -> (reward_funcs, reward_weights)``: TRL's ``GRPOTrainer(reward_funcs=...)``
(callables ``f(prompts, completions, **columns) -> list[float | None]``, each with a
``__name__``; a callable class keeps them picklable) and ``GRPOConfig.reward_weights``
(one float per function, or ``None`` for all 1)."""


@dataclass(frozen=True)
class RewardKind:
    """A GRPO reward kind: its builder and what the config, the trainer and the server ask of it.

    Example (a plugin's whole kind, with a YAML parameter):

    >>> @dataclass(frozen=True)
    ... class ShortOptions:
    ...     limit: int = 200
    >>> class Short:
    ...     __name__ = "short"
    ...     def __init__(self, limit): self.limit = limit
    ...     def __call__(self, prompts, completions, **kw):
    ...         return [float(len(str(c)) <= self.limit) for c in completions]
    >>> KIND = RewardKind(build=lambda ctx: ([Short(ctx.options.limit)], None),
    ...                   options=ShortOptions, uses_verifier=False)

    after which ``reward: {type: short, options: {limit: 64}}`` builds ``Short(64)``.
    """

    build: RewardBuilder
    """``build(ctx) -> (reward_funcs, reward_weights)`` (:data:`RewardBuilder`)."""
    options: type | None = None
    """A (frozen) dataclass of the kind's own parameters: YAML ``reward.options: {...}`` is
    validated into it when the config is read (unknown keys and bad values are a
    ``ConfigError``; values are coerced to the field types) and reaches the builder as
    ``ctx.options``. ``None``: the kind takes no ``reward.options``."""
    weights: tuple[str, ...] = ()
    """The names of the ``reward.weights`` entries it takes (``("w_sparse", "w_dense")``); empty:
    ``reward.weights`` is refused for this kind."""
    default_weights: tuple[float, ...] | None = None
    """Its weights when ``reward.weights`` is unset."""
    trl_weights: bool = True
    """The weights go to ``GRPOConfig.reward_weights`` (one per reward function); ``False``: the
    kind applies them inside its one function (``gated``)."""
    check_config: Callable[[Any], None] | None = None
    """``check_config(reward_config)``: the kind's own checks of the ``reward:`` section, run
    when it is read; raises ``ConfigError`` naming the field."""
    check_training: Callable[[Any, Any], None] | None = None
    """``check_training(reward_config, grpo_args)``: the kind's checks of the trainer's
    arguments (``trl.GRPOConfig``), run by ``train grpo`` (and its dry run) before training."""
    servable: bool = True
    """``densereward serve`` can serve it (it scores each item on its own)."""
    needs_groups: bool = False
    """It ranks the ``num_generations`` completions of a prompt together: each process needs
    whole groups (``train grpo`` checks the batch arithmetic), and ``serve`` cannot serve it
    unless it is ``servable`` anyway."""
    continuous: bool = False
    """It carries a continuous judge term: ``train grpo`` runs it with ``scale_rewards="none"``
    unless the config sets it, and warns on ``"group"`` (:func:`default_scale_rewards`)."""
    checks_answer: bool = False
    """It checks the final answer against the reference (a Math-Verify term): ``serve`` then
    requires labels by default."""
    uses_verifier: bool = True
    """It reads the verifier (``False``: only ``reward.track``'s monitor would; ``sparse``)."""

    def __post_init__(self) -> None:
        from ..errors import RegistryError

        if not callable(self.build):
            raise RegistryError(f"RewardKind.build must be callable, got {self.build!r}")
        if self.options is not None and not dataclasses.is_dataclass(self.options):
            raise RegistryError(f"RewardKind.options must be a dataclass, got {self.options!r}")
        if self.default_weights is not None and len(self.default_weights) != len(self.weights):
            raise RegistryError(
                f"RewardKind.default_weights {self.default_weights} do not match its weights "
                f"{self.weights}"
            )


def sparse(ctx: RewardContext) -> tuple[list[Any], list[float] | None]:
    """``sparse``: Math-Verify 0/1 correctness; with ``reward.track`` a verifier monitor beside
    it (returns ``None`` rewards, so TRL ignores it in the sum) logs ``verifier/*``."""
    funcs: list[Any] = [MathCorrectnessReward(checker=ctx.checker)]
    if ctx.tracker is not None:
        monitor = AsyncVerifierMonitor if ctx.config.use_async else VerifierMonitor
        funcs.append(monitor(ctx.verifier, **ctx.verifier_kwargs()))
    return funcs, None


def _dense_reward(ctx: RewardContext, **kwargs: Any) -> Any:
    cls = AsyncVerifierReward if ctx.config.use_async else VerifierReward
    return cls(ctx.verifier, **ctx.verifier_kwargs(), **kwargs)


def dense(ctx: RewardContext) -> tuple[list[Any], list[float] | None]:
    """``dense``: the verifier's expected score in ``[0, 1]``."""
    return [_dense_reward(ctx)], None


def group(ctx: RewardContext) -> tuple[list[Any], list[float] | None]:
    """``group``: the within-group soft win rate (``reward.group_method``, ``reward.pivots``)."""
    cls = AsyncGroupVerifierReward if ctx.config.use_async else GroupVerifierReward
    c = ctx.config
    return [
        cls(ctx.verifier, method=c.group_method, pivots=c.pivots, **ctx.verifier_kwargs())
    ], None


def mixed(ctx: RewardContext) -> tuple[list[Any], list[float] | None]:
    """``mixed``: sparse + dense, weighted by ``RewardConfig.reward_weights``; where the sparse
    check abstains on a labelled item (a timeout) the dense term abstains too, so the item is
    an abstention, not a wrong answer scored by the judge alone."""
    return [
        MathCorrectnessReward(checker=ctx.checker),
        _dense_reward(ctx, abstain_with_check=True),
    ], ctx.config.reward_weights


def gated(ctx: RewardContext) -> tuple[list[Any], list[float] | None]:
    """``gated``: Math-Verify's verdict plus the judge inside correctness strata, one function
    (:class:`~densereward.rewards.gated.GatedVerifierReward`)."""
    c = ctx.config
    cls = AsyncGatedVerifierReward if c.use_async else GatedVerifierReward
    return [
        cls(
            ctx.verifier,
            weights=c.judge_weights,
            spread_floor=c.spread_floor,
            judge_only_steps=c.judge_only_steps,
            **ctx.verifier_kwargs(),
        )
    ], None


def seed_recipe(ctx: RewardContext) -> tuple[list[Any], list[float] | None]:
    """``seed_recipe``: ``r_correct + r_format + beta * r_reasoning`` (Kwok et al. 2026's GRPO
    recipe), ``r_reasoning`` the group's Probabilistic Pivot Tournament win rate
    (``reward.group_method``, ``reward.pivots``); weights ``[w_correct, w_format, beta]``.
    Where the correctness check abstains on a labelled item (a timeout) every term abstains."""
    c = ctx.config
    cls = AsyncGroupVerifierReward if c.use_async else GroupVerifierReward
    return [
        MathCorrectnessReward(checker=ctx.checker),
        AnswerFormatReward(checker=ctx.checker),
        cls(
            ctx.verifier,
            method=c.group_method,
            pivots=c.pivots,
            abstain_with_check=True,
            **ctx.verifier_kwargs(),
        ),
    ], ctx.config.reward_weights


def _check_gated(config: Any) -> None:
    from .gated import gated_weights

    if config.weights is not None:
        gated_weights(*config.weights)


def _check_seed_recipe(config: Any) -> None:
    if config.weights is not None and min(config.weights) < 0:
        raise ConfigError(
            f"reward.weights for seed_recipe must be [w_correct, w_format, beta], each >= 0, got "
            f"{list(config.weights)}"
        )


def _gated_training(config: Any, args: Any) -> None:
    if getattr(args, "multi_objective_aggregation", "sum_then_normalize") != "sum_then_normalize":
        raise ConfigError(
            "reward.type=gated needs training.multi_objective_aggregation=sum_then_normalize: "
            "normalising each reward separately lets the dense reward outweigh correctness "
            "(densereward.rewards.gated_weights)"
        )


SEED_RECIPE_WEIGHTS = (1.0, 1.0, 0.1)
"""Default ``[w_correct, w_format, beta]`` of ``seed_recipe`` (the seed paper leaves beta unstated;
0.1 keeps the win-rate term inside a band narrower than the format and correctness terms)."""

_BUILTINS = {
    "sparse": RewardKind(sparse, checks_answer=True, uses_verifier=False),
    "dense": RewardKind(dense, continuous=True),
    "group": RewardKind(group, servable=False, needs_groups=True, continuous=True),
    "mixed": RewardKind(
        mixed,
        weights=("w_sparse", "w_dense"),
        default_weights=(1.0, 1.0),
        continuous=True,
        checks_answer=True,
    ),
    "gated": RewardKind(
        gated,
        weights=("w_sparse", "w_judge"),
        default_weights=GATED_WEIGHTS,
        trl_weights=False,
        check_config=_check_gated,
        check_training=_gated_training,
        needs_groups=True,
        continuous=True,
        checks_answer=True,
    ),
    "seed_recipe": RewardKind(
        seed_recipe,
        weights=("w_correct", "w_format", "beta"),
        default_weights=SEED_RECIPE_WEIGHTS,
        check_config=_check_seed_recipe,
        needs_groups=True,
        continuous=True,
        checks_answer=True,
    ),
}

CONTINUOUS_KINDS = frozenset(name for name, kind in _BUILTINS.items() if kind.continuous)
"""Built-in kinds whose spec says ``continuous`` (a plugin kind declares its own)."""


GRPO_REWARDS: Registry[RewardKind] = Registry(
    "GRPO reward kind",
    group=entry_point_group("grpo_rewards"),
    builtins=dict(_BUILTINS),
    check=instances_of(
        RewardKind, "GRPO reward kind", "wrap a builder function as RewardKind(build=your_function)"
    ),
)
"""``reward.type`` -> its :class:`RewardKind` (plugins: entry-point group
``densereward.grpo_rewards``)."""


def reward_kind(name: str) -> RewardKind:
    """The :class:`RewardKind` registered as ``name`` (imports a plugin's module on first use).

    Raises:
        ConfigError: an unknown name (did-you-mean) or an entry that cannot be imported.
        RegistryError: an entry that is not a :class:`RewardKind`.
    """
    return GRPO_REWARDS.load(name)


def options_of(
    kind: Any, given: Any, *, name: str, field: str = "reward.options", owner: str | None = None
) -> Any:
    """``given`` (YAML ``reward.options``, or another spec's options field) validated into the
    kind's options dataclass (``kind.options``).

    Args:
        kind: the spec (a :class:`RewardKind`, or any spec with an ``options`` class).
        given: the YAML mapping, an instance of the kind's options class, or ``None``.
        name: the kind's name, for messages.
        field: the config field holding the options, for messages (``"env.reward_options"``).
        owner: who owns them, for messages; default ``reward.type=<name>``.

    Returns:
        An instance of ``kind.options`` (every default filled in), or ``None`` for a kind
        without options.

    Raises:
        ConfigError: options for a kind that takes none, an unknown key (with the closest
            name and the ones it takes), a value of the wrong type, or one the dataclass
            refuses.
    """
    from collections.abc import Mapping

    from ..config_files import from_dict
    from ..sections import unknown_key_hints

    owner = owner or f"reward.type={name}"
    cls = kind.options
    if cls is None:
        if given:
            raise ConfigError(
                f"{field}: {owner} takes no options (got "
                f"{sorted(given) if isinstance(given, Mapping) else given!r}); drop {field}"
            )
        return None
    if isinstance(given, cls):
        return given
    given = {} if given is None else given
    if not isinstance(given, Mapping) or not all(isinstance(k, str) for k in given):
        raise ConfigError(f"{field} must be a mapping of option names to values, got {given!r}")
    known = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ConfigError(
            f"unknown {field} for {owner}: "
            f"{unknown_key_hints(unknown, known, prefix=field + '.')}; it takes "
            f"{', '.join(known) or 'none'}"
        )
    try:  # coerces each value to its field's type (ConfigError naming the field)
        return from_dict(cls, given, prefix=f"{field}.")
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:  # the dataclass's own refusal; a missing required field
        raise ConfigError(f"{owner}: {field}: {e}") from None
