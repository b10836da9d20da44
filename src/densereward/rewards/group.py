"""Group-relative verifier reward for TRL's ``GRPOTrainer``.

:class:`GroupVerifierReward`: the ``num_generations`` completions of one prompt are ranked
against each other with pairwise comparisons (Probabilistic Pivot Tournament or round robin)
and each gets its normalised soft win rate ``w_i / c_i`` in ``[0, 1]``, where ``w_i`` sums the
Bradley-Terry preferences ``sigmoid(beta (R_i - R_j))`` over its ``c_i`` comparisons.
:class:`AsyncGroupVerifierReward` ranks the groups concurrently (network backends).

What the verifier is shown, the injection pre-filter, abstention and tracking are those of the
dense reward (:mod:`densereward.rewards.verifier`), whose base class this builds on.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

from ..errors import DataError
from ._common import (
    check_group_options,
    check_lengths,
    check_trl,
    completion_texts,
    group_slices,
)
from .verifier import VerifierLike, _VerifierRewardBase

__all__ = ["GroupVerifierReward", "AsyncGroupVerifierReward", "check_whole_groups"]


class GroupVerifierReward(_VerifierRewardBase):
    """Group-relative verifier reward: normalised soft win rate within each GRPO group.

    The completions of one prompt (consecutive in TRL's batch, ``num_generations`` of them)
    are compared pairwise with ``Verifier.rank`` -- PPT (Probabilistic Pivot Tournament:
    each candidate meets ``pivots`` pivots, O(N k) comparisons) or round robin (all
    ``N (N - 1) / 2`` pairs) -- and completion ``i`` gets ``w_i / c_i`` in ``[0, 1]``
    (its summed Bradley-Terry preferences over its comparisons).

    Args:
        verifier: A :class:`densereward.verifier.Verifier` or a zero-argument factory.
        num_generations: GRPO group size (``GRPOConfig.num_generations``); groups are runs of
            identical prompts cut to this size, and a run that does not fill whole groups is
            refused (a group split across processes or generation batches). ``None``: each run
            of identical prompts is one group, unchecked.
        method: ``"ppt"`` or ``"round_robin"``.
        pivots: PPT pivots per candidate (ignored by round robin).
        seed: Base seed of PPT pivot draws (mixed with the step and group index).
        **kwargs: ``name``, ``tracker``, ``checker``, ``problem_column``, ``answer_column``,
            ``level_column``: as in :class:`~densereward.rewards.verifier.VerifierReward`.

    Returns (from ``__call__``):
        ``(len(completions),)`` win rates in ``[0, 1]``; ``None`` for a completion with no
        valid comparison (a group of one, or every comparison abstained).

    Raises:
        ConfigError: for an unknown ``method`` or ``pivots < 1`` (and the options of
            :class:`~densereward.rewards.verifier.VerifierReward`).
        ValueError: from ``__call__``, on a length mismatch.
        DataError: from ``__call__``, when ``num_generations`` is set and a run of identical
            prompts is not a whole number of groups (:func:`check_whole_groups`).
    """

    default_name = "verifier_group"

    def __init__(
        self,
        verifier: VerifierLike,
        *,
        num_generations: int | None = None,
        method: Literal["ppt", "round_robin"] = "ppt",
        pivots: int = 2,
        seed: int = 0,
        **kwargs: Any,
    ) -> None:
        check_group_options(method=method, pivots=pivots)
        super().__init__(verifier, num_generations=num_generations, **kwargs)
        self.method = method
        self.pivots = pivots
        self.seed = seed

    def _seed(self, trainer_state: Any, g: int) -> int:
        return self.seed + 100_003 * int(getattr(trainer_state, "global_step", 0) or 0) + g

    def _rank_kwargs(
        self, problem: str, candidates: list[str], seed: int, reference: str | None
    ) -> dict[str, Any]:
        kw = {
            "problem": problem,
            "candidates": candidates,
            "pivots": self.pivots,
            "method": self.method,
            "seed": seed,
        }
        if self.criteria is not None:
            kw["criteria"] = self.criteria
        if reference is not None:
            kw["reference"] = reference
        return kw

    def _groups(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        trainer_state: Any,
        columns: dict[str, Any],
    ) -> tuple[
        list[str | None],
        list[str | None],
        list[tuple[slice, tuple[str, list[str | None], int, str | None]]],
    ]:
        """Completion texts, what the verifier is shown of them, and per GRPO group its slice and
        ``(problem, candidates, seed, reference)``.

        Raises:
            ValueError: if ``prompts`` and ``completions`` differ in length.
            DataError: for a partial group (:func:`check_whole_groups`).
        """
        texts = completion_texts(completions)
        check_lengths(completions=texts, prompts=prompts)
        slices = group_slices(prompts, self.num_generations)
        check_whole_groups(slices, self.num_generations)
        problems = self._problems(prompts, columns)
        refs = self._references(columns, len(texts)) or [None] * len(texts)
        shown = self._shown(texts)
        groups = [
            (sl, (problems[sl.start], shown[sl], self._seed(trainer_state, g), refs[sl.start]))
            for g, sl in enumerate(slices)
        ]
        return texts, shown, groups

    def _rank_group(
        self, problem: str, candidates: list[str], seed: int, reference: str | None
    ) -> list[float | None]:
        if len(candidates) < 2:
            return [None] * len(candidates)
        result = self.verifier.rank(**self._rank_kwargs(problem, candidates, seed, reference))
        return _win_rates(result, len(candidates))

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Any] | None = None,
        trainer_state: Any = None,
        log_metric: Callable[[str, float], None] | None = None,
        log_extra: Callable[[str, list], None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        check_trl(trainer_state)
        texts, shown, groups = self._groups(prompts, completions, trainer_state, kwargs)
        values: list[float | None] = [None] * len(texts)
        for sl, args in groups:
            values[sl] = self._rank_group(*args)
        flags = self._screen(shown)
        values = self._penalise(values, flags)
        rewards = self._with_check(values, texts, kwargs)
        self._track(
            prompts=prompts,
            texts=texts,
            scores=values,
            masses=None,
            columns=kwargs,
            trainer_state=trainer_state,
            log_metric=log_metric,
            log_extra=log_extra,
            flags=flags,
            audit_values=rewards,
        )
        return rewards


class AsyncGroupVerifierReward(GroupVerifierReward):
    """:class:`GroupVerifierReward` with ``async def __call__``; groups are ranked concurrently.

    Uses ``Verifier.arank`` when the engine has it, else runs ``rank`` in worker threads.
    """

    async def _arank_group(
        self, problem: str, candidates: list[str], seed: int, reference: str | None
    ) -> list[float | None]:
        if len(candidates) < 2:
            return [None] * len(candidates)
        v = self.verifier
        kw = self._rank_kwargs(problem, candidates, seed, reference)
        result = (
            await v.arank(**kw) if hasattr(v, "arank") else await asyncio.to_thread(v.rank, **kw)
        )
        return _win_rates(result, len(candidates))

    async def __call__(  # type: ignore[override]
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Any] | None = None,
        trainer_state: Any = None,
        log_metric: Callable[[str, float], None] | None = None,
        log_extra: Callable[[str, list], None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        check_trl(trainer_state)
        texts, shown, groups = self._groups(prompts, completions, trainer_state, kwargs)
        outs = await asyncio.gather(*(self._arank_group(*args) for _, args in groups))
        values: list[float | None] = [None] * len(texts)
        for (sl, _), out in zip(groups, outs, strict=True):
            values[sl] = out
        flags = self._screen(shown)
        values = self._penalise(values, flags)
        rewards = await asyncio.to_thread(self._with_check, values, texts, kwargs)
        await asyncio.to_thread(
            self._track,
            prompts=prompts,
            texts=texts,
            scores=values,
            masses=None,
            columns=kwargs,
            trainer_state=trainer_state,
            log_metric=log_metric,
            log_extra=log_extra,
            flags=flags,
            audit_values=rewards,
        )
        return rewards


def check_whole_groups(slices: Sequence[slice], num_generations: int | None) -> None:
    """Refuse a batch whose runs of identical prompts are not whole GRPO groups.

    TRL puts the ``num_generations`` completions of a prompt next to each other, and a process
    sees ``per_device_train_batch_size * steps_per_generation`` of them per generation batch.
    When that is not a multiple of ``num_generations`` a group is split across processes (or
    batches), and ranking the part a process holds would compare completions against a partial
    group: the win rates would mean something else in every group. The CLI refuses that
    configuration at load; a reward used in a ``GRPOTrainer`` of your own refuses it here.

    Args:
        slices: the groups of one call, from :func:`~densereward.rewards._common.group_slices`.
        num_generations: the group size; ``None`` checks nothing.

    Raises:
        DataError: naming the group that is short and the settings that fix it.

    >>> check_whole_groups([slice(0, 2), slice(2, 4)], 2)
    >>> check_whole_groups([slice(0, 2), slice(2, 3)], 2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    densereward.errors.DataError: GroupVerifierReward got 1 completion(s) of one prompt (rows 2..2) ...
    """
    if not num_generations:
        return
    for sl in slices:
        n = sl.stop - sl.start
        if n != num_generations:
            raise DataError(
                f"GroupVerifierReward got {n} completion(s) of one prompt (rows {sl.start}.."
                f"{sl.stop - 1}) but num_generations={num_generations}: a GRPO group was split "
                "across processes or generation batches, and ranking part of it would compare "
                "each completion with a partial group. Each process must hold whole groups: make "
                "per_device_train_batch_size * steps_per_generation a multiple of "
                f"num_generations ({num_generations}) (in evaluation: the per-device eval batch "
                "size and num_generations_eval)"
            )


def _win_rates(result: Any, n: int) -> list[float | None]:
    """``RankResult.win_rate`` as a list, NaN (no valid comparison) -> ``None``."""
    rates = list(result.win_rate)
    if len(rates) != n:
        raise DataError(f"rank returned {len(rates)} win rates for {n} candidates")
    return [None if r is None or math.isnan(float(r)) else float(r) for r in rates]
