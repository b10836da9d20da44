"""The ``gated`` reward: correctness first, the judge only inside correctness strata (HERO-style).

``r_i = w_s * c_i + w_j * (u_i - 1/2)``, where ``c_i`` is Math-Verify's verdict (1 correct, 0
otherwise) and ``u_i`` in ``[0, 1]`` is the judge's score min-max normalised *within the
completion's correctness stratum of its GRPO group* (the correct ones, the others). So the
incorrect completions of a group occupy a band ``[-w_j/2, w_j/2]`` and the correct ones
``[w_s - w_j/2, w_s + w_j/2]``: with ``w_j < w_s`` every correct completion is above every
incorrect one, and, run with ``scale_rewards="none"`` (which the library sets for its verifier
reward kinds), a group in which every completion is wrong gets advantages of at most ``w_j``,
not the unit-size ones TRL's per-group std division would give it (issue 36; stratified
normalisation: HERO, Tao et al. 2025, arXiv 2510.07242; no std division: Dr. GRPO, Liu et al.
2025, arXiv 2503.20783).

Two more guards:

* **spread floor**: a stratum whose judge scores span less than ``spread_floor`` is a tie
  (``u = 1/2`` for all): min-max scaling would otherwise blow read noise up to the full band;
  when half or more of the strata so far (at least :data:`TIE_WARN_MIN_STRATA`) were ties, one
  warning says the judge is ranking nothing (its reads are nearly constant);
* **judge-only steps**: a generation batch in which no group has a correct *and* an incorrect
  completion gives the sparse reward nothing to say, and the judge alone would decide the whole
  update; with ``judge_only_steps="skip"`` (default) its judge terms are 0 there (the batch
  trains on nothing, as with the sparse reward), and the first such batch logs one warning.
  ``"keep"`` lets the judge rank inside those groups (a judge that scores progress, issue 37).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

from ..errors import ConfigError
from ._common import group_slices
from .math import references_from_columns
from .verifier import AsyncVerifierReward, VerifierReward

__all__ = [
    "GATED_WEIGHTS",
    "gated_weights",
    "stratified_rewards",
    "GatedVerifierReward",
    "AsyncGatedVerifierReward",
    "TIE_WARN_MIN_STRATA",
]

logger = logging.getLogger(__name__)

GATED_WEIGHTS = (1.0, 0.1)
"""Default ``[w_sparse, w_judge]`` of the ``gated`` reward: the judge's band is 0.1 wide."""


def gated_weights(w_sparse: float, w_dense: float) -> tuple[float, float]:
    """Check that ``[w_sparse, w_judge]`` keep correctness primary; return them as floats.

    Guarantee (the stratified reward of :func:`stratified_rewards`): with ``0 <= w_j < w_s``
    a correct completion gets ``r >= w_s - w_j/2 > w_j/2 >= r`` of every incorrect one, so in
    every GRPO group every correct completion has a larger advantage than every incorrect one
    (TRL's advantage is ``a_G r + b_G`` with ``a_G > 0`` per group for every ``scale_rewards``;
    DeepSeekMath, Shao et al. 2024, eq. 3). Across groups the bound needs
    ``scale_rewards`` ``"none"`` or ``"batch"``: ``"group"`` divides an all-wrong group's judge
    differences by their own spread and so cancels ``w_j`` (docs/grpo.md, "The advantage
    audit").

    Args:
        w_sparse: Weight of the Math-Verify verdict, ``> 0``.
        w_dense: Width of the judge's band, in ``[0, w_sparse)``.

    Returns:
        ``(w_sparse, w_dense)``.

    Raises:
        ConfigError: if ``w_sparse <= 0`` or ``w_dense`` is outside ``[0, w_sparse)``.

    >>> gated_weights(1, 0.1)
    (1.0, 0.1)
    """
    w_s, w_d = float(w_sparse), float(w_dense)
    if not (w_s > 0 and 0 <= w_d < w_s):
        raise ConfigError(
            f"reward.weights for gated must satisfy 0 <= w_judge < w_sparse (w_sparse > 0), got "
            f"[{w_s:g}, {w_d:g}]: this is what keeps every correct completion above every "
            "incorrect one in its GRPO group; e.g. [1.0, 0.1]"
        )
    return w_s, w_d


