r"""The one answer-extraction policy: where a completion's final answer is, and what it is.

Every place that reads a final answer uses this module: the sparse reward
(:class:`~densereward.rewards.math.MathCorrectnessReward`), the reward-quality tracker's ground
truth, the reference-guided verifier prompt (``answer_match``), the dense and group rewards
(which show the verifier the final-answer part) and ``eval-verifier``.

The policy, in order:

1. **Thinking.** The final-answer part of a completion is the text after the *last*
   ``</think>``. A completion that opens ``<think>`` and never closes it (cut by
   ``max_completion_length``) has **no final answer** (reason ``"unclosed_thinking"``): paying
   for an answer written inside unfinished thinking would teach a policy never to finish.
   Text with no thinking tags is its own final-answer part.
2. **Boxed.** In the final-answer part, the last *complete* ``\boxed{...}`` or ``\fbox{...}``
   (braces matched, so ``\boxed{\frac{1}{2}}`` comes out whole). If the last box is
   unfinished (``\boxed{`` with no closing brace) or empty, there is no answer -- never a
   fall-back to an earlier box.
3. **Final-answer line** (``answer_format="auto"`` or ``"final_line"``): else the last explicit
   final-answer statement: ``The answer is X``, ``The final answer is X``, ``Final answer: X``,
   ``Answer: X``, ``**Answer:** X``, ``A: X`` (at the start of a line, GSM8K's form) or
   ``#### X`` (at the start of a line, or anywhere in the last 300 characters, as verl's GSM8K
   scorer takes it: ``23 + 45 = 68. #### 68`` states 68). A number merely mentioned in prose (``I think it is 5 or maybe 7``) is not an
   answer.
4. **Bare answer** (``answer_format="auto"`` only): else a final-answer part that is nothing
   but one number or math expression (``12``, ``$\frac{1}{2}$``, ``1 1/4``, ``-3.5.``) is its
   own final answer. Any word (two or more letters outside a LaTeX command) makes it prose, and
   a relation (``7 + 5 = 12``: work shown, no answer stated) or a second line is no answer.

When are two answers equal (:func:`answers_equal`, the sparse reward's check)? Math-Verify
decides, with two rules of this module:

* **Numbers** (:func:`numbers_equal`): integers, fractions and other exact values compare
  exactly (``1000001 != 1000000``, ``1/2^98 != 1/2^99``); where either side is written as a
  decimal they must agree to a *relative* tolerance, ``|a - b| <= 1e-6 * max(|a|, |b|)``
  (:data:`REL_TOL`), so ``0.3333333 == 1/3`` and ``2.5 == 5/2`` but ``0.0000002 != 0.0000001``
  (Math-Verify alone rounds to 6 decimal places, which makes every number below 5e-7 equal to
  0, and chops differences below 1e-15). The rule holds inside tuples, sets, intervals,
  matrices and equations too.
* **Mixed numbers** (:func:`mixed_number`): a whole number followed by a proper fraction,
  ``1 1/4`` or ``1\frac{1}{4}``, is their sum (5/4); the sign applies to both (``-1 1/4`` is
  -5/4). A fraction that is not proper (``2 3/2``) is left to Math-Verify.

``answer_format``:

* ``"auto"`` (default): boxed, else a final-answer line, else a bare answer.
* ``"boxed"``: only ``\boxed{}`` / ``\fbox{}`` (TRL ``accuracy_reward``'s strict convention,
  for prompts that demand a box).
* ``"final_line"``: only a final-answer line.

>>> extract_answer(r"First guess \boxed{12}. Rechecking, the answer is \boxed{")
ExtractedAnswer(answer=None, reason='no_answer', source=None)
>>> extract_answer("... so she makes $18 a day\nA: 18").answer
'18'
>>> extract_answer("<think>\nmaybe \\boxed{5}? no.\n</think>\nThe answer is \\boxed{7}.").answer
'7'
>>> extract_answer("<think>\nI get \\boxed{7} but let me keep checking").reason
'unclosed_thinking'
>>> extract_answer("I think it is 5 or maybe 7").answer is None
True
>>> extract_answer("12")
ExtractedAnswer(answer='12', reason=None, source='bare')
"""

from __future__ import annotations

import contextvars
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from .errors import ConfigError

__all__ = [
    "ANSWER_FORMATS",
    "AnswerFormat",
    "ExtractedAnswer",
    "THINK_OPEN",
    "THINK_CLOSE",
    "REL_TOL",
    "answers_equal",
    "check_answer_format",
    "extract_answer",
    "extract_boxed",
    "extract_final_line",
    "final_answer_part",
    "has_unclosed_thinking",
    "mixed_number",
    "numbers_equal",
]

