"""Local ``transformers`` backend: exact next-token log-probabilities from the full logits.

Each :class:`~densereward.backends.base.ChatPrompt` is rendered with the tokenizer's chat
template (the prefill becomes the start of a final assistant turn that the template
*continues*), run through the causal LM, and the log-softmax over the **whole**
vocabulary is read at the last position. Nothing is truncated to a top-k, so the mass on
the score tokens (Kwok et al. 2026, eq. 1) is known exactly.

Speed on CPU (measured on 2 cores with the embedded SmolLM2-135M): prompts are sorted by
length and batched with left padding in chunks of ``config.batch_size`` so padding stays
small; only the last position's logits are computed (``logits_to_keep=1``); and the
longest common token prefix of a chunk (the shared system prompt / rubric / problem when
one response is scored under several criteria or repeats) is run once and its key/value
cache broadcast to the chunk (see :meth:`TransformersBackend.next_token_logprobs`).

Heavy imports (torch, transformers) happen inside the class so that importing this module
(the backend registry imports every backend) stays cheap.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..backend_options import TransformersOptions
from ..config import VerifierConfig
from ..errors import (
    BackendClosedError,
    BackendError,
    BackendUnavailableError,
    ConfigError,
    ScoreTokenError,
)
from ..seeding import forked_rng
from .base import BackendUsage, ChatPrompt, LocalAsyncMixin, TokenLogprobs
from .dtype import resolve_dtype
from .models import is_image_text_model

__all__ = [
    "TransformersBackend",
    "render_prompt_ids",
    "resolve_model_path",
    "candidate_token_ids",
    "template_thinks",
]

logger = logging.getLogger(__name__)

_MIN_SHARED_PREFIX = 32
"""A chunk's common prefix shorter than this (tokens) is not worth a separate cached pass."""


def resolve_model_path(config: VerifierConfig) -> str:
    """``config.model`` as a directory or Hub id: an offline model name (``qwen2.5-coder-0.5b``,
    :mod:`.models`) resolves to its converted local copy, ``None`` to the embedded default.

    Raises:
        BackendUnavailableError: if a named model cannot be prepared, or a Hub id is not in
            the local cache while the Hub cannot be reached (one line, no retries).
        ConfigError: for a bare word that is close to an offline name (did-you-mean).
    """
    from .models import resolve_model

    return str(resolve_model(config.model, field="verifier.model"))


def render_prompt_ids(tokenizer: Any, prompt: ChatPrompt) -> list[int]:
    """Token ids of ``prompt`` rendered with the tokenizer's chat template.

    The messages are followed by an assistant turn whose content is ``prompt.prefill``,
    rendered with ``continue_final_message=True`` so that the sequence ends right after
    the prefill (no end-of-turn token); an empty prefill uses ``add_generation_prompt``
    instead. The text is then encoded without adding special tokens (the template writes
    them). ``prompt.chat_template_kwargs`` go to the template as variables (Qwen3:
    ``enable_thinking``). The transformers and vLLM backends both call this function, so both
    models see identical token ids.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        prompt: the chat prompt.

    Returns:
        ``(T,)`` token ids, ``T >= 1``.

    Raises:
        BackendError: if the chat template cannot render the messages (e.g. a role the
            template rejects, or no chat template).
    """
    messages = [{"role": m["role"], "content": m["content"]} for m in prompt.messages]
    variables = dict(prompt.chat_template_kwargs)
    try:
        if prompt.prefill:
            text = tokenizer.apply_chat_template(
                [*messages, {"role": "assistant", "content": prompt.prefill}],
                tokenize=False,
                continue_final_message=True,
                **variables,
            )
        else:
            text = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, **variables
            )
    except Exception as e:  # jinja errors, missing template, ...
        raise BackendError(f"the chat template could not render the prompt: {e}") from e
    ids = tokenizer.encode(text, add_special_tokens=False)
    if not ids:
        raise BackendError("the rendered prompt is empty")
    return list(ids)