def stratified_rewards(
    correct: Sequence[float | None],
    judge: Sequence[float | None],
    groups: Sequence[slice],
    *,
    w_sparse: float = GATED_WEIGHTS[0],
    w_judge: float = GATED_WEIGHTS[1],
    spread_floor: float = 0.02,
    judge_only_steps: Literal["skip", "keep"] = "skip",
) -> tuple[list[float | None], dict[str, float]]:
    """The gated reward of one generation batch: correctness, plus the judge inside strata.

    Args:
        correct: ``(n,)`` Math-Verify verdicts (1 correct; 0 or ``None`` = not correct).
        judge: ``(n,)`` judge scores in ``[0, 1]`` (``None`` = abstained: the stratum's middle).
            A row with ``None`` in both abstains: its reward is ``None`` and it belongs to no
            stratum (:class:`GatedVerifierReward` passes a timed-out check so).
        groups: the GRPO groups (slices over ``range(n)``).
        w_sparse: weight of a correct verdict.
        w_judge: width of the judge's band (``< w_sparse``).
        spread_floor: a stratum whose judge scores span less than this is a tie.
        judge_only_steps: ``"skip"``: no judge term when no group has both a correct and an
            incorrect completion; ``"keep"``: rank them anyway.

    Returns:
        ``(rewards, info)``: ``(n,)`` rewards (``None`` where both the verdict and the judge
        abstained), and ``{"judge_only": 0/1, "judge_skipped": 0/1, "n_strata", "n_tied" (counts),
        "tied_strata": share of
        strata with >= 2 members treated as ties}``.

    >>> r, info = stratified_rewards([1, 0, 0, 0], [0.5, 0.2, 0.4, 0.3], [slice(0, 4)])
    >>> [round(x, 3) + 0.0 for x in r], info["judge_only"]
    ([1.0, -0.05, 0.05, 0.0], 0.0)
    >>> stratified_rewards([0, 0], [0.2, 0.9], [slice(0, 2)])[0]
    [0.0, 0.0]
    """
    if len(correct) != len(judge):
        raise ConfigError(f"{len(correct)} verdicts but {len(judge)} judge scores")
    w_s, w_j = gated_weights(w_sparse, w_judge)
    ok = [c is not None and float(c) == 1.0 for c in correct]
    gone = [c is None and d is None for c, d in zip(correct, judge, strict=True)]
    # an abstained row (no verdict, no judge score) is neither correct nor incorrect
    spread = [
        any(ok[g]) and any(not o and not x for o, x in zip(ok[g], gone[g], strict=True))
        for g in groups
    ]
    judge_only = bool(groups) and not any(spread)
    skip = judge_only and judge_only_steps == "skip"
    u = [0.5] * len(ok)
    n_strata = n_tied = 0
    if not skip:
        for g in groups:
            idx = list(range(len(ok)))[g]
            for stratum in (True, False):
                members = [i for i in idx if ok[i] is stratum and judge[i] is not None]
                if len(members) < 2:
                    continue
                n_strata += 1
                vals = [float(judge[i]) for i in members]
                lo, hi = min(vals), max(vals)
                if hi - lo < spread_floor:
                    n_tied += 1
                    continue
                for i, v in zip(members, vals, strict=True):
                    u[i] = (v - lo) / (hi - lo)
    rewards: list[float | None] = []
    for i, c in enumerate(correct):
        if c is None and judge[i] is None:
            rewards.append(None)
        else:
            rewards.append(w_s * float(ok[i]) + w_j * (u[i] - 0.5))
    info = {
        "judge_only": float(judge_only),
        "judge_skipped": float(skip),
        "tied_strata": n_tied / n_strata if n_strata else 0.0,
        "n_strata": float(n_strata),
        "n_tied": float(n_tied),
    }
    return rewards, info


TIE_WARN_MIN_STRATA = 8
""":class:`GatedVerifierReward` warns once when, after at least this many correctness strata of
two or more judged completions, half or more were ties (judge spread under the floor)."""


