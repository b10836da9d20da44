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
   ``#### X``. A number merely mentioned in prose (``I think it is 5 or maybe 7``) is not an
   answer.

``answer_format``:

* ``"auto"`` (default): boxed, else a final-answer line.
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
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ANSWER_FORMATS",
    "AnswerFormat",
    "ExtractedAnswer",
    "THINK_OPEN",
    "THINK_CLOSE",
    "check_answer_format",
    "extract_answer",
    "extract_boxed",
    "extract_final_line",
    "final_answer_part",
    "has_unclosed_thinking",
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
        source: ``"boxed"`` or ``"final_line"`` (``None`` without an answer).
    """

    answer: str | None
    reason: str | None = None
    source: str | None = None


def check_answer_format(answer_format: str) -> str:
    """Return ``answer_format`` if it is one of :data:`ANSWER_FORMATS`.

    Raises:
        ValueError: naming the choices.
    """
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(
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
    ``Answer: X``, ``**Answer:** X``, ``A: X`` and ``#### X`` (the last two at a line start).
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
        ValueError: for an unknown ``answer_format``.
        TypeError: if ``text`` is not a string.

    >>> extract_answer(r"\boxed{3} and finally \fbox{42}")
    ExtractedAnswer(answer='42', reason=None, source='boxed')
    >>> extract_answer("Final answer: 12", "boxed").reason
    'no_answer'
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
    return ExtractedAnswer(None, "no_answer")
