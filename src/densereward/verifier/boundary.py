"""Where the score is read: at the boundary the verifier's own tokenizer puts before a level.

**The rule.** A level's probability is read where the model's own tokenizer begins the text of
that level after the prefill, never at the end of the prefill's text as another tokenizer
happened to split it. Byte-level BPE tokenizers of the Qwen2.5/Qwen3 and Llama-3 families have
a pre-tokenizer rule (``[^\\r\\n\\p{L}\\p{N}]?\\p{L}+``) that glues one punctuation character to
the letters after it, so ``<score>T</score>`` is ``<`` ``score`` ``>T`` ``</`` ``score`` ``>``:
the demonstrations teach ``>T``, and a read of the token after a lone ``>`` asks the model for
a boundary it never produces (a real Qwen2.5-Coder-0.5B then puts 0.16 of its mass on the
letters and abstains on every read). SmolLM2 and GPT-2-style tokenizers split ``>`` from the
letter, and their read is where it always was.

**The plan** (:func:`build_read_plan`, once per verifier, from the backend's tokenizer):
tokenize ``prefill`` and ``prefill + level`` and find where they part. If they part before the
prefill's last token, the read steps back over it (``back``, e.g. ``">"``) and each level is
either

* one token that merges ``back`` with the level (``">T"``), read at the boundary, or
* ``back`` followed by the level's own token (``">"`` ``"Q"``, for the letters with no merged
  token: Q, U, W, Y in Qwen's vocabulary), whose probability is the chain
  ``P(">") * P("Q" | ">")``.

Both factors come from the one forward pass over the prompt as it is (ending in the prefill):
the boundary position gives ``P(">T")`` and ``P(">")``, the last position ``P("Q" | ">")``.
In-process backends that implement ``boundary_logprobs`` read the two positions of that one
pass; other backends (HTTP, vLLM offline) get two requests that share the whole prompt prefix
(the boundary prompt is the prompt with ``back`` cut from its prefill), which a server with
prefix caching answers for the cost of one pass plus one token. The read is exact: the
composed level probabilities are the model's probabilities of the level texts under its
canonical tokenization, and their sum is the score-token mass.

The plan is checked in several contexts (the prefill alone, after a newline, after
``</analysis>`` and after ``</think>``); a tokenization that moves the boundary by more than
one token, or differently in different contexts, is refused with :class:`ScoreTokenError`.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..backends.base import ChatPrompt, TokenLogprobs
from ..errors import ScoreTokenError
from ..scale import ScoreScale

__all__ = ["LevelRead", "ReadPlan", "build_read_plan", "check_calibration", "describe_tokens"]

CONTEXTS = ("", "\n", "Text.\n", "</analysis>\n", "</think>\n\n")
"""Texts the prefill is tokenized after when the plan is built: every prompt kind's prefill
follows one of these (the chat template's assistant header ends in a newline)."""

Tokenize = Callable[[str], "list[int] | None"]


@dataclass(frozen=True)
class LevelRead:
    """How one spelling of one level is read.

    Attributes:
        spelling: the level's text, e.g. ``"A"`` or ``" A"``.
        token: the token string whose log-probability is read: at the boundary when
            ``chained`` is False (``">A"``, or ``"A"`` when the plan does not step back),
            after the whole prefill when True (``"Q"``).
        chained: the probability is ``P(back) * P(token | prefill)``.
    """

    spelling: str
    token: str
    chained: bool = False


@dataclass(frozen=True)
class ReadPlan:
    """Where the score is read and how each level's probability is composed.

    Attributes:
        prefill: the prefill the plan was built for (``"<score>"``).
        back: the text of the prefill's last token when the read steps back over it
            (``">"`` for Qwen-family tokenizers), ``""`` when the levels start a token of
            their own right after the prefill.
        spellings: ``(G,)`` tuples of the spellings read per level, the canonical first.
        reads: spelling -> :class:`LevelRead`.
        tokenization: human-readable tokenization of ``prefill + top level`` (for messages).
        tokenized: False when the backend cannot tokenize (the plan then trusts the strings
            and reads after the prefill).
        text_level: the backend reads sampled text, not token log-probabilities (the
            ``sampled`` backend): every level is read at the boundary as the text
            ``back + spelling``.
    """

    prefill: str
    back: str
    spellings: tuple[tuple[str, ...], ...]
    reads: dict[str, LevelRead]
    tokenization: str = ""
    tokenized: bool = True
    text_level: bool = False

    @property
    def steps_back(self) -> bool:
        """Whether the read is at a boundary before the prefill's end."""
        return bool(self.back)

    @property
    def boundary_candidates(self) -> list[str]:
        """Token strings read at the boundary (``back`` included when a level chains), in order."""
        out = [r.token for r in self.reads.values() if not r.chained]
        if any(r.chained for r in self.reads.values()):
            out.append(self.back)
        return list(dict.fromkeys(out))

    @property
    def chain_candidates(self) -> list[str]:
        """Token strings read after the whole prefill (the chains' second tokens), in order."""
        return list(dict.fromkeys(r.token for r in self.reads.values() if r.chained))

    def boundary_prompt(self, prompt: ChatPrompt) -> ChatPrompt:
        """``prompt`` with ``back`` cut from its prefill: the prompt that ends at the boundary.

        Raises:
            ScoreTokenError: if the prompt's prefill does not end with ``back``.
        """
        if not self.back:
            return prompt
        if not prompt.prefill.endswith(self.back):
            raise ScoreTokenError(
                f"the read plan steps back over {self.back!r}, but the prompt's prefill "
                f"{prompt.prefill[-40:]!r} does not end with it"
            )
        return dataclasses.replace(prompt, prefill=prompt.prefill[: -len(self.back)])

    def compose(self, at: TokenLogprobs, after: TokenLogprobs | None = None) -> TokenLogprobs:
        """Per-spelling log-probabilities from the boundary read ``at`` and the read ``after``
        the whole prefill (needed when a level chains).

        ``log P(spelling) = at[token]`` or ``at[back] + after[token]`` (chain rule). A spelling
        whose factor is missing (outside an HTTP server's top-k) is absent from the result.
        The result is exact when both reads are, restricted when either is.
        """
        lp: dict[str, float] = {}
        for s, r in self.reads.items():
            if not r.chained:
                v = at.logprobs.get(r.token)
            else:
                a = at.logprobs.get(self.back)
                b = None if after is None else after.logprobs.get(r.token)
                v = None if a is None or b is None else a + b
            if v is not None:
                lp[s] = v
        return TokenLogprobs(
            logprobs=lp,
            exact=at.exact and (after is None or after.exact),
            sampled=at.sampled,
            n_samples=at.n_samples,
            restricted=at.restricted or (after is not None and after.restricted),
        )

    def describe(self) -> str:
        """One line: where the score is read (for errors, logs and the cache key)."""
        if not self.tokenized:
            return f"after {self.prefill!r} (the backend cannot tokenize: not checked)"
        if not self.back:
            return f"after {self.prefill!r}: {self.tokenization}"
        chains = [s for s, r in self.reads.items() if r.chained]
        return f"at the token boundary before {self.back!r} ({self.tokenization}); " + (
            f"chained P({self.back!r}) * P(level | {self.back!r}) for {chains}"
            if chains
            else "no chains"
        )


def describe_tokens(tokenize: Tokenize, text: str) -> str:
    """``'<score>T' -> '<' 'score' '>T'``: ``text`` split where its tokens begin.

    Each piece is the longest text whose tokenization is the next token id of ``text``'s.
    """
    ids = tokenize(text) or []
    pieces: list[str] = []
    start = 0
    while start < len(text) and len(pieces) < len(ids):
        want = ids[: len(pieces) + 1]
        ends = [n for n in range(start + 1, len(text) + 1) if (tokenize(text[:n]) or []) == want]
        if not ends:
            break
        pieces.append(text[start : ends[-1]])
        start = ends[-1]
    if start < len(text) or len(pieces) != len(ids):
        return f"{text!r} -> {len(ids)} tokens {ids}"
    return f"{text!r} -> " + " ".join(repr(p) for p in pieces)


def _memoized(tokenize: Tokenize) -> Tokenize:
    """``tokenize`` with its answers kept (an HTTP backend tokenizes over ``/tokenize``)."""

    @functools.cache
    def cached(text: str) -> tuple[int, ...] | None:
        ids = tokenize(text)
        return None if ids is None else tuple(ids)

    def call(text: str) -> list[int] | None:
        ids = cached(text)
        return None if ids is None else list(ids)

    return call


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _plan_in_context(
    tokenize: Tokenize, scale: ScoreScale, prefill: str, context: str, model: str
) -> tuple[str, dict[str, LevelRead], tuple[tuple[str, ...], ...]]:
    """``(back, reads, spellings)`` of the plan after ``context``; see :func:`build_read_plan`."""
    base = list(tokenize(context + prefill) or [])
    full = {
        s: list(tokenize(context + prefill + s) or []) for forms in scale.spellings for s in forms
    }
    canon = [forms[0] for forms in scale.spellings]
    split = min(_common_prefix(base, full[s]) for s in canon)
    m = len(base) - split

    def where() -> str:  # for the errors only: it tokenizes every prefix of the text
        return describe_tokens(tokenize, prefill + canon[-1])

    if m > 1:
        raise ScoreTokenError(
            f"the tokenizer of {model!r} merges a score letter with the last {m} tokens of the "
            f"prefill {prefill!r} ({where()}); the read can step back over one token only"
        )
    back = ""
    if m == 1:
        for n in range(1, len(prefill) + 1):
            cand = prefill[-n:]
            if (
                tokenize(cand) == base[split:]
                and list(tokenize(context + prefill[:-n]) or []) == base[:split]
            ):
                back = cand
                break
        else:
            raise ScoreTokenError(
                f"the tokenizer of {model!r} merges the score letters into the prefill's last "
                f"token ({where()}), and no suffix of {prefill!r} is that token alone"
            )
    reads: dict[str, LevelRead] = {}
    kept: list[tuple[str, ...]] = []
    seen: dict[tuple[bool, int], str] = {}
    for forms in scale.spellings:
        level: list[str] = []
        for i, s in enumerate(forms):
            path = full[s][split:]
            if full[s][:split] != base[:split]:
                path = []  # this spelling moves the boundary further back: not readable here
            read: LevelRead | None = None
            if len(path) == 1 and tokenize(back + s) == path:
                read = LevelRead(s, back + s, chained=False)
            elif m == 1 and len(path) == 2 and path[0] == base[-1] and tokenize(s) == path[1:]:
                read = LevelRead(s, s, chained=True)
            key = None if read is None else (read.chained, path[-1])
            if read is None or key in seen:
                if i == 0:
                    why = (
                        f"has the same token id as {seen[key]!r}"
                        if read is not None
                        else f"is not one token where the model's tokenizer puts it ({describe_tokens(tokenize, prefill + s)})"
                    )
                    raise ScoreTokenError(
                        f"score level {s!r} {why} in the tokenizer of {model!r}; pick score "
                        "tokens that are one token each (e.g. a smaller granularity or another scale)"
                    )
                continue  # an alternative spelling the tokenizer cannot read as one step
            seen[key] = s
            reads[s] = read
            level.append(s)
        kept.append(tuple(level))
    return back, reads, tuple(kept)


def build_read_plan(
    tokenize: Tokenize,
    scale: ScoreScale,
    *,
    prefill: str,
    model: str = "the verifier",
    text_level: bool = False,
) -> ReadPlan:
    """The read plan of ``scale`` after ``prefill`` under the tokenizer ``tokenize``.

    Args:
        tokenize: text -> token ids without special tokens (a backend's ``tokenize``); may
            return ``None`` when the backend cannot tokenize.
        scale: the score scale; every spelling of every level is planned, alternatives the
            tokenizer cannot read in one step (or that share a token) are dropped.
        prefill: the text the score follows (``prompts.SCORE_PREFILL``).
        model: the model's name, for messages.
        text_level: the backend reads sampled text (see :attr:`ReadPlan.text_level`).

    Returns:
        A :class:`ReadPlan`. With ``tokenize`` returning ``None``: a plan that reads every
        spelling after the prefill, unchecked (with a warning).

    Raises:
        ScoreTokenError: when a canonical level cannot be read in one step at the boundary,
            two levels share a token, the boundary moves back by more than one token, or the
            plan differs between contexts (each message names the model and the tokenization).

    >>> from densereward.scale import ScoreScale
    >>> vocab = {"<": 1, "score": 2, ">": 3, ">A": 4, ">B": 5, "A": 6, "B": 7, "C": 8}
    >>> def tok(text):  # a toy Qwen-like tokenizer: '>' merges with A and B, not with C
    ...     out, i = [], 0
    ...     while i < len(text):
    ...         n = next((n for n in (5, 2, 1) if text[i : i + n] in vocab), 1)
    ...         out.append(vocab.get(text[i : i + n], 100 + ord(text[i])))
    ...         i += n
    ...     return out
    >>> plan = build_read_plan(tok, ScoreScale.letters(3), prefill="<score>", model="toy")
    >>> plan.back, plan.boundary_candidates, plan.chain_candidates
    ('>', ['>A', '>B', '>'], ['C'])
    """
    tokenize = _memoized(tokenize)
    probe = tokenize(prefill)
    if probe is None:
        warnings.warn(
            f"the verifier backend cannot tokenize; the score is read after {prefill!r} "
            "without checking where the model's tokenizer puts it",
            stacklevel=3,
        )
        reads = {s: LevelRead(s, s) for forms in scale.spellings for s in forms}
        return ReadPlan(prefill, "", tuple(scale.spellings), reads, tokenized=False)
    plans = [_plan_in_context(tokenize, scale, prefill, c, model) for c in CONTEXTS]
    back, reads, spellings = plans[0]
    for c, (b2, r2, _) in zip(CONTEXTS[1:], plans[1:], strict=True):
        if b2 != back or r2 != reads:
            raise ScoreTokenError(
                f"in the tokenizer of {model!r} where the score letters start depends on the text "
                f"before {prefill!r} (after {c!r}: back {b2!r}, alone: back {back!r})"
            )
    if text_level:
        reads = {s: LevelRead(s, back + s) for s in reads}
    return ReadPlan(
        prefill=prefill,
        back=back,
        spellings=spellings,
        reads=reads,
        tokenization=describe_tokens(tokenize, prefill + scale.spellings[-1][0]),
        text_level=text_level,
    )


def check_calibration(
    mass: float, plan: ReadPlan, *, model: str, min_mass: float, hint: str = ""
) -> float:
    """The score-letter mass of the start-up calibration read; refuse a model that misses them.

    The read is the pointwise prompt grading its own first demonstration
    (:func:`densereward.prompts.calibration_prompt`), which is shown graded a few turns
    earlier. A model that follows the format puts most of its next-token mass on the score
    letters there (measured: SmolLM2-135M 0.95, Qwen2.5-Coder-0.5B 0.99 at its boundary); a
    read at a boundary the model never produces puts little (the same 0.5B after a lone
    ``>``: 0.16).

    Args:
        mass: the read's probability on the score letters, in ``[0, 1]``
            (:func:`~.reads.distribution_from_logprobs`).
        plan: the read plan (named in the error).
        model: the model's name (named in the error).
        min_mass: the floor (``VerifierConfig.min_mass``).
        hint: a cause the backend knows of, added to the message.

    Returns:
        ``mass``.

    Raises:
        ScoreTokenError: when the mass is below ``min_mass``: every later read would abstain.
    """
    if mass < min_mass:
        raise ScoreTokenError(
            f"calibration read failed: asked to grade its own demonstration, {model!r} puts "
            f"{mass:.3g} of its next-token probability on the score letters (min_mass "
            f"{min_mass:g}); the score is read {plan.describe()}. Every read would abstain. "
            f"{hint}Check that the model follows the prompt's score format with its chat "
            "template, or use another model; verifier.calibrate=false skips this check"
        )
    return mass
