"""The ``transformers`` backend on an image-text-to-text model: a verifier that sees camera frames.

:func:`~densereward.backends.create_backend` builds the ``transformers`` backend as a
:class:`VisionTransformersBackend` when the model's config has a ``vision_config`` (Qwen2-VL,
Qwen2.5-VL, ...; :func:`~densereward.backends.models.is_image_text_model`).
The model loads with ``AutoModelForImageTextToText``; its processor with ``AutoProcessor``, or,
where the processor class cannot load (Qwen2-VL's processor needs torchvision for its video
part, which the CPU install lacks), the tokenizer and ``AutoImageProcessor`` with Qwen-VL-style
placeholder expansion (one ``<|image_pad|>`` per merged patch, as the processor does).

Each prompt is rendered with the chat template, its frames as image content parts before the
text of the last user turn (:func:`~densereward.backends.images.chat_messages`); the score is
read at the tokenizer's own boundary exactly as for text (the read plan is built from
``tokenize``, the processor's tokenizer). Prompts run in chunks of ``config.batch_size`` with
left padding; no prefix key/value cache is kept (the image tokens sit inside the last turn).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import BackendError
from ..seeding import forked_rng
from .base import ChatPrompt, TokenLogprobs
from .hf import TransformersBackend, _cut_at_stop
from .images import chat_messages, frames_of, to_pil
from .models import is_image_text_model  # noqa: F401  (re-exported: its home until issue 42)

__all__ = ["VisionTransformersBackend", "is_image_text_model", "render_text"]


def render_text(template: Any, prompt: ChatPrompt) -> str:
    """``prompt`` rendered by ``template``'s chat template (a processor or tokenizer), its frames as
    ``{"type": "image"}`` parts before the last user turn's text; the prefill is continued.

    Raises:
        BackendError: if the chat template cannot render the prompt.
    """
    messages = chat_messages(prompt.messages, prompt.images, lambda f: {"type": "image"})
    variables = dict(prompt.chat_template_kwargs)
    try:
        if prompt.prefill:
            messages.append({"role": "assistant", "content": prompt.prefill})
            return template.apply_chat_template(
                messages, tokenize=False, continue_final_message=True, **variables
            )
        return template.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **variables
        )
    except Exception as e:  # jinja errors, missing template
        raise BackendError(f"the chat template could not render the prompt: {e}") from e


def _pil_image_processor(model_id: str) -> Any:
    """The PIL-backend image processor of ``model_id``'s model type (``Qwen2VLImageProcessorPil``),
    for a transformers whose ``AutoImageProcessor`` insists on the torchvision class (5.17, as
    the CPU set-up pins, with no torchvision installed).

    Raises:
        ImportError: when the model type has no PIL-backend image processor.
    """
    import transformers
    from transformers import AutoConfig
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    model_type = AutoConfig.from_pretrained(model_id).model_type
    names = IMAGE_PROCESSOR_MAPPING_NAMES.get(model_type)
    name = names.get("pil") if isinstance(names, dict) else None
    if name is None or not hasattr(transformers, name):
        raise ImportError(
            f"the image processor of {model_type!r} needs torchvision (no PIL-backend class); "
            "install torchvision matching the installed torch"
        )
    return getattr(transformers, name).from_pretrained(model_id)


class VisionTransformersBackend(TransformersBackend):
    """:class:`TransformersBackend` for image-text-to-text models (``supports_images``).

    Same arguments; ``share_prefix`` and ``prefix_cache_size`` have no effect here.
    """

    supports_images = True

    def _load(self, model_id: str) -> tuple[Any, Any]:
        from transformers import AutoImageProcessor, AutoModelForImageTextToText, AutoProcessor

        try:
            self.processor: Any = AutoProcessor.from_pretrained(model_id)
            tokenizer, self.image_processor = (
                self.processor.tokenizer,
                self.processor.image_processor,
            )
        except (ImportError, AttributeError, ValueError, TypeError):  # e.g. no torchvision
            from transformers import AutoTokenizer

            self.processor = None
            tokenizer = AutoTokenizer.from_pretrained(model_id)
            try:
                self.image_processor = AutoImageProcessor.from_pretrained(model_id)
            except ImportError:  # transformers < 5.18 picks the torchvision class: no fallback
                self.image_processor = _pil_image_processor(model_id)
        self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
        self.image_token_id = int(tokenizer.convert_tokens_to_ids(self.image_token))
        model = AutoModelForImageTextToText.from_pretrained(model_id, dtype=self.dtype)
        return tokenizer, model

    def render_text(self, prompt: ChatPrompt) -> str:
        """The chat-template text of ``prompt``, one image placeholder per frame (:func:`render_text`)."""
        return render_text(self.processor or self.tokenizer, prompt)

    def _encode(self, prompts: Sequence[ChatPrompt]) -> dict[str, Any]:
        """Model inputs of ``prompts`` (left-padded ids, attention mask, pixel values, grids)."""
        texts = [self.render_text(p) for p in prompts]
        frames = [to_pil(f) for p in prompts for f in frames_of(p)]
        if self.processor is not None:
            return dict(
                self.processor(
                    text=texts,
                    images=frames or None,
                    return_tensors="pt",
                    padding=True,
                    padding_side="left",
                )
            )
        enc: dict[str, Any] = {}
        if frames:
            enc = dict(self.image_processor(images=frames, return_tensors="pt"))
            merge = int(getattr(self.image_processor, "merge_size", 1)) ** 2
            counts = iter((enc["image_grid_thw"].prod(-1) // merge).tolist())
            marker = "\0"
            texts = [t.replace(self.image_token, marker) for t in texts]
            texts = [
                "".join(
                    part if j == 0 else self.image_token * int(next(counts)) + part
                    for j, part in enumerate(t.split(marker))
                )
                for t in texts
            ]
        tok = self.tokenizer(
            texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False
        )
        enc.update(input_ids=tok["input_ids"], attention_mask=tok["attention_mask"])
        enc["mm_token_type_ids"] = (tok["input_ids"] == self.image_token_id).long()
        return enc

    def render(self, prompt: ChatPrompt) -> list[int]:
        """Token ids of ``prompt`` with its image placeholders expanded, ``(T,)``."""
        ids = self._encode([prompt])["input_ids"][0].tolist()
        if self.max_length is not None and len(ids) >= self.max_length:
            raise BackendError(
                f"prompt is {len(ids)} tokens; the model's context is {self.max_length}"
            )
        return ids

    def _read_positions(
        self,
        prompts: Sequence[ChatPrompt],
        sets: Sequence[Sequence[str]],
        *,
        ends: Sequence[int] | None = None,
    ) -> list[list[TokenLogprobs]]:
        """Log-probabilities of ``sets[j]`` at the last ``len(sets)`` positions of each prompt
        (as :meth:`TransformersBackend._read_positions`), frames included."""
        import torch

        self._check_open()
        if not prompts:
            return []
        keep = len(sets)
        ids = [self._candidate_ids(c) for c in sets]
        bs = max(1, int(self.config.batch_size))
        t0 = time.perf_counter()
        results: list[list[TokenLogprobs]] = []
        seqs: list[list[int]] = []
        with self._lock:
            try:
                with torch.inference_mode():
                    for start in range(0, len(prompts), bs):
                        enc = self._encode(prompts[start : start + bs])
                        rows = [
                            r[m.bool()].tolist()
                            for r, m in zip(enc["input_ids"], enc["attention_mask"], strict=True)
                        ]
                        seqs.extend(rows)
                        if ends is not None and any(r[-len(ends) :] != list(ends) for r in rows):
                            raise BackendError(
                                f"a prompt does not end with the read plan's token ids {list(ends)} "
                                "after rendering: the chat template changed the prefill"
                            )
                        enc = {
                            k: v.to(self.device) if hasattr(v, "to") else v for k, v in enc.items()
                        }
                        logits = self.model(**enc, logits_to_keep=keep).logits[:, -keep:, :].float()
                        lp = torch.log_softmax(logits, dim=-1).cpu()
                        for row in range(lp.shape[0]):
                            results.append(
                                [
                                    TokenLogprobs(
                                        logprobs=dict(
                                            zip(sets[j], lp[row, j, ids[j]].tolist(), strict=True)
                                        )
                                    )
                                    for j in range(keep)
                                ]
                            )
            except RuntimeError as e:  # out of memory, shape errors of a malformed frame
                self.usage.n_failures += 1
                raise BackendError(f"transformers forward pass failed: {e}") from e
            self.usage.record_batch(seqs, started=t0)
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
        """Sample one continuation of each prompt, frames included (see
        :meth:`TransformersBackend.generate`); one prompt per call."""
        import torch

        self._check_open()
        if max_new_tokens < 1 or temperature < 0:
            raise BackendError("max_new_tokens must be >= 1 and temperature >= 0")
        sampling: dict[str, Any] = (
            {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
            if temperature > 0
            else {"do_sample": False}
        )
        texts = []
        # a forked RNG (CPU and every CUDA device): the caller's streams are left as they were
        with (
            self._lock,
            forked_rng(self.config.seed if seed is None else seed),
            torch.inference_mode(),
        ):
            for p in prompts:
                t0 = time.perf_counter()
                enc = {k: v.to(self.device) for k, v in self._encode([p]).items()}
                try:
                    out = self.model.generate(
                        **enc, max_new_tokens=max_new_tokens, pad_token_id=self.pad_id, **sampling
                    )
                except RuntimeError as e:
                    self.usage.n_failures += 1
                    raise BackendError(f"transformers generation failed: {e}") from e
                new = out[0, enc["input_ids"].shape[1] :].tolist()
                texts.append(
                    _cut_at_stop(self.tokenizer.decode(new, skip_special_tokens=True), stop)
                )
                self.usage.record_batch(
                    [enc["input_ids"][0]], started=t0, completion_tokens=len(new)
                )
        return texts

    def __repr__(self) -> str:
        return f"VisionTransformersBackend(model={Path(self.model_id).name!r}, device={self.device}, dtype={self.dtype})"
