"""Scoring the rows: the verifier's scores, and the sparse reward's labels for unlabelled rows."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..config import VerifierConfig
from ..errors import ConfigError, DataError

__all__ = [
    "PROMPT_KINDS",
    "resolve_prompt_kind",
    "score_responses",
    "label_with_sparse_reward",
    "progress_line",
]

PROMPT_KINDS = ("reference_free", "answer_match", "anchored")
"""The prompts a GRPO verifier reward can read (``RewardConfig.reference_guided`` and
``reference_prompt``), each measurable with ``densereward eval-verifier --prompt``."""

logger = logging.getLogger(__name__)


def resolve_prompt_kind(prompt: str | None, reference_guided: bool, config: VerifierConfig) -> str:
    """The prompt kind a scoring reads: ``prompt`` when given, else ``reference_free``, or with
    the earlier ``reference_guided`` flag ``answer_match`` (``anchored`` when ``config.criteria``
    are set: the configured criteria with the reference, as that flag always read them).

    Raises:
        ConfigError: for a kind not in :data:`PROMPT_KINDS`.

    >>> resolve_prompt_kind(None, True, VerifierConfig()), resolve_prompt_kind("anchored", False, VerifierConfig())
    ('answer_match', 'anchored')
    """
    if prompt is None:
        if not reference_guided:
            return "reference_free"
        return "anchored" if config.criteria else "answer_match"
    if prompt not in PROMPT_KINDS:
        raise ConfigError(f"--prompt {prompt!r}; use one of {' | '.join(PROMPT_KINDS)}")
    return prompt


def score_responses(
    rows: Sequence[Mapping[str, Any]],
    config: VerifierConfig,
    *,
    chunk_size: int = 64,
    reference_guided: bool = False,
    prompt: str | None = None,
    progress: Callable[[int, int, float], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Score every row with ``Verifier(config).score_batch``, reading the prompt a GRPO verifier
    reward of that kind reads.

    ``prompt`` is one of :data:`PROMPT_KINDS`: ``reference_free`` (the problem and the response,
    the default), ``answer_match`` (the response's extracted final answer against the row's
    reference answer, the final answer of ``reference``, e.g. GSM8K's ``A: 18`` / ``#### 18``)
    or ``anchored`` (the reference answer and the full response on the correctness criterion).
    The request is built by :class:`~densereward.rewards.VerifierReward` itself, so the score is
    the one the reward would give (the injection pre-filter off, the whole response shown).
    ``reference_guided=True`` without ``prompt`` means ``answer_match``, or ``anchored`` when
    ``config.criteria`` are set (the earlier flag; :func:`resolve_prompt_kind`).
    ``progress(done, total, seconds)`` is called after each chunk; with it the chunks are at most
    a tenth of the rows (a report every ~10 %).

    Raises:
        ConfigError: for an unknown ``prompt``.
        DataError: a reference-guided ``prompt`` on rows of which some or all lack
            ``reference`` (:func:`check_references`).

    Returns:
        ``(records, stats)``: one ``{score, mass, abstained, reason, per_criterion,
        per_repeat}`` per row (the reads behind the score: ``per_repeat`` criterion-major,
        C x K values in ``[0, 1]`` or ``None``; both empty/``None`` for a row scored without
        a model call), and the verifier's ``stats.as_dict()``.

    Raises:
        BackendError, AbstentionError: as the verifier raises them.
    """
    from ..rewards.verifier import VerifierReward
    from ..verifier import Verifier

    kind = resolve_prompt_kind(prompt, reference_guided, config)
    if kind != "reference_free":
        check_references(rows, kind)
    v = Verifier(config)
    reader = VerifierReward(
        v,
        reference_guided=kind != "reference_free",
        reference_prompt="anchored" if kind == "anchored" else "answer_match",
        injection_penalty=None,
        verifier_input="full",
    )
    if progress is not None:
        chunk_size = max(1, min(chunk_size, math.ceil(len(rows) / 10)))
    records: list[dict[str, Any]] = []
    try:
        t0 = time.perf_counter()
        for start in range(0, len(rows), chunk_size):
            chunk = rows[start : start + chunk_size]
            columns = (
                {"answer": [r.get("reference") for r in chunk]} if kind != "reference_free" else {}
            )
            texts = [r["response"] for r in chunk]
            _, _, request = reader._request(texts, [r["problem"] for r in chunk], columns)
            results = v.score_batch(**request)
            for res in results:
                records.append(
                    {
                        "score": res.value,
                        "mass": res.mass,
                        "abstained": res.value is None,
                        "reason": res.reason,
                        "per_criterion": res.per_criterion,
                        "per_repeat": res.per_repeat,
                    }
                )
            elapsed = time.perf_counter() - t0
            logger.info("scored %d/%d responses (%.1f s)", len(records), len(rows), elapsed)
            if progress is not None:
                progress(len(records), len(rows), elapsed)
        stats = v.stats.as_dict()
    finally:
        v.close()
    return records, stats


