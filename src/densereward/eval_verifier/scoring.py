"""Scoring the rows: the verifier's scores, and the sparse reward's labels for unlabelled rows."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..config import VerifierConfig
from ..errors import DataError

__all__ = ["score_responses", "label_with_sparse_reward"]

logger = logging.getLogger(__name__)


def score_responses(
    rows: Sequence[Mapping[str, Any]],
    config: VerifierConfig,
    *,
    chunk_size: int = 64,
    reference_guided: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Score every row with ``Verifier(config).score_batch``.

    By default the verifier sees the problem and the response only. With
    ``reference_guided=True`` it also gets each row's reference answer (the final answer of
    ``reference``, e.g. GSM8K's ``A: 18`` / ``#### 18``), which makes the engine use its
    reference-guided ``answer_match`` criterion when no criteria are configured.

    Returns:
        ``(records, stats)``: one ``{score, mass, abstained, reason, per_criterion,
        per_repeat}`` per row (the reads behind the score: ``per_repeat`` criterion-major,
        C x K values in ``[0, 1]`` or ``None``; both empty/``None`` for a row scored without
        a model call), and the verifier's ``stats.as_dict()``.

    Raises:
        BackendError, AbstentionError: as the verifier raises them.
    """
    from ..rewards.math import reference_answer  # the one answer-extraction policy
    from ..verifier import Verifier

    v = Verifier(config)
    records: list[dict[str, Any]] = []
    try:
        t0 = time.perf_counter()
        for start in range(0, len(rows), chunk_size):
            chunk = rows[start : start + chunk_size]
            refs = (
                [reference_answer(r.get("reference")) for r in chunk] if reference_guided else None
            )
            results = v.score_batch(
                problems=[r["problem"] for r in chunk],
                responses=[r["response"] for r in chunk],
                references=refs,
            )
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
            logger.info(
                "scored %d/%d responses (%.1f s)", len(records), len(rows), time.perf_counter() - t0
            )
        stats = v.stats.as_dict()
    finally:
        v.close()
    return records, stats


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