AnswerFormat = Literal["auto", "boxed", "final_line"]
ANSWER_FORMATS: tuple[str, ...] = ("auto", "boxed", "final_line")
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
# Explicit final-answer statements. Markdown bold around the label is allowed
# (``**Answer:** 42``, ``**Final Answer**: 42``); ``A:`` and ``####`` only at a line start.
_LINE_RES = (
    re.compile(r"(?im)^[ \t>*_]*####[ \t]*(?P<a>[^\n]+)"),
    re.compile(r"(?m)^[ \t>*_]*A[ \t]*:[ \t]*(?P<a>[^\n]+)"),
    re.compile(
        r"(?i)(?:\bthe\s+)?(?:\bfinal\s+)?\banswer\b(?:\s+to\s+[^\n.:]{1,60}?)?[*_ \t]*"
        r"(?:is\b[*_ \t:]*|[:=][*_ \t]*)(?P<a>[^\n]+)"
    ),
)
# verl's GSM8K scorer (``verl/utils/reward_score/gsm8k.py``, strict) takes ``#### N`` anywhere
# in the last 300 characters (``_SOLUTION_CLIP_CHARS``): "23 + 45 = 68. #### 68" states 68.
_INLINE_GSM8K_RE = re.compile(r"####[ \t]*(?P<a>[^\n]+)")
_INLINE_GSM8K_CHARS = 300
_NUMBER_WITH_WORDS_RE = re.compile(
    r"(?:\\\$|\$)?\s*(?P<n>-?\d[\d,]*(?:\.\d+)?)\s*(?:%|\\%)?\s*(?:[A-Za-z][A-Za-z .'/-]*)?"
)


@dataclass(frozen=True)
class ExtractedAnswer:
    """The final answer of one completion under the extraction policy.

    Attributes:
        answer: The answer text (a LaTeX expression or a plain value), or ``None``.
        reason: Why there is none: ``"no_answer"`` (no complete box / final-answer line, or
            the last box is unfinished or empty) or ``"unclosed_thinking"`` (``<think>`` never
            closed); ``None`` when there is an answer.
        source: ``"boxed"``, ``"final_line"`` or ``"bare"`` (``None`` without an answer).
    """

    answer: str | None
    reason: str | None = None
    source: str | None = None


def check_answer_format(answer_format: str) -> str:
    """Return ``answer_format`` if it is one of :data:`ANSWER_FORMATS`.

    Raises:
        ConfigError: naming the choices (a ``ValueError``).
    """
    if answer_format not in ANSWER_FORMATS:
        raise ConfigError(
            f"answer_format={answer_format!r}; use one of {', '.join(ANSWER_FORMATS)} "
            "(auto: a \\boxed{} answer, else an explicit final-answer line)"
        )
    return answer_format


def has_unclosed_thinking(text: str) -> bool:
    """True when ``text`` opens ``<think>`` after its last ``</think>`` (or never closes it).

    >>> has_unclosed_thinking("<think>\\nstill going"), has_unclosed_thinking("<think>a</think> b")
    (True, False)
    """
    return text.rfind(THINK_OPEN) > text.rfind(THINK_CLOSE)


def final_answer_part(text: str) -> str | None:
    """The final-answer part of a completion: the text after its last ``</think>``.

    A completion with no thinking tags is returned whole (models without thinking are
    unaffected). A completion whose thinking is still open returns ``None``. A completion
    that starts inside thinking (templates that put ``<think>`` in the prompt, so the
    completion holds only ``</think>``) is handled the same way.

    Args:
        text: The completion text.

    Returns:
        The final-answer part (possibly empty), or ``None`` for unclosed thinking.

    >>> final_answer_part("<think>\\nwork\\n</think>\\n\\nThe answer is 7.")
    'The answer is 7.'
    >>> final_answer_part("plain 7"), final_answer_part("<think>\\nwork") is None
    ('plain 7', True)
    """
    if has_unclosed_thinking(text):
        return None
    close = text.rfind(THINK_CLOSE)
    if close < 0:
        return text
    return text[close + len(THINK_CLOSE) :].strip()


def _boxes(text: str) -> list[str | None]:
    """Top-level boxed contents in order; ``None`` for an unfinished box (which ends the text)."""
    out: list[str | None] = []
    pos = 0
    while True:
        m = _BOX_RE.search(text, pos)
        if m is None:
            return out
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += (text[i] == "{") - (text[i] == "}")
            i += 1
        if depth:
            out.append(None)
            return out
        out.append(text[m.end() : i - 1].strip())
        pos = i


