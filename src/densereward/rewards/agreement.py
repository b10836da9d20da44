"""Agreement of the sparse reward (the ground truth of every verifier metric) with real labels.

Every verifier metric the tracker and ``eval-verifier`` report (TPR, TNR, precision, AUROC,
verifier gain, pass rate) is computed against the sparse reward
(:class:`~densereward.rewards.math.MathCorrectnessReward`). These helpers measure how often
it agrees with a labelled file's ``is_correct``, and label a file that has references but no
labels.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from .math import MathChecker, reference_answer

__all__ = ["sparse_agreement", "sparse_labels"]


def sparse_labels(
    rows: Sequence[Mapping[str, Any]], checker: MathChecker | None = None
) -> list[dict[str, Any]]:
    """Run the sparse reward on each row's response against its reference.

    Args:
        rows: ``(n,)`` rows with ``response`` and ``reference`` (a final answer, or a worked
            solution ending in ``#### N`` / ``A: N``; read with
            :func:`~densereward.rewards.math.reference_answer`).
        checker: The Math-Verify checker (default: a fresh process-backed one).

    Returns:
        ``(n,)`` dicts ``{reward, predicted, reason, reference}``; ``reward`` is ``1.0``,
        ``0.0`` or ``None`` (no reference, or the check abstained).
    """
    checker = checker or MathChecker()
    refs = [reference_answer(r.get("reference")) for r in rows]
    checks = checker.check_batch(refs, [str(r.get("response") or "") for r in rows])
    return [
        {"reward": c.reward, "predicted": c.predicted, "reason": c.reason, "reference": ref}
        for c, ref in zip(checks, refs, strict=True)
    ]


def sparse_agreement(
    rows: Sequence[Mapping[str, Any]],
    checker: MathChecker | None = None,
    *,
    max_listed: int = 50,
) -> dict[str, Any]:
    """Agreement of the sparse reward with the labels ``is_correct`` of ``rows``.

    Agreement = share of rows where ``reward == 1.0`` equals ``is_correct``, over the rows
    with a reference, a label and a non-abstained check.

    Args:
        rows: Rows with ``response``, ``reference``, ``is_correct`` and optionally
            ``generator`` and ``problem_id``.
        checker: The Math-Verify checker.
        max_listed: At most this many disagreements are listed.

    Returns:
        ``{"overall": {"agreement", "n", "n_positive_labels", "n_positive_rewards"},
        "per_generator": {g: {...}}, "n_abstained": int, "disagreements": [...]}``;
        ``agreement`` is ``None`` when no row qualifies.
    """
    checks = sparse_labels(rows, checker)
    groups: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    n_abstained = 0
    disagreements: list[dict[str, Any]] = []
    for row, c in zip(rows, checks, strict=True):
        label = row.get("is_correct")
        if label is None or c["reference"] is None:
            continue
        if c["reward"] is None:
            n_abstained += 1
            continue
        pair = (c["reward"] == 1.0, bool(label))
        groups[str(row.get("generator") or "all")].append(pair)
        if pair[0] != pair[1] and len(disagreements) < max_listed:
            disagreements.append(
                {
                    "problem_id": row.get("problem_id"),
                    "generator": row.get("generator"),
                    "is_correct": bool(label),
                    "sparse_reward": c["reward"],
                    "predicted": c["predicted"],
                    "reference": c["reference"],
                    "reason": c["reason"],
                }
            )

    def summary(pairs: list[tuple[bool, bool]]) -> dict[str, Any]:
        n = len(pairs)
        return {
            "agreement": (sum(r == lab for r, lab in pairs) / n) if n else None,
            "n": n,
            "n_positive_labels": sum(lab for _, lab in pairs),
            "n_positive_rewards": sum(r for r, _ in pairs),
        }

    return {
        "overall": summary([p for ps in groups.values() for p in ps]),
        "per_generator": {g: summary(ps) for g, ps in sorted(groups.items())},
        "n_abstained": n_abstained,
        "disagreements": disagreements,
    }