def template_thinks(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template has a thinking switch (``enable_thinking``, Qwen3).

    A model with such a template thinks in a ``<think>`` block before it answers unless the
    switch is off; the engine's reasoning style then uses that native thinking.
    """
    template = getattr(tokenizer, "chat_template", None)
    return isinstance(template, str) and "enable_thinking" in template


def candidate_token_ids(tokenizer: Any, candidates: Sequence[str]) -> list[int]:
    """The single token id of each candidate string (``encode(c, add_special_tokens=False)``).

    Args:
        tokenizer: a Hugging Face tokenizer.
        candidates: ``(N,)`` candidate token strings such as ``"A"`` or ``" A"``.

    Returns:
        ``(N,)`` token ids in candidate order.

    Raises:
        ScoreTokenError: if a candidate does not encode to exactly one token.
    """
    ids = []
    for c in candidates:
        enc = tokenizer.encode(c, add_special_tokens=False)
        if len(enc) != 1:
            raise ScoreTokenError(
                f"score token {c!r} is {len(enc)} tokens ({enc}) in this tokenizer, not 1; "
                "choose single-token spellings (the engine drops such alternatives)"
            )
        ids.append(int(enc[0]))
    return ids


def _common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix of token-id sequences."""
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for i in range(n):
        t = first[i]
        if any(s[i] != t for s in seqs[1:]):
            return i
    return n


class TransformersBackend(LocalAsyncMixin):
    """Verifier backend on a local Hugging Face causal LM (exact full-vocabulary logits).

    Args:
        config: the verifier configuration; reads ``model`` (``None`` = the embedded
            SmolLM2-135M-Instruct), ``batch_size`` (prompts per forward pass), ``seed`` and
            ``options`` (:class:`~densereward.backend_options.TransformersOptions`: ``device``,
            ``dtype`` (``auto``: bfloat16 on a GPU or AMX CPU, float32 elsewhere;
            :func:`~densereward.backends.dtype.resolve_dtype`), ``share_prefix``,
            ``prefix_cache_size``).
        **overrides: options of :class:`~densereward.backend_options.TransformersOptions`
            that replace the config's (``TransformersBackend(config, share_prefix=False)``).
            Among them:

        share_prefix: run the longest common token prefix of each chunk once and broadcast
            its key/value cache (a win when several prompts share a long prefix: criteria,
            repeats, one problem with many responses). Numerically equivalent to the plain
            pass up to float rounding.
        prefix_cache_size: how many of those prefix key/value caches are kept *across calls*
            (least recently used dropped first; 0 = none; in YAML
            ``verifier.backend_options: {prefix_cache_size: 0}``). A later call whose prompts start
            with a kept prefix (the system prompt, few-shot demonstrations and task text that
            every progress read of an RL run repeats) runs only the rest; a chunk prefix that
            extends a kept one runs only the extension. Same numbers as without it up to float
            rounding (tests/test_backends_local.py). Memory per entry: prefix tokens x layers
            x 2 x KV heads x head dim x dtype size (SmolLM2-135M, fp32: ~45 kB per token).

    Raises:
        BackendUnavailableError: if torch/transformers are missing or the model cannot be
            loaded.

    Example:
        >>> from densereward.config import VerifierConfig
        >>> b = TransformersBackend(VerifierConfig())  # doctest: +SKIP
        >>> p = ChatPrompt(({"role": "user", "content": "Grade 2+2=4 from A to T."},), "<score>")
        >>> b.next_token_logprobs([p], ["A", "T"])[0].logprobs  # doctest: +SKIP
        {'A': -7.1, 'T': -4.3}
    """

    name = "transformers"
    supports_images = False  # an image-text-to-text model loads as hf_vision's subclass
    loads_model = True
    options_class = TransformersOptions

    def __init__(self, config: VerifierConfig, **overrides: Any) -> None:
        try:
            import torch
            import transformers  # noqa: F401
        except ImportError as e:  # pragma: no cover - both are core dependencies
            raise BackendUnavailableError(
                f"the transformers backend needs torch and transformers: {e}"
            ) from e
        self.config = config
        self.options = opts = config.options_as(TransformersOptions, **overrides)
        self.share_prefix = opts.share_prefix
        self.prefix_cache_size = int(opts.prefix_cache_size)
        self._prefix_kv: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self.n_prefix_cache_hits = 0
        """Chunks whose shared prefix came from a kept cache (exactly or extended)."""
        self.usage = BackendUsage()
        self.model_id = resolve_model_path(config)
        if type(self) is TransformersBackend and is_image_text_model(self.model_id):
            raise ConfigError(
                f"{self.model_id} is an image-text-to-text model: build it with "
                "densereward.backends.create_backend(config) (VisionTransformersBackend)"
            )
        self._lock = threading.Lock()
        self._closed = False
        self._candidate_cache: dict[tuple[str, ...], list[int]] = {}

        device = opts.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        try:
            self.dtype = getattr(torch, resolve_dtype(opts.dtype, self.device))
        except ValueError as e:
            raise BackendUnavailableError(str(e)) from e
        try:
            self.tokenizer, self.model = self._load(self.model_id)
        except (OSError, ValueError) as e:
            raise BackendUnavailableError(
                f"could not load verifier model {self.model_id!r}: {e}"
            ) from e
        self.model.to(self.device).eval()
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.thinking_template = template_thinks(self.tokenizer)
        self.max_length = int(getattr(self.model.config, "max_position_embeddings", 0) or 0) or None

    # ------------------------------------------------------------------ helpers

    def _load(self, model_id: str) -> tuple[Any, Any]:  # (tokenizer, causal LM) in self.dtype
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(model_id, dtype=self.dtype)
        return AutoTokenizer.from_pretrained(model_id), model

    def _check_open(self) -> None:
        if self._closed:
            raise BackendClosedError("the transformers backend was closed")

    def render(self, prompt: ChatPrompt) -> list[int]:
        """Token ids of ``prompt`` (see :func:`render_prompt_ids`), ``(T,)``.

        Raises:
            BackendError: if the template fails or the prompt exceeds the model's context.
        """
        ids = render_prompt_ids(self.tokenizer, prompt)
        if self.max_length is not None and len(ids) >= self.max_length:
            raise BackendError(
                f"prompt is {len(ids)} tokens; the model's context is {self.max_length} "
                "(lower verifier.max_response_chars)"
            )
        return ids

    def tokenize(self, text: str) -> list[int] | None:
        """Token ids of ``text`` on its own (as a score token right after the prefill)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _candidate_ids(self, candidates: Sequence[str]) -> list[int]:
        key = tuple(candidates)
        if key not in self._candidate_cache:
            self._candidate_cache[key] = candidate_token_ids(self.tokenizer, candidates)
        return self._candidate_cache[key]

    def _chunks(self, lengths: Sequence[int]) -> list[list[int]]:
        """Indices grouped into chunks of at most ``batch_size`` prompts of similar length."""
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        bs = max(1, int(self.config.batch_size))
        return [order[i : i + bs] for i in range(0, len(order), bs)]

    def _longest_kept_prefix(self, seq: Sequence[int], limit: int) -> int:
        """Length of the longest kept prefix cache that ``seq[:limit]`` starts with (0: none)."""
        best = 0
        for key in self._prefix_kv:
            n = len(key)
            if best < n <= limit and tuple(seq[:n]) == key:
                best = n
        return best

    def _shared_prefix_len(self, seqs: Sequence[Sequence[int]], keep: int = 1) -> int:
        """Tokens of ``seqs`` to run once as a shared prefix (0: none); >= ``keep`` suffix tokens left.

        A chunk of several prompts shares its longest common prefix when it has at least
        ``_MIN_SHARED_PREFIX`` tokens; otherwise (and for a single prompt) the longest kept
        prefix cache the prompts start with is used.
        """
        limit = max(0, min(len(s) for s in seqs) - keep)  # the positions read stay in the suffix
        common = min(_common_prefix_len(seqs), limit) if len(seqs) > 1 else limit
        if len(seqs) > 1 and common >= _MIN_SHARED_PREFIX:
            return common
        return self._longest_kept_prefix(seqs[0], common)

    def _prefix_kv_cache(self, ids: tuple[int, ...]) -> Any:
        """A private key/value cache of ``ids`` (batch 1), from the kept caches where possible.

        An exact kept prefix is copied; otherwise the longest kept prefix of ``ids`` is copied
        and extended with the remaining tokens (or ``ids`` runs from scratch), and the result
        is kept for later calls (LRU, ``prefix_cache_size`` entries).
        """
        import copy

        import torch

        kept = self._prefix_kv.get(ids)
        if kept is not None:
            self._prefix_kv.move_to_end(ids)
            self.n_prefix_cache_hits += 1
            return copy.deepcopy(kept)
        start = self._longest_kept_prefix(ids, len(ids) - 1)
        kwargs: dict[str, Any] = {"use_cache": True, "logits_to_keep": 1}
        if start:
            self.n_prefix_cache_hits += 1
            kwargs["past_key_values"] = copy.deepcopy(self._prefix_kv[ids[:start]])
            kwargs["position_ids"] = torch.arange(start, len(ids), device=self.device)[None]
            kwargs["attention_mask"] = torch.ones((1, len(ids)), dtype=torch.long).to(self.device)
        new = torch.tensor([list(ids[start:])], dtype=torch.long, device=self.device)
        cache = self.model(input_ids=new, **kwargs).past_key_values
        if self.prefix_cache_size <= 0:
            return cache
        self._prefix_kv[ids] = cache
        while len(self._prefix_kv) > self.prefix_cache_size:
            self._prefix_kv.popitem(last=False)
        return copy.deepcopy(cache)

    def _last_logprobs(self, seqs: Sequence[Sequence[int]], keep: int = 1) -> Any:
        """Full-vocabulary next-token log-softmax at the last ``keep`` positions of each sequence.

        Args:
            seqs: ``(B,)`` token-id sequences (lengths >= ``keep``).
            keep: positions read, the last one last.

        Returns:
            float32 tensor ``(B, keep, V)`` on CPU; ``[:, -1]`` is the distribution after the
            whole sequence, ``[:, -2]`` the one before its last token.
        """
        import torch

        prefix_len = self._shared_prefix_len(seqs, keep) if self.share_prefix else 0
        suffixes = [list(s[prefix_len:]) for s in seqs]
        width = max(len(s) for s in suffixes)
        b = len(seqs)
        input_ids = torch.full((b, width), self.pad_id, dtype=torch.long)
        suffix_mask = torch.zeros((b, width), dtype=torch.long)
        for i, s in enumerate(suffixes):  # left padding: the last position is real
            input_ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long)
            suffix_mask[i, width - len(s) :] = 1
        position_ids = (prefix_len + suffix_mask.cumsum(-1) - 1).clamp(min=0)
        kwargs: dict[str, Any] = {}
        if prefix_len:
            cache = self._prefix_kv_cache(tuple(seqs[0][:prefix_len]))
            cache.batch_repeat_interleave(b)
            attention_mask = torch.cat(
                [torch.ones((b, prefix_len), dtype=torch.long), suffix_mask], dim=1
            )
            kwargs["past_key_values"] = cache
            kwargs["use_cache"] = True
        else:
            attention_mask = suffix_mask
            kwargs["use_cache"] = False
        out = self.model(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            position_ids=position_ids.to(self.device),
            logits_to_keep=keep,
            **kwargs,
        )
        logits = out.logits[:, -keep:, :].float()
        return torch.log_softmax(logits, dim=-1).cpu()

    # ------------------------------------------------------------------ protocol

    def next_token_logprobs(
        self, prompts: Sequence[ChatPrompt], candidates: Sequence[str]
    ) -> list[TokenLogprobs]:
        """Exact log-probabilities of each candidate as the next token after each prompt.

        The prompts are rendered (:func:`render_prompt_ids`), sorted by token length and
        run in chunks of ``config.batch_size`` with left padding and explicit position ids,
        so every prompt's numbers do not depend on what it was batched with (up to float
        rounding, ~1e-6). The log-softmax is over the full vocabulary, so
        ``sum(exp(logprobs))`` over the candidates is the true mass on them.

        Args:
            prompts: ``(B,)`` prompts.
            candidates: ``(N,)`` candidate token strings, each a single token.

        Returns:
            ``(B,)`` results in prompt order; each maps every candidate to its natural-log
            probability (``exact=True``, ``restricted=False``).

        Raises:
            ScoreTokenError: if a candidate is not exactly one token.
            BackendError: if a prompt is longer than the model's context or the forward
                pass fails.
        """
        return [r[0] for r in self._read_positions(prompts, [candidates])]

    def boundary_logprobs(
        self,
        prompts: Sequence[ChatPrompt],
        at_boundary: Sequence[str],
        after_prefill: Sequence[str],
        *,
        back: str,
    ) -> list[tuple[TokenLogprobs, TokenLogprobs]]:
        """Both positions of a read that steps back over the prefill's last token, in one pass.

        Each prompt (ending in its prefill, whose last token is ``back``) runs once; the
        logits before ``back`` give ``at_boundary`` (e.g. ``">A"``, ``">"``) and those after it
        give ``after_prefill`` (e.g. ``"Q"`` of the chain ``">"`` ``"Q"``); see
        :mod:`densereward.verifier.boundary`.

        Returns:
            ``(B,)`` pairs ``(at_boundary, after_prefill)`` of exact log-probabilities.

        Raises:
            BackendError: if a rendered prompt does not end with the token ``back`` (the
                chat template changed the prefill), or as :meth:`next_token_logprobs`.
        """
        back_ids = self.tokenize(back)
        return [
            (r[0], r[1])
            for r in self._read_positions(prompts, [at_boundary, after_prefill], ends=back_ids)
        ]

    def _read_positions(
        self,
        prompts: Sequence[ChatPrompt],
        sets: Sequence[Sequence[str]],
        *,
        ends: Sequence[int] | None = None,
    ) -> list[list[TokenLogprobs]]:
        """Log-probabilities of ``sets[j]`` at the last ``len(sets)`` positions of each prompt.

        ``sets[-1]`` is read after the whole prompt, ``sets[-2]`` before its last token.
        ``ends``: token ids every rendered prompt must end with.
        """
        import torch

        self._check_open()
        if not prompts:
            return []
        keep = len(sets)
        ids = [self._candidate_ids(c) for c in sets]
        t0 = time.perf_counter()
        with self._lock:
            self._check_open()  # again: closed while this read waited for the lock
            seqs = [self.render(p) for p in prompts]
            if ends is not None:
                bad = [i for i, q in enumerate(seqs) if q[-len(ends) :] != list(ends)]
                if bad:
                    raise BackendError(
                        f"prompt {bad[0]} does not end with the read plan's token ids {list(ends)} "
                        f"after rendering (ends with {seqs[bad[0]][-3:]}): the chat template "
                        "changed the prefill"
                    )
            results: list[list[TokenLogprobs] | None] = [None] * len(seqs)
            try:
                with torch.inference_mode():
                    for chunk in self._chunks([len(q) for q in seqs]):
                        lp = self._last_logprobs([seqs[i] for i in chunk], keep)
                        for row, i in enumerate(chunk):
                            results[i] = [
                                TokenLogprobs(
                                    logprobs={
                                        c: float(v)
                                        for c, v in zip(
                                            sets[j], lp[row, j, ids[j]].tolist(), strict=True
                                        )
                                    }
                                )
                                for j in range(keep)
                            ]
            except RuntimeError as e:  # out of memory, device errors
                self.usage.n_failures += 1
                raise BackendError(f"transformers forward pass failed: {e}") from e
            self.usage.record_batch(seqs, started=t0)
        return results  # type: ignore[return-value]

    def generate(
        self,
        prompts: Sequence[ChatPrompt],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
        stop: Sequence[str] = (),
    ) -> list[str]:
        """Sample one continuation of each prompt (the text after its prefill).

        Args:
            prompts: ``(B,)`` prompts.
            max_new_tokens: length bound in tokens, ``>= 1``.
            temperature: sampling temperature; ``0`` = greedy.
            seed: seed of forked torch generators the sampling draws from (``None``:
                ``config.seed``); the caller's global CPU and CUDA generators are left as they
                were. Results depend on the batch composition (chunks of ``config.batch_size``).
            stop: strings that end a continuation; the text is cut before the first one
                (as vLLM and OpenAI servers do).

        Returns:
            ``(B,)`` decoded continuations without special tokens.

        Raises:
            BackendError: on invalid arguments or a failed generation.
        """
        import torch

        self._check_open()
        if max_new_tokens < 1:
            raise BackendError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0 or math.isnan(temperature):
            raise BackendError(f"temperature must be >= 0, got {temperature}")
        if not prompts:
            return []
        t0 = time.perf_counter()
        with self._lock:
            self._check_open()  # again: closed while this read waited for the lock
            seqs = [self.render(p) for p in prompts]
            texts: list[str] = [""] * len(seqs)
            gen_kwargs: dict[str, Any] = {
                "max_new_tokens": max_new_tokens,
                "pad_token_id": self.pad_id,
            }
            if temperature > 0:
                gen_kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
            else:
                gen_kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
            if stop:
                gen_kwargs.update(stop_strings=list(stop), tokenizer=self.tokenizer)
            n_new = 0
            # The sampling seed goes to a forked RNG: the caller's global torch RNG (a policy's
            # sampling, SAC's exploration noise in the same process) is left as it was, and
            # every visible CUDA device's generator too (forked_rng forks all of them).
            try:
                with forked_rng(self.config.seed if seed is None else seed), torch.inference_mode():
                    for chunk in self._chunks([len(s) for s in seqs]):
                        width = max(len(seqs[i]) for i in chunk)
                        ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
                        mask = torch.zeros_like(ids)
                        for row, i in enumerate(chunk):
                            ids[row, width - len(seqs[i]) :] = torch.tensor(seqs[i])
                            mask[row, width - len(seqs[i]) :] = 1
                        out = self.model.generate(
                            input_ids=ids.to(self.device),
                            attention_mask=mask.to(self.device),
                            **gen_kwargs,
                        )
                        new = out[:, width:].cpu()
                        for row, i in enumerate(chunk):
                            toks = [t for t in new[row].tolist() if t != self.pad_id]
                            n_new += len(toks)
                            texts[i] = _cut_at_stop(
                                self.tokenizer.decode(toks, skip_special_tokens=True), stop
                            )
            except RuntimeError as e:
                self.usage.n_failures += 1
                raise BackendError(f"transformers generation failed: {e}") from e
            self.usage.record_batch(seqs, started=t0, completion_tokens=n_new)
        return texts

    def close(self) -> None:
        """Drop the model (frees its memory). Idempotent; later calls raise BackendError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.model = None
            self._prefix_kv.clear()

    def __repr__(self) -> str:
        return f"TransformersBackend(model={Path(self.model_id).name!r}, device={self.device}, dtype={self.dtype})"


def _cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """``text`` up to (excluding) the earliest occurrence of any stop string."""
    cut = len(text)
    for s in stop:
        if s:
            j = text.find(s)
            if j != -1:
                cut = min(cut, j)
    return text[:cut]
