"""Progress on the path to the answer: a programmatic process reward, and a shuffled-judge control.

A dense reward that beat outcome rewards in public work scores *progress on the path* to a
verifiable answer (PAV, arXiv 2410.08146; PRIME, arXiv 2502.01456), not how close a wrong final
number is. On multi-step arithmetic with running totals (reasoning-gym ``chain_sum`` with 3-4
terms, answered as ``"3+4=7; 7-2=5; The answer is 5."``) progress is checkable:

* :func:`chain_terms` reads the terms of a ``chain_sum`` problem; :func:`running_totals` gives
  the totals after each operation;
* :func:`process_score` is the share of those running totals a completion states correctly, in
  order (the oracle process reward, in ``[0, 1]``);
* :class:`ProcessOracle` offers :func:`process_score` through the verifier interface
  (``score_batch``), so every verifier reward kind (``gated``, ``dense``) can run on the oracle
  in place of a judge (``reward.judge: process_oracle``);
* :class:`ShuffledJudge` permutes a judge's scores within each GRPO group (``reward.judge:
  shuffled``): the same magnitudes, no information, the negative control of a comparison.

The judge's own process read is the ``process`` prompt (``reward.reference_prompt: process``:
:data:`PROCESS_CRITERION` on the full solution, with the reference answer).
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..verifier.lazy import VerifierHolder

__all__ = [
    "PROCESS_CRITERION",
    "CHAIN_SUM_FORMAT",
    "chain_terms",
    "running_totals",
    "stated_totals",
    "process_score",
    "ProcessOracle",
    "ShuffledJudge",
]

PROCESS_CRITERION = (
    "Check the solution step by step. Each step must take the previous running total, apply the "
    "next operation of the problem to it, and state the correct result. The more steps that are "
    "correct, in order, the higher the score: all steps correct and the right final answer is the "
    "top score; a correct first step followed by a slip is better than a wrong first step."
)
"""The judge's criterion of the ``process`` prompt: progress along the steps, not only the final
answer."""

CHAIN_SUM_FORMAT = (
    "Work from left to right, one running total per step, and end with the answer, exactly in "
    "this form: 3+4=7; 7-2=5; The answer is 5."
)
"""A system prompt for ``chain_sum`` that asks for the running-total form :func:`process_score` reads."""

_PROBLEM = re.compile(r"(-?\d+(?:\s*[-+]\s*\d+)+)\s*=\s*$")
_TERM = re.compile(r"([-+])\s*(\d+)")
_STEP = re.compile(r"(-?\d+)\s*([-+])\s*(\d+)\s*=\s*(-?\d+)")


def chain_terms(problem: str) -> list[int] | None:
    """The signed terms of a ``chain_sum`` problem (``"... 4 + 3 - 2 ="`` -> ``[4, 3, -2]``).

    Returns ``None`` when the text does not end with such an expression.

    >>> chain_terms("State the final answer to the following arithmetic problem: 0 - 4 - 8 + 7 =")
    [0, -4, -8, 7]
    >>> chain_terms("What is 2+2?") is None
    True
    """
    m = _PROBLEM.search(problem.strip())
    if m is None:
        return None
    expr = m.group(1).replace(" ", "")
    first = re.match(r"-?\d+", expr)
    terms = [int(first.group(0))]
    terms += [int(v) if s == "+" else -int(v) for s, v in _TERM.findall(expr[first.end() :])]
    return terms


def running_totals(terms: Sequence[int]) -> list[int]:
    """The totals after each operation: ``[4, 3, -2]`` -> ``[7, 5]`` (``len(terms) - 1`` steps).

    >>> running_totals([4, 3, -2])
    [7, 5]
    """
    return list(itertools.accumulate(terms))[1:]


def stated_totals(completion: str) -> list[int]:
    """The results the completion states, in order, from its ``a+b=c`` / ``a-b=c`` steps.

    >>> stated_totals("4+3=7; 7-2=6; The answer is 6.")
    [7, 6]
    """
    return [int(m.group(4)) for m in _STEP.finditer(completion)]


def process_score(problem: str, completion: str | None) -> float | None:
    """Share of the problem's running totals the completion states correctly, step by step.

    Step ``k`` counts when the completion's ``k``-th stated result equals the ``k``-th running
    total (so a slip costs that step; later steps count again only if they get back onto the
    true totals). ``None`` when the problem is not a ``chain_sum`` expression (no oracle) or the
    completion is not text.

    Args:
        problem: the problem text (``chain_sum``).
        completion: the policy's answer.

    Returns:
        A value in ``[0, 1]``, or ``None``.

    >>> p = "State the final answer to the following arithmetic problem: 4 + 3 - 2 ="
    >>> process_score(p, "4+3=7; 7-2=5; The answer is 5."), process_score(p, "4+3=7; 7-2=6; The answer is 6.")
    (1.0, 0.5)
    >>> process_score(p, "The answer is 5.")
    0.0
    """
    terms = chain_terms(problem) if isinstance(problem, str) else None
    if terms is None or len(terms) < 2 or not isinstance(completion, str):
        return None
    truth = running_totals(terms)
    said = stated_totals(completion)
    hits = sum(1 for k, t in enumerate(truth) if k < len(said) and said[k] == t)
    return hits / len(truth)


class ProcessOracle:
    """:func:`process_score` behind the verifier interface (``score_batch``), for the reward kinds.

    ``score_batch(problems, responses, ...)`` returns one
    :class:`~densereward.results.ScoreResult` per response: ``value`` the process score
    (``None``, an abstention with its reason, where the problem is not a ``chain_sum``
    expression), ``mass`` 1.0. No model is read; references and criteria are ignored.
    """

    def __init__(self) -> None:
        self.config = None

    def score_batch(self, problems, responses, criteria=None, references=None, prompt=None, **_):
        from ..results import ScoreResult

        out = []
        for p, r in zip(problems, responses, strict=True):
            v = process_score(p, r)
            out.append(
                ScoreResult(
                    value=v,
                    mass=1.0 if v is not None else None,
                    reason=None if v is not None else "not a chain_sum problem",
                )
            )
        return out

    def close(self) -> None:
        """Nothing to release."""


class ShuffledJudge(VerifierHolder):
    """A judge whose scores are permuted within each GRPO group: the negative control.

    Each ``score_batch`` call reads the wrapped verifier, then permutes the results inside every
    run of identical problems (a GRPO group) with a generator seeded by ``seed`` and the call's
    index: the distribution of scores in a group is the judge's, the assignment to completions
    carries no information about them.

    Args:
        verifier: the judge (a ``Verifier`` or a zero-argument factory, built on first use).
        seed: seed of the permutations.
    """

    def __init__(self, verifier: Any, seed: int = 0) -> None:
        super().__init__(verifier)
        self.seed = int(seed)
        self._calls = 0
        self._count_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_count_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._count_lock = threading.Lock()

    @property
    def config(self) -> Any:
        return getattr(self.verifier, "config", None)

    @property
    def stats(self) -> Any:
        return getattr(self.verifier, "stats", None)

    def score_batch(self, problems, responses, **kwargs):
        results = list(self.verifier.score_batch(problems=problems, responses=responses, **kwargs))
        with self._count_lock:
            call = self._calls
            self._calls += 1
        rng = np.random.default_rng([self.seed, call])
        for _, run in itertools.groupby(range(len(problems)), key=lambda i: problems[i]):
            idx = list(run)
            perm = rng.permutation(len(idx))
            block = [results[i] for i in idx]
            for j, i in enumerate(idx):
                results[i] = block[perm[j]]
        return results

    def close(self) -> None:
        v = self._verifier
        if hasattr(v, "close") and hasattr(v, "score_batch"):
            v.close()