def extract_boxed(text: str) -> str | None:
    r"""The content of the last complete ``\boxed{...}`` / ``\fbox{...}`` of ``text``.

    Braces are matched. If the *last* box is unfinished or empty the result is ``None`` --
    never an earlier box. Thinking tags are not handled here (see :func:`extract_answer`).

    Args:
        text: A solution or the final-answer part of a completion.

    Returns:
        The boxed content, or ``None``.

    >>> extract_boxed(r"so $x = \boxed{\frac{14}{3}}$.")
    '\\frac{14}{3}'
    >>> extract_boxed(r"so the result is \fbox{42}")
    '42'
    >>> extract_boxed(r"\boxed{12} then \boxed{") is None, extract_boxed(r"\boxed{}") is None
    (True, True)
    """
    boxes = _boxes(text)
    return boxes[-1] or None if boxes else None


def _clean_line_answer(raw: str) -> str | None:
    """Tidy the value of a final-answer line: markdown, math delimiters, units, final period."""
    s = raw.strip()
    boxed = extract_boxed(s)
    if boxed:
        return boxed
    s = s.strip("*_ \t").strip()
    # The value ends where its math ends or its sentence ends ("7. I hope it is correct.").
    math_span = re.match(r"(\$\$?)(.+?)\1", s)
    if math_span:
        s = math_span.group(0)
    else:
        s = re.split(r"\.\s", s, maxsplit=1)[0]
    s = re.sub(r"[.;,!]+$", "", s).strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(s) > len(left) + len(right) and s.startswith(left) and s.endswith(right):
            inner = s[len(left) : -len(right)].strip()
            if not any(d in inner for d in ("$", "\\(", "\\[")):
                s = inner
                break
    s = s.strip("*_ \t").strip()
    m = _NUMBER_WITH_WORDS_RE.fullmatch(s)
    if m:  # "$18", "18 dollars", "1,018 eggs": the number
        return m.group("n").replace(",", "")
    return s or None


def extract_final_line(text: str) -> str | None:
    """The value of the last explicit final-answer statement of ``text``.

    Recognised: ``The answer is X``, ``The final answer is X``, ``Final answer: X``,
    ``Answer: X``, ``**Answer:** X``, ``A: X`` (at a line start) and ``#### X`` (at a line
    start, or anywhere in the last 300 characters, as verl's GSM8K
    scorer reads it: ``23 + 45 = 68. #### 68`` states 68).
    Currency signs, thousands separators, trailing units words and a final period around a
    number are dropped (``$1,018 dollars.`` -> ``1018``); other values are kept as written.

    Args:
        text: The final-answer part of a completion.

    Returns:
        The answer text, or ``None`` when there is no such statement.

    >>> extract_final_line("9 * 2 = 18\\nA: 18")
    '18'
    >>> extract_final_line("So the final answer is $\\\\frac{1}{2}$.")
    '\\\\frac{1}{2}'
    >>> extract_final_line("**Answer:** 42"), extract_final_line("#### 1,018")
    ('42', '1018')
    >>> extract_final_line("I think it is 5 or maybe 7") is None
    True
    """
    best: tuple[int, str] | None = None
    for rx in _LINE_RES:
        for m in rx.finditer(text):
            if best is None or m.start("a") > best[0]:
                best = (m.start("a"), m.group("a"))
    for m in _INLINE_GSM8K_RE.finditer(text, max(0, len(text) - _INLINE_GSM8K_CHARS)):
        if best is None or m.start("a") > best[0]:
            best = (m.start("a"), m.group("a"))
    if best is None:
        return None
    return _clean_line_answer(best[1])


def extract_answer(text: str, answer_format: AnswerFormat | str = "auto") -> ExtractedAnswer:
    r"""Apply the answer-extraction policy (module docstring) to one completion.

    Args:
        text: The completion text (thinking included, if any).
        answer_format: ``"auto"``, ``"boxed"`` or ``"final_line"``.

    Returns:
        An :class:`ExtractedAnswer`.

    Raises:
        ConfigError: for an unknown ``answer_format``.
        TypeError: if ``text`` is not a string.

    >>> extract_answer(r"\boxed{3} and finally \fbox{42}")
    ExtractedAnswer(answer='42', reason=None, source='boxed')
    >>> extract_answer("Final answer: 12", "boxed").reason
    'no_answer'
    >>> extract_answer(r"$\frac{1}{2}$").answer, extract_answer("7 + 5 = 12").answer
    ('\\frac{1}{2}', None)
    """
    check_answer_format(answer_format)
    if not isinstance(text, str):
        raise TypeError(f"extract_answer needs a string, got {type(text).__name__}")
    part = final_answer_part(text)
    if part is None:
        return ExtractedAnswer(None, "unclosed_thinking")
    if answer_format in ("auto", "boxed"):
        boxes = _boxes(part)
        if boxes:
            last = boxes[-1]
            if last:
                return ExtractedAnswer(last, None, "boxed")
            return ExtractedAnswer(None, "no_answer")  # the last box is unfinished or empty
        if answer_format == "boxed":
            return ExtractedAnswer(None, "no_answer")
    line = extract_final_line(part)
    if line:
        return ExtractedAnswer(line, None, "final_line")
    if answer_format == "auto":
        bare = _bare_answer(part)
        if bare:
            return ExtractedAnswer(bare, None, "bare")
    return ExtractedAnswer(None, "no_answer")


