"""Dense and group-relative verifier rewards for TRL's ``GRPOTrainer``.

* :class:`VerifierReward` -- the dense reward: the verifier's *expected* score of each
  completion, ``R = sum_g p(g) phi_g`` over the G score tokens, renormalised to ``[0, 1]``
  (criteria, granularity G, repeats K and style come from :class:`~densereward.config.VerifierConfig`).
* :class:`~densereward.rewards.group.GroupVerifierReward` (module
  :mod:`densereward.rewards.group`) -- the group-relative reward, built on the same base.
* :class:`VerifierMonitor` -- scores with the verifier for reward-quality tracking only and
  returns ``None`` for every completion (it never changes the training signal).

Async variants (:class:`AsyncVerifierReward`, :class:`AsyncVerifierMonitor`, and
``AsyncGroupVerifierReward``) have an ``async def __call__``; TRL runs them on its event-loop
thread concurrently with the other reward functions -- use them with network backends.

The verifier is passed either as a ``Verifier`` or as a zero-argument factory, which is
called on first use (so a ``--dry-run`` builds every reward function without loading weights).

What the verifier sees: by default the *final-answer part* of each completion
(:func:`densereward.answers.final_answer_part`: the text after the last ``</think>``), so a
thinking model is judged on what it answers, not on its scratch work; a completion whose
thinking never closed (cut by ``max_completion_length``) has no final answer and is shown as
empty, which scores 0 (dense) or loses every comparison (group) without a model call -- the
same verdict the sparse reward gives it. ``verifier_input="full"`` shows the whole text.
Completions without thinking tags are unaffected.

Abstention: a completion the verifier could not score gets ``None``. TRL turns it into NaN;
with several reward functions the weighted sum ``nansum``-s over the others; when *every*
reward function returns ``None`` for a completion TRL 1.16 logs a warning, excludes the row
from its group's mean/std and sets its advantage to 0 (no learning signal) -- it never
becomes a fake 0 or 0.5. The first call (a GRPO step's generation batch) in which at least
half of the dense reads abstain logs one warning with the reasons counted and their fix
(:class:`densereward.abstentions.AbstentionAlarm`): a verifier that abstains on nearly every
read leaves the dense reward empty (``rewards/verifier_dense/mean: None``) and the gated
reward silently sparse.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

from ..abstentions import AbstentionAlarm
from ..answers import final_answer_part
from ..errors import DataError
from ..verifier.lazy import VerifierHolder
from ._common import (
    check_lengths,
    check_trl,
    check_verifier_options,
    completion_texts,
    prompt_texts,
)
from .math import MathChecker, default_checker, references_from_columns
from .tracking import RewardQualityTracker

__all__ = [
    "VerifierReward",
    "AsyncVerifierReward",
    "VerifierMonitor",
    "AsyncVerifierMonitor",
]

logger = logging.getLogger(__name__)

VerifierLike = Any  # densereward.verifier.Verifier or a zero-argument factory returning one


class _VerifierRewardBase(VerifierHolder):
    """Shared plumbing: lazy verifier, problem texts, tracking.

    Picklable (TRL's async rollout worker ships reward functions to a spawned process): a
    built verifier is pickled as its recipe and rebuilt at the copy's first call
    (:class:`~densereward.verifier.lazy.VerifierHolder`); no lock is pickled.
    """

    default_name = "verifier"

    def __init__(
        self,
        verifier: VerifierLike,
        *,
        name: str | None = None,
        tracker: RewardQualityTracker | None = None,
        checker: MathChecker | None = None,
        problem_column: str = "problem",
        answer_column: str = "answer",
        level_column: str = "level",
        num_generations: int | None = None,
        criteria: Any = None,
        reference_guided: bool = True,
        verifier_input: Literal["final_answer", "full"] = "final_answer",
        reference_prompt: Literal["anchored", "answer_match", "process"] = "answer_match",
        injection_penalty: float | None = 1.0,
        guard_prompt: bool = False,
        abstain_with_check: bool = False,
    ) -> None:
        check_verifier_options(
            reference_guided=reference_guided,
            reference_prompt=reference_prompt,
            injection_penalty=injection_penalty,
            guard_prompt=guard_prompt,
            verifier_input=verifier_input,
        )
        self.reference_prompt = reference_prompt
        self.injection_penalty = injection_penalty
        self.guard_prompt = guard_prompt
        self.verifier_input = verifier_input
        super().__init__(verifier)
        self.__name__ = name or self.default_name
        self.tracker = tracker
        self.checker = checker
        self.problem_column = problem_column
        self.answer_column = answer_column
        self.level_column = level_column
        self.num_generations = num_generations
        self.criteria = criteria
        self.reference_guided = reference_guided
        self.abstain_with_check = bool(abstain_with_check)
        self._abstention_alarm = AbstentionAlarm("dense verifier reads", min_reads=1)
        self._audit: Any = None
        self._audit_index = 0

    def set_audit(self, audit: Any, index: int) -> None:
        """Report this function's rewards to ``audit`` (an
        :class:`~densereward.rewards.advantage.AdvantageAudit`) as component ``index``."""
        self._audit, self._audit_index = audit, int(index)

    def _for_audit(self, values: list[float | None]) -> list[float | None]:
        """What this function adds to TRL's reward sum (a monitor: nothing)."""
        return values

    def _audit_report(
        self, values: list[float | None], texts: list[Any], columns: dict[str, Any]
    ) -> dict[str, float] | None:
        """Report to the advantage audit; its metrics if this call completed the batch."""
        if self._audit is None:
            return None

        def verdicts() -> list[float | None]:
            refs = references_from_columns(columns, len(texts), self.answer_column)
            return [c.reward for c in (self.checker or default_checker()).check_batch(refs, texts)]

        return self._audit.report(self._audit_index, values, verdicts=verdicts)

    def _check_abstained(self, texts: list[Any], columns: dict[str, Any]) -> list[bool]:
        """``(n,)`` True where Math-Verify's check abstained on an item with a reference
        (:attr:`~densereward.rewards.math.MathCheck.abstained`: a timeout, a crashed worker);
        all False without a reference column. The checker caches each verdict, so the sparse
        reward, this function and the tracker check an item once."""
        if columns.get(self.answer_column) is None and columns.get("solution") is None:
            return [False] * len(texts)
        refs = references_from_columns(columns, len(texts), self.answer_column)
        checks = (self.checker or default_checker()).check_batch(refs, texts)
        return [c.abstained for c in checks]

    def _with_check(
        self, rewards: list[float | None], texts: list[Any], columns: dict[str, Any]
    ) -> list[float | None]:
        """``rewards`` with ``None`` where the correctness check abstained, when this function is
        a term of a reward built on correctness (``abstain_with_check``: ``mixed``,
        ``seed_recipe``): without it TRL's nansum would score the item on this term alone, as a
        wrong answer."""
        if not self.abstain_with_check:
            return rewards
        gone = self._check_abstained(texts, columns)
        return [None if g else r for r, g in zip(rewards, gone, strict=True)]

    def _watch_abstentions(self, results: Sequence[Any], trainer_state: Any) -> None:
        """Log one warning, the first time at least half of one call's reads abstained.

        One call is one generation batch of a GRPO step on this process; its reads are the
        completions sent to the verifier. The warning counts the reasons and names their fix.
        """
        reasons = [getattr(r, "reason", None) for r in results if getattr(r, "value", 0) is None]
        message = self._abstention_alarm.observe(len(results), reasons)
        if message is None:
            return
        step = getattr(trainer_state, "global_step", None)
        where = "" if step is None else f" at step {int(step) + 1}"
        logger.warning("%s%s: %s", self.__name__, where, message)

    def _shown(self, texts: Sequence[str | None]) -> list[str | None]:
        """What the verifier is shown of each completion (see the module docstring)."""
        if self.verifier_input == "full":
            return list(texts)
        out: list[str | None] = []
        for t in texts:
            if not isinstance(t, str):
                out.append(t)  # not text: the engine abstains on it (counted)
                continue
            part = final_answer_part(t)
            out.append("" if part is None else part)  # unclosed thinking: no final answer
        return out

    def _criteria(self, references: Sequence[str | None] | None) -> Any:
        """Criteria for ``score_batch``: the anchored prompt names the correctness criterion.

        The engine shows the reference with the full solution when criteria are given and the
        extracted final answer alone (``answer_match``) when they are not. With
        ``guard_prompt`` every criterion ends with :data:`densereward.prompts.MANIPULATION_WARNING`.
        """
        from ..prompts import DEFAULT_CRITERIA, MANIPULATION_WARNING, normalize_criteria

        crit = self.criteria
        if crit is None and self.reference_prompt == "process":
            from .process import PROCESS_CRITERION

            crit = {"process": PROCESS_CRITERION}
        anchored = references is not None and self.reference_prompt == "anchored"
        if crit is None and (anchored or self.guard_prompt):
            crit = getattr(getattr(self.verifier, "config", None), "criteria", None)
            crit = crit or DEFAULT_CRITERIA
        if self.guard_prompt:
            crit = {
                k: v + MANIPULATION_WARNING
                for k, v in normalize_criteria(crit, DEFAULT_CRITERIA).items()
            }
        return crit

    def _screen(self, shown: Sequence[str | None]) -> list[bool] | None:
        """Injection pre-filter flags of the shown texts (``None`` when the filter is off)."""
        if self.injection_penalty is None:
            return None
        from ..injection import detect_injection

        return [detect_injection(t).flagged for t in shown]

    def _penalise(self, values: list[float | None], flags: list[bool] | None) -> list[float | None]:
        """``max(0, v - injection_penalty)`` for flagged completions (0 at penalty 1, even if
        the verifier abstained: the manipulation attempt is the verdict)."""
        if flags is None:
            return values
        pen = float(self.injection_penalty or 0.0)
        out = list(values)
        for i, flagged in enumerate(flags):
            if flagged:
                v = out[i]
                out[i] = 0.0 if pen >= 1.0 else (None if v is None else max(0.0, v - pen))
        return out

    @staticmethod
    def _flag_metrics(flags: list[bool] | None) -> dict[str, float]:
        if flags is None or not flags:
            return {}
        return {
            "n_injection_flagged": float(sum(flags)),
            "frac_injection_flagged": sum(flags) / len(flags),
        }

    def _references(self, columns: dict[str, Any], n: int) -> list[str | None] | None:
        """Reference answers for the verifier prompt when ``reference_guided`` (else ``None``)."""
        if not self.reference_guided:
            return None
        return references_from_columns(columns, n, self.answer_column)

    def _problems(self, prompts: Sequence[Any], columns: dict[str, Any]) -> list[str]:
        col = columns.get(self.problem_column)
        if col is not None:
            check_lengths(completions=prompts, **{self.problem_column: col})
            return [str(x) for x in col]
        return prompt_texts(prompts)

    def _track(
        self,
        *,
        prompts: Sequence[Any],
        texts: list[str],
        scores: list[float | None],
        masses: list[float | None] | None,
        columns: dict[str, Any],
        trainer_state: Any,
        log_metric: Any,
        log_extra: Any,
        flags: list[bool] | None = None,
        audit_values: list[float | None] | None = None,
        read: list[bool] | None = None,
    ) -> None:
        """Report to the advantage audit (``audit_values``: this function's rewards, default
        :meth:`_for_audit` of ``scores``), then log the reward-quality metrics of ``scores``
        (``read``: ``(n,)`` False where the verifier gave the score without a read)."""
        audit = self._audit_report(
            self._for_audit(scores) if audit_values is None else audit_values, texts, columns
        )
        if self.tracker is None:
            if audit and log_metric is not None:
                for k, v in audit.items():
                    log_metric(f"verifier/{k}", v)
            return
        if columns.get(self.answer_column) is None and columns.get("solution") is None:
            logger.warning(
                "reward-quality tracking skipped: no %r column with reference answers",
                self.answer_column,
            )
            return
        # a column whose length differs from the completions is a caller bug: raise
        refs = references_from_columns(columns, len(texts), self.answer_column)
        checks = (self.checker or default_checker()).check_batch(refs, texts)
        levels = columns.get(self.level_column)
        self.tracker.update(
            prompts=prompts,
            scores=scores,
            correct=[c.reward for c in checks],
            levels=levels,
            masses=masses,
            num_generations=self.num_generations,
            trainer_state=trainer_state,
            log_metric=log_metric,
            log_extra=log_extra,
            score_name=f"{self.__name__}_score",
            extra_metrics={
                **self._verifier_counters(),
                **self._flag_metrics(flags),
                **(audit or {}),
            },
            answer_reasons=[c.reason for c in checks],
            read=read,
        )

    def _verifier_counters(self) -> dict[str, float]:
        """Failure / input counters of the verifier engine, cumulative since it was built, so
        logged as ``verifier/total/n_*`` (a ``verifier/n_*`` key counts this batch only);
        ``total/n_unread_no_answer``: completions its ``answer_match`` prompt scored 0 without a
        read, the running sum of the batches' ``n_unread``."""
        stats = getattr(self.verifier, "stats", None)
        if stats is None:
            return {}
        d = stats.as_dict()
        keys = (
            "n_failures",
            "n_truncated",
            "n_invalid_input",
            "n_empty",
            "n_nan_logprobs",
            "n_cache_hits",
            "n_low_mass",
            "n_unread_no_answer",
        )
        return {f"total/{k}": float(d[k]) for k in keys if k in d}

    def close(self) -> None:
        """Close the verifier if it was built."""
        v = self._verifier
        if hasattr(v, "close") and hasattr(v, "score_batch"):
            v.close()


