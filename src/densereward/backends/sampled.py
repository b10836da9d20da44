"""Sampled fallback for OpenAI-compatible endpoints that return no log-probabilities.

The score distribution is estimated empirically: the score is sampled ``N =
options.n_samples`` times at temperature 1 with a few new tokens, the first score token of
each sample is parsed, and ``p_hat(v) = count(v) / N`` is returned as log-probabilities
(the two-stage workaround for closed endpoints in LLM-as-a-Verifier, Kwok et al. 2026).
Samples in which no score token is found count against the mass, so
``sum(p_hat) = n_parsed / N <= 1`` and the engine sees the shortfall. The estimate has
standard error ``sqrt(p (1 - p) / N)`` per level.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Sequence
from typing import Any

from ..backend_options import SampledOptions
from ..config import VerifierConfig
from .base import ChatPrompt, TokenLogprobs
from .openai_http import OpenAIBackend

__all__ = ["SampledBackend", "parse_score_token"]

# Markup a model may put before the score: whitespace, quotes, brackets, emphasis, a
# repeated opening tag, or a "score:" label.
_LEADING = re.compile(r"^(?:\s|[*_`\"'(\[{:=]|<score>|score\s*[:=]?)*", re.IGNORECASE)


def parse_score_token(text: str, candidates: Sequence[str]) -> str | None:
    """The candidate spelling that ``text`` starts with as a score, or ``None``.

    Leading whitespace and markup (``**``, quotes, brackets, ``<score>``, ``score:``) are
    skipped; the next word must be exactly a candidate (stripped of spaces) and must not
    run on into letters or digits (``"K</score>"`` -> ``K``; ``"Kind"`` -> ``None``).
    When the text begins with a spelling that carries its leading space (``" K"``), that
    spelling is returned; otherwise the bare one (or the first spelling that strips to it).
    A letter that starts a sentence (``"A good answer"``, ``"I think"``) is not a score.

    Args:
        text: a sampled continuation of the prefill.
        candidates: the score-token spellings (e.g. ``"A"``, ``" A"``, ...).

    Returns:
        One element of ``candidates``, or ``None`` when no score token leads the text.

    Example:
        >>> parse_score_token(" **K**</score>", ["K", " K", "L"])
        'K'
        >>> parse_score_token(" K</score>", ["K", " K"])
        ' K'
        >>> parse_score_token("Kind of good", ["K", " K"]) is None
        True
        >>> parse_score_token("I think", ["I", " I"]) is None
        True
    """
    for c in candidates:  # an exact leading spelling, e.g. " K"
        if c and text.startswith(c) and c != c.strip() and _ends_word(text, len(c)):
            return c
    rest = text[_LEADING.match(text).end() :]
    by_stripped: dict[str, str] = {}
    for c in sorted(candidates, key=lambda s: (s != s.strip(), s)):
        by_stripped.setdefault(c.strip(), c)
    for stripped in sorted(by_stripped, key=len, reverse=True):
        if stripped and rest.startswith(stripped) and _ends_word(rest, len(stripped)):
            return by_stripped[stripped]
    return None


def _ends_word(text: str, i: int) -> bool:
    """True when ``text[i:]`` does not continue the word that ends at ``i``.

    A score letter must not run on into letters/digits (``"Kind"``) nor start a sentence
    (``"A good answer"``, ``"I think"``: a space and then a letter).
    """
    if i >= len(text):
        return True
    if text[i].isalnum():
        return False
    rest = text[i:].lstrip(" \t")
    return not (text[i] in " \t" and rest[:1].isalpha())


class SampledBackend(OpenAIBackend):
    """Empirical score distribution from ``N`` samples, for endpoints without log-probs.

    Args:
        config: as for :class:`~densereward.backends.openai_http.OpenAIBackend`, with
            ``options`` a :class:`~densereward.backend_options.SampledOptions`: also
            ``n_samples`` (N >= 1), ``max_score_tokens`` (new tokens per sample, enough for
            markup before the score) and ``use_n`` (ask for all N samples in one request
            with the ``n`` parameter (vLLM, OpenAI), missing choices topped up with
            single-sample requests; ``False`` = N requests with seeds ``seed + j``); and
            ``seed``.
        **overrides: options of :class:`~densereward.backend_options.SampledOptions` that
            replace the config's (``SampledBackend(config, use_n=False)``).

    Raises:
        ConfigError: if ``n_samples < 1`` or ``max_score_tokens < 1``.
        BackendUnavailableError: if the server does not answer the health check.
    """

    name = "sampled"
    options_class = SampledOptions
    text_reads = True  # each level is read in the sampled text, at the tokenizer's boundary

    def __init__(self, config: VerifierConfig, **overrides: Any):
        super().__init__(config, **overrides)
        self.max_score_tokens = int(self.options.max_score_tokens)
        self.use_n = self.options.use_n

    async def _samples(self, prompt: ChatPrompt, index: int) -> list[str]:
        n = self.options.n_samples
        base_seed = self.config.seed + 1000 * index
        params = {"max_tokens": self.max_score_tokens, "temperature": 1.0}
        texts: list[str] = []
        if self.use_n:
            data = await self._post(
                "/chat/completions", self._chat_payload(prompt, n=n, seed=base_seed, **params)
            )
            texts = [self._choice_text(c) for c in data["choices"][:n] if isinstance(c, dict)]
        if len(texts) < n:
            start = len(texts)
            more = await asyncio.gather(
                *(
                    self._post(
                        "/chat/completions",
                        self._chat_payload(prompt, seed=base_seed + j, **params),
                    )
                    for j in range(start, n)
                )
            )
            texts += [self._choice_text(d["choices"][0]) for d in more]
        return texts

    async def _one_sampled(
        self, prompt: ChatPrompt, index: int, candidates: Sequence[str]
    ) -> TokenLogprobs:
        texts = await self._samples(prompt, index)
        n = len(texts)
        counts = dict.fromkeys(candidates, 0)
        for text in texts:
            tok = parse_score_token(text, candidates)
            if tok is not None:
                counts[tok] += 1
        logprobs = {c: (math.log(k / n) if k else -math.inf) for c, k in counts.items()}
        return TokenLogprobs(logprobs=logprobs, exact=False, sampled=True, n_samples=n)

    async def _anext_token_logprobs(
        self, prompts: Sequence[ChatPrompt], candidates: Sequence[str]
    ) -> list[TokenLogprobs]:
        self.usage.n_prompts += len(prompts)
        return await self._gather(
            [lambda i=i, p=p: self._one_sampled(p, i, candidates) for i, p in enumerate(prompts)]
        )

    def next_token_logprobs(
        self, prompts: Sequence[ChatPrompt], candidates: Sequence[str]
    ) -> list[TokenLogprobs]:
        """Empirical score-token distribution of each prompt from ``n_samples`` samples.

        Args:
            prompts: ``(B,)`` prompts (the score is sampled right after the prefill).
            candidates: the score-token spellings.

        Returns:
            ``(B,)`` :class:`TokenLogprobs` with ``sampled=True``, ``n_samples=N``,
            ``exact=False``; ``logprobs[c] = log(count(c) / N)`` (``-inf`` for spellings
            never sampled). Unparsable samples count against the mass.

        Raises:
            BackendError: when a request failed after the retries.
        """
        return self._run(self._anext_token_logprobs(prompts, candidates))