class GatedVerifierReward(VerifierReward):
    """The default GRPO reward (``reward.type: gated``): :func:`stratified_rewards` of
    Math-Verify's verdict and the verifier's expected score, as one TRL reward function.

    Takes :class:`~densereward.rewards.verifier.VerifierReward`'s arguments (the judge's
    prompt, reference guidance, injection pre-filter, tracker) plus:

    Args:
        weights: ``(w_sparse, w_judge)``, ``0 <= w_judge < w_sparse`` (default
            :data:`GATED_WEIGHTS`).
        spread_floor: judge spread below which a stratum is a tie (default 0.02 on the
            ``[0, 1]`` score: one letter of G = 20 is 0.053).
        judge_only_steps: ``"skip"`` (default) or ``"keep"`` (see the module docstring).

        per_sample: score each completion on its own, never normalised among the other
            completions of a call: ``w_s * c + w_j * (d - 1/2)`` with the judge's own score
            ``d``, in the same bands. ``densereward serve`` sets it: a served call holds
            unrelated samples (one request's, or several clients' micro-batched together), and
            a sample's reward must not depend on them.

    Without ``num_generations`` and with every prompt of a call distinct there are no groups to
    normalise in either: the reward is then the per-sample one.

    Returns (from ``__call__``):
        ``(len(completions),)`` rewards in ``[-w_j/2, w_s + w_j/2]``; ``None`` where both the
        verdict and the judge abstained, and where Math-Verify's check abstained on an item
        with a reference (a timeout, :attr:`~densereward.rewards.math.MathCheck.abstained`):
        its verdict is unknown, and the judge alone would score it as a wrong answer. TRL leaves
        such a completion out of its group's mean and std (advantage 0); ``densereward serve``
        answers it as abstained. The reward-quality tracker measures the judge's
        scores (``verifier/*``); ``rewards/verifier_gated/mean`` is this reward's mean.
    """

    default_name = "verifier_gated"

    def __init__(
        self,
        verifier: Any,
        *,
        weights: Sequence[float] = GATED_WEIGHTS,
        spread_floor: float = 0.02,
        judge_only_steps: Literal["skip", "keep"] = "skip",
        per_sample: bool = False,
        **kwargs: Any,
    ) -> None:
        if len(tuple(weights)) != 2:
            raise ConfigError(f"gated weights must be [w_sparse, w_judge], got {list(weights)}")
        self.weights = gated_weights(*weights)
        if not 0.0 <= float(spread_floor) < 1.0:
            raise ConfigError(f"reward.spread_floor must be in [0, 1), got {spread_floor}")
        if judge_only_steps not in ("skip", "keep"):
            raise ConfigError(f"reward.judge_only_steps={judge_only_steps!r}; use skip | keep")
        self.spread_floor = float(spread_floor)
        self.judge_only_steps = judge_only_steps
        self.per_sample = bool(per_sample)
        self._skipped = 0
        self._strata = self._tied = 0
        self._tie_warned = False
        super().__init__(verifier, **kwargs)

    def _rewards(
        self,
        prompts: Sequence[Any],
        texts: list[Any],
        values: list[float | None],
        columns: dict[str, Any],
        trainer_state: Any,
    ) -> list[float | None]:
        from .math import default_checker

        refs = references_from_columns(columns, len(texts), self.answer_column)
        checks = (self.checker or default_checker()).check_batch(refs, texts)
        # where the check abstained on a labelled item (a timeout) the verdict is unknown: the
        # judge alone would put the item in the wrong answers' band, so the reward abstains
        gone = [c.abstained for c in checks]
        verdicts = [c.reward for c in checks]
        values = [None if g else v for v, g in zip(values, gone, strict=True)]
        groups = group_slices(prompts, self.num_generations)
        if self.per_sample or (
            self.num_generations is None and all(g.stop - g.start == 1 for g in groups)
        ):
            # no GRPO groups (a reward server: unrelated samples): the judge's own score,
            # centred, inside the same band
            w_s, w_j = self.weights
            return [
                None
                if g or (c is None and d is None)
                else w_s * float(c == 1.0) + w_j * ((0.5 if d is None else float(d)) - 0.5)
                for c, d, g in zip(verdicts, values, gone, strict=True)
            ]
        rewards, info = stratified_rewards(
            verdicts,
            values,
            groups,
            w_sparse=self.weights[0],
            w_judge=self.weights[1],
            spread_floor=self.spread_floor,
            judge_only_steps=self.judge_only_steps,
        )
        self._strata += int(info["n_strata"])
        self._tied += int(info["n_tied"])
        if (
            not self._tie_warned
            and self._strata >= TIE_WARN_MIN_STRATA
            and 2 * self._tied >= self._strata
        ):
            self._tie_warned = True
            logger.warning(
                "%s: in %d of the %d correctness strata so far the judge's scores spanned less than "
                "reward.spread_floor=%g, so it ranked nothing there and those groups trained on "
                "Math-Verify's verdict alone. Said once. The judge's reads are nearly constant on "
                "these completions: it cannot tell them apart (measure what it reads with densereward "
                "eval-verifier or benchmarks/process_judge.py; a larger verifier.model or another "
                "reward.reference_prompt); lowering reward.spread_floor would only let read noise in",
                self.__name__,
                self._tied,
                self._strata,
                self.spread_floor,
            )
        if info["judge_skipped"]:
            self._skipped += 1
            if self._skipped == 1:
                step = getattr(trainer_state, "global_step", None)
                logger.warning(
                    "%s%s: no GRPO group of this batch had a correct and an incorrect completion, so "
                    "the judge alone would have decided the update; its ranking was not used "
                    "(reward.judge_only_steps=skip: the batch trains on nothing, as with the sparse "
                    "reward; logged as verifier/advantage/judge_only_step). Said once. If most steps "
                    "are like this, the task is too hard for the policy (easier data, more "
                    "num_generations) or the judge should rank them: reward.judge_only_steps=keep",
                    self.__name__,
                    "" if step is None else f" at step {int(step) + 1}",
                )
        return rewards


class AsyncGatedVerifierReward(GatedVerifierReward, AsyncVerifierReward):
    """:class:`GatedVerifierReward` with ``async def __call__`` (``Verifier.ascore_batch``)."""