def _values(
    results: Sequence[Any], n: int, who: str
) -> tuple[list[float | None], list[float | None]]:
    if len(results) != n:
        raise DataError(f"{who}: the verifier returned {len(results)} scores for {n} completions")
    values = [None if r.value is None or math.isnan(r.value) else float(r.value) for r in results]
    masses = [getattr(r, "mass", None) for r in results]
    return values, masses


class VerifierReward(_VerifierRewardBase):
    """Dense verifier reward: the expected score of each completion, in ``[0, 1]``.

    TRL reward-function contract: keyword arguments ``prompts``, ``completions`` (lists of
    message dicts or strings), ``completion_ids``, dataset columns (``problem``, ``answer``,
    ``level``), ``trainer_state``, ``log_metric``, ``log_extra``; returns one
    ``float | None`` per completion; ``__name__`` (default ``"verifier_dense"``) names the
    ``rewards/<name>/mean`` metric.

    Args:
        verifier: A :class:`densereward.verifier.Verifier` or a zero-argument factory.
        name: ``__name__`` for TRL's logs.
        tracker: If given, every call also logs reward-quality metrics (``verifier/*``).
        checker: Math-Verify checker used for the tracker's ground truth.
        problem_column: Dataset column with the problem text (falls back to the last user
            message of the prompt).
        answer_column: Dataset column with the reference answer (tracking only).
        level_column: Dataset column with the difficulty level (tracking only).
        num_generations: GRPO group size (tracking: groups for zero-spread / tie metrics).
        criteria: Criteria passed to ``score_batch`` (``None`` = the verifier config's).
        reference_guided: Show the verifier the reference answer (default on, as
            :class:`~densereward.rewards.RewardConfig`: reference-free judging is what a small
            verifier can be talked into a top score on, docs/reward_hacking.md).
        verifier_input: ``"final_answer"`` (default: the text after the last ``</think>``;
            unclosed thinking is shown as empty and scores 0) or ``"full"`` (the whole text).
        reference_prompt: With ``reference_guided``: ``"answer_match"`` (default: the
            extracted final answer against the reference), ``"process"`` (the full solution
            judged on :data:`~densereward.rewards.process.PROCESS_CRITERION`, progress along the
            steps, with the reference when ``reference_guided``) or ``"anchored"`` (the reference and
            the full solution on the correctness criterion, so the reasoning is still judged).
        injection_penalty: Pre-filter (:func:`densereward.injection.detect_injection`) on the
            shown text: a flagged completion gets ``max(0, score - injection_penalty)`` (0 at
            1, even where the verifier abstained; the default, as ``RewardConfig``); ``None``
            = no pre-filter.
        guard_prompt: End every criterion with :data:`densereward.prompts.MANIPULATION_WARNING`
            (text addressed to the grader is evidence of manipulation). Not with the
            ``answer_match`` prompt, which does not show the response.
        abstain_with_check: Also return ``None`` where Math-Verify's check abstained on an item
            with a reference (a timeout; :attr:`~densereward.rewards.math.MathCheck.abstained`):
            set by ``mixed`` and ``seed_recipe``, whose correctness term abstains there, so TRL
            and ``serve`` see the whole row abstain rather than score it as a wrong answer.

    Returns (from ``__call__``):
        ``(len(completions),)`` expected scores in ``[0, 1]``; ``None`` where the verifier
        abstained (see the module docstring), or, with ``abstain_with_check``, the check.

    Raises:
        ConfigError: at construction, for an option outside its range or a combination that
            cannot work (:func:`~densereward.rewards._common.check_verifier_options`).
        DataError: from ``__call__``, if a per-completion column's length differs from
            ``len(completions)``.
    """

    default_name = "verifier_dense"

    def _prepare(self, prompts, completions, kwargs):
        texts = completion_texts(completions)
        check_lengths(completions=texts, prompts=prompts)
        return texts, self._problems(prompts, kwargs)

    def _request(
        self, texts: list[str | None], problems: list[str], columns: dict[str, Any]
    ) -> tuple[list[bool] | None, list[int], dict[str, Any]]:
        """Pre-filter flags, the indices the verifier scores and its ``score_batch`` kwargs.

        At ``injection_penalty >= 1`` a flagged completion's score is 0 whatever the verifier
        says, so it is not sent to the verifier.
        """
        shown, refs = self._shown(texts), self._references(columns, len(texts))
        flags = self._screen(shown)
        skip = flags is not None and float(self.injection_penalty or 0.0) >= 1.0
        idx = [i for i in range(len(texts)) if not (skip and flags[i])]
        request = {
            "problems": [problems[i] for i in idx],
            "responses": [shown[i] for i in idx],
            "criteria": self._criteria(refs),
            "references": None if refs is None else [refs[i] for i in idx],
            **self._prompt_kind(refs),
        }
        return flags, idx, request

    def _prompt_kind(self, refs: list[str | None] | None) -> dict[str, str]:
        """The prompt kind, stated rather than left to the engine to infer from the criteria
        (``verifier.criteria`` used to turn ``answer_match`` into the anchored prompt silently);
        empty for a verifier whose ``score_batch`` takes no ``prompt``."""
        import inspect

        try:
            takes = "prompt" in inspect.signature(self.verifier.score_batch).parameters
        except (AttributeError, TypeError, ValueError):
            return {}
        if not takes:
            return {}
        answer_match = refs is not None and self.reference_prompt == "answer_match"
        return {"prompt": "answer_match" if answer_match else "pointwise"}

    def _rewards(
        self,
        prompts: Sequence[Any],
        texts: list[Any],
        values: list[float | None],
        columns: dict[str, Any],
        trainer_state: Any,
    ) -> list[float | None]:
        """The rewards returned to TRL from the judge's ``values`` (here: the values; a
        composition such as :class:`~densereward.rewards.gated.GatedVerifierReward` overrides
        it). The tracker always measures ``values``, the judge's scores."""
        return values

    def _collect(
        self, results: Sequence[Any], idx: list[int], n: int, flags: list[bool] | None
    ) -> tuple[list[float | None], list[float | None], list[bool]]:
        """``(values, masses, read)`` of all ``n`` completions, the injection penalty applied;
        ``read[i]`` is False where the verifier gave the value without a model read
        (:attr:`~densereward.results.ScoreResult.unread`: no final answer, empty response)."""
        got, got_masses = _values(results, len(idx), self.__name__)
        values: list[float | None] = [None] * n
        masses: list[float | None] = [None] * n
        read = [True] * n
        for j, i in enumerate(idx):
            values[i], masses[i] = got[j], got_masses[j]
            read[i] = not getattr(results[j], "unread", False)
        return self._penalise(values, flags), masses, read

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
        texts, problems = self._prepare(prompts, completions, kwargs)
        flags, idx, request = self._request(texts, problems, kwargs)
        results = self.verifier.score_batch(**request) if idx else []
        self._watch_abstentions(results, trainer_state)
        values, masses, read = self._collect(results, idx, len(texts), flags)
        rewards = self._with_check(
            self._rewards(prompts, texts, values, kwargs, trainer_state), texts, kwargs
        )
        self._track(
            prompts=prompts,
            texts=texts,
            scores=values,
            masses=masses,
            columns=kwargs,
            trainer_state=trainer_state,
            log_metric=log_metric,
            log_extra=log_extra,
            flags=flags,
            audit_values=self._for_audit(rewards),
            read=read,
        )
        return rewards


