"""Worker process of :class:`densereward.rewards.math.MathChecker` (``python -m`` this module).

Serves ``(reference, extracted answer)`` requests over stdin/stdout pipes, running Math-Verify with
its signal-based timeouts disabled; the parent enforces the deadline by killing this process.
Kept apart from ``math.py`` so ``python -m`` does not re-import a module the package already
loaded.
"""

from __future__ import annotations

import logging
import os
from multiprocessing.connection import Connection
from typing import Any

from ..answers import answers_equal, mixed_number

__all__ = ["check_one", "serve"]


def check_one(
    gold: str, answer: str, gold_cache: dict[str, Any]
) -> tuple[float | None, str, str | None]:
    """Parse and verify one (reference, extracted final answer) pair with Math-Verify, no timeouts.

    ``answer`` is what :func:`densereward.answers.extract_answer` found in the completion; it
    is parsed as the content of a ``\\boxed{}`` (LaTeX first, then a plain expression). Both
    sides read a mixed number as its sum, and numbers compare under the relative rule of
    :func:`densereward.answers.answers_equal`.

    Returns:
        ``(reward, predicted, reason)``: reward 1.0 / 0.0 / None (reference unparseable);
        reason ``"answer_unparseable"`` when Math-Verify reads nothing in the answer.
    """
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    if gold not in gold_cache:
        text = mixed_number(gold)
        gold_text = text if "\\boxed" in text or text.startswith("$") else f"\\boxed{{{text}}}"
        gold_cache[gold] = parse(gold_text, parsing_timeout=None)
    gold_parsed = gold_cache[gold]
    if not gold_parsed:
        return None, "", "gold_unparseable"
    pred = parse(
        f"\\boxed{{{mixed_number(answer)}}}",
        extraction_config=[
            LatexExtractionConfig(
                normalization_config=NormalizationConfig(units=True, malformed_operators=True),
                boxed_match_priority=0,
                try_extract_without_anchor=False,
            ),
            ExprExtractionConfig(try_extract_without_anchor=False),
        ],
        extraction_mode="first_match",
        parsing_timeout=None,
    )
    if not pred:
        return 0.0, answer, "answer_unparseable"
    ok = answers_equal(gold_parsed, pred)
    return (1.0 if ok else 0.0), answer, None


def serve(recv: Any, send: Any) -> None:
    """Answer ``(gold, answer)`` requests until ``None`` or EOF; says ``"ready"`` first."""
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    import math_verify  # noqa: F401  (pay the import before "ready")

    gold_cache: dict[str, Any] = {}
    send("ready")
    while True:
        try:
            msg = recv()
        except EOFError:
            return
        if msg is None:
            return
        gold, answer = msg
        try:
            out = check_one(gold, answer, gold_cache)
        except Exception as exc:  # a parser bug on one answer must not kill the worker
            out = (None, "", f"worker_error: {type(exc).__name__}")
        if len(gold_cache) > 4096:
            gold_cache.clear()
        send(out)


if __name__ == "__main__":
    _out = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)  # stray prints from parsers go to stderr, never into the result pipe
    _in = Connection(os.dup(0), writable=False)
    serve(_in.recv, _out.send)