def progress_line(done: int, total: int, seconds: float) -> str:
    """One progress line: done/total, rate and the time left at that rate.

    >>> progress_line(40, 400, 50.0)
    'eval-verifier: scored 40/400 responses (10%), 0.80/s, about 7 min 30 s left'
    >>> progress_line(400, 400, 500.0)
    'eval-verifier: scored 400/400 responses (100%), 0.80/s, done in 8 min 20 s'
    """
    rate = done / seconds if seconds > 0 else float("inf")
    left = (total - done) / rate if rate > 0 else float("inf")
    when = f"done in {_duration(seconds)}" if done >= total else f"about {_duration(left)} left"
    rate_text = f"{rate:.2f}/s" if math.isfinite(rate) else "-/s"
    return (
        f"eval-verifier: scored {done}/{total} responses ({100 * done // max(total, 1)}%), "
        f"{rate_text}, {when}"
    )


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    s = round(seconds)
    return f"{s // 60} min {s % 60} s" if s >= 60 else f"{s} s"


def check_references(rows: Sequence[Mapping[str, Any]], kind: str) -> None:
    """Refuse a reference-guided read (``answer_match``/``anchored``) of rows without a
    ``reference``: such a row would be read with the reference-free prompt, so the file would be
    measured with two prompts at once (a mixed file is refused too; it is not one measurement).

    Raises:
        DataError: naming how many rows lack ``reference``, the first one's ``file:line`` and
            the fix.
    """
    lacking = [i for i, r in enumerate(rows) if not r.get("reference")]
    if not lacking:
        return
    first = rows[lacking[0]].get("source") or f"row {lacking[0] + 1}"
    raise DataError(
        f"{len(lacking)} of {len(rows)} rows lack 'reference' (first: {first}), and the "
        f"reference-guided prompt ({kind}) reads it on every row: add 'reference' to each row, "
        "or drop --reference-guided (and --prompt) to measure the reference-free prompt"
    )


def label_with_sparse_reward(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Fill missing ``is_correct`` labels with the sparse reward (Math-Verify vs ``reference``).

    Rows that have a label keep it; the sparse reward's agreement with those labels is
    measured at the same time (:func:`densereward.rewards.agreement.sparse_agreement`).

    Returns:
        ``{"n_labelled": rows labelled now, "agreement": sparse_agreement(...) on the rows that
        already had labels}``.

    Raises:
        DataError: if a row without a label has no reference, or its check abstained.
    """
    from ..rewards.agreement import sparse_agreement, sparse_labels
    from ..rewards.math import MathChecker

    checker = MathChecker()
    try:
        agreement = sparse_agreement([r for r in rows if r.get("is_correct") is not None], checker)
        todo = [r for r in rows if r.get("is_correct") is None]
        for r, c in zip(todo, sparse_labels(todo, checker), strict=True):
            if c["reward"] is None:
                raise DataError(
                    f"cannot label problem {r['problem_id']!r} ({r['generator']}) with the sparse "
                    f"reward: {c['reason'] or 'no reference'}"
                )
            r["is_correct"] = c["reward"] == 1.0
            r["label_source"] = "sparse_reward"
    finally:
        checker.close()
    return {"n_labelled": len(todo), "agreement": agreement}