class AsyncVerifierReward(VerifierReward):
    """:class:`VerifierReward` with ``async def __call__`` (``Verifier.ascore_batch``), for network backends."""

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
        texts, problems = self._prepare(prompts, completions, kwargs)
        flags, idx, request = self._request(texts, problems, kwargs)
        results = await self.verifier.ascore_batch(**request) if idx else []
        self._watch_abstentions(results, trainer_state)
        values, masses, read = self._collect(results, idx, len(texts), flags)
        rewards = await asyncio.to_thread(
            self._rewards, prompts, texts, values, kwargs, trainer_state
        )
        rewards = await asyncio.to_thread(self._with_check, rewards, texts, kwargs)
        await asyncio.to_thread(
            self._track,
            prompts=prompts,
            texts=texts,
            scores=values,
            masses=masses,
            columns=kwargs,
            trainer_state=trainer_state,
            log_metric=log_metric,
            log_extra=log_extra,
            flags=flags,
            audit_values=self._for_audit(rewards),
            read=read,
        )
        return rewards


class VerifierMonitor(VerifierReward):
    """Scores completions with the verifier for tracking only; returns ``None`` for each.

    Used with the sparse reward so a run still logs ``verifier/*`` dynamics. Returning
    ``None`` keeps it out of TRL's weighted ``nansum`` entirely (a weight of 0 would not:
    it would turn a row on which the sparse reward abstains into a spurious 0).
    """

    default_name = "verifier_monitor"

    def _for_audit(self, values: list[float | None]) -> list[float | None]:
        return [None] * len(values)

    def __call__(self, prompts, completions, **kwargs: Any) -> list[float | None]:  # type: ignore[override]
        super().__call__(prompts, completions, **kwargs)
        return [None] * len(completions)


class AsyncVerifierMonitor(AsyncVerifierReward):
    """Async :class:`VerifierMonitor`."""

    default_name = "verifier_monitor"

    def _for_audit(self, values: list[float | None]) -> list[float | None]:
        return [None] * len(values)

    async def __call__(self, prompts, completions, **kwargs: Any) -> list[float | None]:  # type: ignore[override]
        await super().__call__(prompts, completions, **kwargs)
        return [None] * len(completions)