# A bare answer: one line of digits, single-letter variables, LaTeX commands and operators.
_BARE_CHARS_RE = re.compile(r"[0-9A-Za-z\s+\-*/^_()\[\]{}.,!%|:'\\$&~]+")
_WORD_RE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")  # a word, not a \command
_RELATION_RE = re.compile(r"=|<|>|\\(?:le|ge|leq|geq|neq|ne|approx|equiv|lt|gt)(?![A-Za-z])")


def _bare_answer(part: str) -> str | None:
    """The final-answer part itself when it is nothing but one number or math expression."""
    s = part.strip()
    if not s or "\n" in s or not _BARE_CHARS_RE.fullmatch(s):
        return None
    if _WORD_RE.search(re.sub(r"\\(?:text|mathrm|textbf|mbox)\s*\{", "{", s)):
        return None  # prose (or a unit word): no answer
    if _RELATION_RE.search(s) or not re.search(r"[0-9A-Za-z]", s):
        return None
    return _clean_line_answer(s)


# ---- when two answers are equal ------------------------------------------------------------

REL_TOL = 1e-6
"""Relative tolerance of a comparison that involves a decimal: ``|a - b| <= REL_TOL * max(|a|, |b|)``."""

_MIXED_RE = re.compile(
    r"(?P<sign>[-+]?)\s*(?P<whole>\d+)(?:\s+(?P<n1>\d+)\s*/\s*(?P<d1>\d+)"
    r"|\s*\\[dt]?frac\s*\{\s*(?P<n2>\d+)\s*\}\s*\{\s*(?P<d2>\d+)\s*\})"
)


def mixed_number(text: str) -> str:
    r"""``text`` with a mixed number written as one improper fraction; anything else unchanged.

    A mixed number is a whole number followed by a proper fraction, as plain text (``1 1/4``)
    or LaTeX (``1\frac{1}{4}``, ``1 \dfrac{1}{4}``): it means their sum, and a sign applies to
    both. The whole text must be the mixed number.

    Args:
        text: An answer (a reference or an extracted final answer).

    Returns:
        ``\frac{n}{d}`` (with a leading ``-`` for a negative number), or ``text``.

    >>> mixed_number("1 1/4"), mixed_number(r"-2\frac{1}{2}")
    ('\\frac{5}{4}', '-\\frac{5}{2}')
    >>> mixed_number("3/4"), mixed_number("2 3/2"), mixed_number("1 1/4 cups")
    ('3/4', '2 3/2', '1 1/4 cups')
    """
    m = _MIXED_RE.fullmatch(text.strip())
    if m is None:
        return text
    num, den = int(m["n1"] or m["n2"]), int(m["d1"] or m["d2"])
    if not 0 < num < den:
        return text
    sign = "-" if m["sign"] == "-" else ""
    return f"{sign}\\frac{{{int(m['whole']) * den + num}}}{{{den}}}"


def numbers_equal(a: Any, b: Any, *, rel_tol: float = REL_TOL) -> bool:
    """Whether two numbers are the same answer: exactly, or to ``rel_tol`` where one is a decimal.

    Args:
        a: ``int``, :class:`fractions.Fraction`, ``float``, or a string: an integer or a
            fraction (``"5/4"``) is exact, a decimal (``"0.5"``, ``"1e-7"``) is not.
        b: the other number, of the same kinds.
        rel_tol: The relative tolerance, ``|a - b| <= rel_tol * max(|a|, |b|)``.

    Returns:
        ``True`` when equal under the rule (module docstring).

    >>> numbers_equal("0.0000002", "0.0000001"), numbers_equal(Fraction(1, 3), "0.3333333")
    (False, True)
    >>> numbers_equal(1000001, 1000000), numbers_equal("2.5", Fraction(5, 2))
    (False, True)
    """

    def exact(x: Any) -> tuple[Fraction, bool]:
        if isinstance(x, str):
            x = x.strip()
            return Fraction(x), not re.search(r"[.eE]", x)
        return Fraction(x), not isinstance(x, float)

    (fa, exact_a), (fb, exact_b) = exact(a), exact(b)
    if exact_a and exact_b:
        return fa == fb
    return abs(fa - fb) <= Fraction(str(rel_tol)) * max(abs(fa), abs(fb))


