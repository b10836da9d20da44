"""Build a tiny random-weight Qwen2-VL checkpoint with the real Qwen3 tokenizer (a verifier that sees).

No vision-language weights can be downloaded on these machines. ``../shared/models/qwen3-tokenizer/``
holds Qwen3's tokenizer, which carries Qwen2-VL's vision special tokens (``<|vision_start|>``
151652, ``<|vision_end|>`` 151653, ``<|image_pad|>`` 151655, ``<|video_pad|>`` 151656, the ids
Qwen2-VL's config names). A ``Qwen2VLForConditionalGeneration`` with the real architecture
(a ViT with 14-pixel patches merged 2x2 into the language model's sequence, multimodal rotary
positions), tiny dimensions and seeded random weights exercises everything but the weights:
the processor (image resizing into patches), the chat template's image parts, the image-pad
expansion, the vision tower, the read at the tokenizer's own boundary. Its scores say nothing
about quality.

* Language model: 2 layers, hidden 128, 4 heads (2 KV heads, head dim 32), the full 151,936-row
  vocabulary, multimodal rotary sections (4, 6, 6) of the 16 rotary frequencies.
* Vision tower: 2 blocks, width 64, 2 heads, patch 14, spatial merge 2, temporal patch 2.
* Image processor: ``Qwen2VLImageProcessorPil`` (no torchvision), ``min_pixels`` 4 x 28 x 28,
  ``max_pixels`` 64 x 28 x 28: a frame becomes at most 64 image tokens (a 224 x 224 frame is 64).
* Chat template: Qwen2-VL-Instruct's (image parts become ``<|vision_start|><|image_pad|><|vision_end|>``).
* The lm_head rows of the tokens a score read asks for (``>A``..``>T``, ``>`` and the letters
  with no merged token; ``qwen3_random.score_read_ids``) are scaled by ``letter_boost`` (50) so
  the letters carry most of the next-token mass, as in ``scripts/qwen3_random.py``.

Usage::

    python scripts/qwen2vl_random.py --out ~/.cache/densereward/models/qwen2vl-tiny-random-v1

The directory is written atomically and reused when its ``build_spec.json`` matches (``format``
is bumped whenever the build changes).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOKENIZER_DIR = REPO.parent / "shared" / "models" / "qwen3-tokenizer"
FORMAT = 1
DEFAULT_OUT = Path.home() / ".cache" / "densereward" / "models" / f"qwen2vl-tiny-random-v{FORMAT}"

# Qwen2-VL-Instruct's chat template (image and video parts, a default system turn).
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture "
    "{{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video "
    "{{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

TEXT = dict(
    vocab_size=151936,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [4, 6, 6]},
    bos_token_id=151643,
    eos_token_id=151645,
)
VISION = dict(
    depth=2,
    embed_dim=64,
    hidden_size=128,  # the merger's output: the language model's width
    num_heads=2,
    mlp_ratio=2,
    patch_size=14,
    spatial_merge_size=2,
    temporal_patch_size=2,
    in_channels=3,
)
TOKENS = dict(
    image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
    vision_end_token_id=151653,
)  # fmt: skip
MIN_PIXELS = 4 * 28 * 28
MAX_PIXELS = 64 * 28 * 28


def _qwen3_random():
    """scripts/qwen3_random.py: its score_read_ids and build_atomically serve this build too."""
    spec = importlib.util.spec_from_file_location("qwen3_random", REPO / "scripts/qwen3_random.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(
    out: str | Path = DEFAULT_OUT,
    *,
    seed: int = 0,
    letter_boost: float = 50.0,
    tokenizer_dir: str | Path = TOKENIZER_DIR,
) -> Path:
    """Write the tiny random-weight Qwen2-VL (config, safetensors, tokenizer, processor) to ``out``.

    Args:
        out: output directory; reused as it is when it holds a complete build of the same
            specification (``build_spec.json``).
        seed: ``torch.manual_seed`` before the weights are initialised.
        letter_boost: factor on the lm_head rows of the score read's tokens (1 = off).
        tokenizer_dir: the Qwen3 tokenizer folder.

    Returns:
        ``out`` as a :class:`~pathlib.Path`.

    Raises:
        FileNotFoundError: if the tokenizer folder is missing.
    """
    import torch
    from transformers import (
        AutoTokenizer,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
    )
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    tokenizer_dir = Path(tokenizer_dir)
    if not (tokenizer_dir / "tokenizer.json").is_file():
        raise FileNotFoundError(f"Qwen3 tokenizer not found in {tokenizer_dir}")
    out = Path(out).expanduser()
    spec = {"arch": "qwen2_vl", "seed": seed, "letter_boost": float(letter_boost), "format": FORMAT}
    qwen3_random = _qwen3_random()

    def write(tmp: Path) -> None:
        tok = AutoTokenizer.from_pretrained(tokenizer_dir)
        tok.chat_template = CHAT_TEMPLATE
        config = Qwen2VLConfig(
            text_config=TEXT, vision_config=VISION, tie_word_embeddings=True, **TOKENS
        )
        torch.manual_seed(seed)
        model = Qwen2VLForConditionalGeneration(config).float()
        if letter_boost != 1.0:
            with torch.no_grad():
                model.get_output_embeddings().weight[qwen3_random.score_read_ids(tok)] *= (
                    letter_boost
                )
        model.generation_config.pad_token_id = tok.pad_token_id
        model.save_pretrained(tmp, safe_serialization=True)
        images = Qwen2VLImageProcessorPil(
            min_pixels=MIN_PIXELS,
            max_pixels=MAX_PIXELS,
            size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
        )
        images.save_pretrained(tmp)
        tok.save_pretrained(tmp)

    return qwen3_random.build_atomically(out, spec, write)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="output model directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--letter-boost", type=float, default=50.0)
    args = parser.parse_args(argv)
    print(build(args.out, seed=args.seed, letter_boost=args.letter_boost))
    return 0


if __name__ == "__main__":
    sys.exit(main())