def _sympy_numbers_equal(a: Any, b: Any, numeric_precision: int) -> bool:
    """:func:`numbers_equal` on SymPy values; a stand-in for Math-Verify's numeric comparison.

    Keeps Math-Verify's conventions (a percentage equals its number, ``9\\% == 9``; matrices
    element by element) and replaces its rounding (6 decimal places) and chopping (``evalf(chop=
    True)``) with the relative rule. Expressions with free symbols compare their exact difference.
    """
    from math_verify import grader as mv
    from sympy import Float, Integer, MatrixBase, Rational
    from sympy.matrices.expressions import MatrixExpr

    matrix = (MatrixBase, MatrixExpr)
    if isinstance(a, matrix) and isinstance(b, matrix):
        a, b = mv.safe_sympy_doit(a), mv.safe_sympy_doit(b)
        if isinstance(a, MatrixBase) and isinstance(b, MatrixBase) and a.shape == b.shape:
            return all(
                _sympy_numbers_equal(x, y, numeric_precision) for x, y in zip(a, b, strict=True)
            )
        return False
    try:
        if mv.is_atomic_or_pct_atomic(a, Integer) and mv.is_atomic_or_pct_atomic(b, Integer):
            return bool(mv.get_pct_val(a, a) == mv.get_pct_val(b, b))
        x, y = mv.safe_sympy_doit(a), mv.safe_sympy_doit(b)
        if not (getattr(x, "is_number", False) and getattr(y, "is_number", False)):
            return bool((a - b).evalf(n=numeric_precision) == 0)  # no chop: 1e-20 x != 0
        floats = x.atoms(Float) | y.atoms(Float)
        if not floats:
            return bool(x == y)  # exact values; other forms of one value: the symbolic check
        # a decimal as written (Float's own digits), then exact arithmetic where possible
        decimal = {f: Rational(str(f)) for f in floats}
        x, y = x.xreplace(decimal), y.xreplace(decimal)
        if x.is_Rational and y.is_Rational:
            return bool(abs(x - y) <= Rational(str(REL_TOL)) * max(abs(x), abs(y)))
        xv, yv = x.evalf(n=50), y.evalf(n=50)
        return bool(abs(xv - yv) <= REL_TOL * max(abs(xv), abs(yv)))
    except Exception:  # noqa: BLE001 - SymPy raises many types on odd inputs: not equal
        return False


_OUR_RULE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "densereward_numbers", default=False
)


def _install_numeric_rule() -> None:
    """Route Math-Verify's numeric comparison through :func:`_sympy_numbers_equal` inside
    :func:`answers_equal` (a context variable): Math-Verify has no hook for it, and other
    callers of Math-Verify in the process keep its own rule."""
    from math_verify import grader

    current = grader.sympy_numeric_eq
    if getattr(current, "_densereward", False):
        return

    def sympy_numeric_eq(a: Any, b: Any, float_rounding: int, numeric_precision: int) -> bool:
        if _OUR_RULE.get():
            return _sympy_numbers_equal(a, b, numeric_precision)
        return current(a, b, float_rounding, numeric_precision)

    sympy_numeric_eq._densereward = True  # type: ignore[attr-defined]
    grader.sympy_numeric_eq = sympy_numeric_eq


def answers_equal(gold: Any, pred: Any) -> bool:
    r"""Math-Verify's ``verify(gold, pred)`` under this module's rules for numbers.

    Args:
        gold: The parsed reference (``math_verify.parse`` of it, after :func:`mixed_number`).
        pred: The parsed final answer, the same way.

    Returns:
        Whether they are equal. No timeout here: the caller enforces one (the sparse reward
        runs this in a worker process it kills on a deadline).

    >>> from math_verify import parse
    >>> answers_equal(parse(r"\boxed{0.0000001}"), parse(r"\boxed{0.0000002}"))
    False
    >>> answers_equal(parse(r"\boxed{\frac{1}{3}}"), parse(r"\boxed{0.3333333}"))
    True
    """
    from math_verify import verify

    _install_numeric_rule()
    token = _OUR_RULE.set(True)
    try:
        return bool(verify(gold, pred, timeout_seconds=None))
    finally:
        _OUR_RULE.reset(token)
