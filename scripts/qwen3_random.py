"""Build a random-weight Qwen3 checkpoint with the real Qwen3 tokenizer and chat template.

No Qwen3 weights exist on these machines, but ``../shared/models/qwen3-tokenizer/`` holds
Qwen3's exact tokenizer and chat template (its README). A ``Qwen3ForCausalLM`` with seeded
random weights and that tokenizer exercises everything but the weights: the vocabulary
(151,936 rows, as Qwen3-8B), special tokens, the thinking switch of the template, the
architecture in transformers and vLLM. Its scores say nothing about quality.

Two sizes:

* ``tiny``: 2 layers, hidden 128 (about 20 M parameters, 80 MB in float32) for CPU tests.
  The output-embedding (lm_head) rows of the tokens a score read asks for (``>A``..``>T``,
  ``>`` and the letters with no merged token, :func:`score_read_ids`) are scaled up (``--letter-boost``, default 50) so those letters carry
  most of the next-token mass. Pure random weights spread the mass over the whole vocabulary (about 3e-4 on the
  letters): a served verifier's top-20 log-probabilities would then miss every letter and
  every read would abstain. With the boost the letters are in the top-k and their
  distribution still varies from prompt to prompt. ``--letter-boost 1`` turns it off.
* ``8b``: Qwen3-8B's exact configuration (36 layers, hidden 4096, 32 heads, 8 KV heads,
  head_dim 128, intermediate 12288, untied lm_head, 40,960 positions), bfloat16, about
  16.4 GB on disk, for speed measurements on a GPU (``scripts/gpu_smoke.sh``). Build it on
  the GPU (``--device cuda``); on a CPU it takes many minutes.

Usage::

    python scripts/qwen3_random.py --size tiny --out runs/qwen3-tiny
    python scripts/qwen3_random.py --size 8b --out /tmp/qwen3-8b-random --device cuda

The output directory is written atomically (a temporary sibling renamed into place), so a
killed build never leaves a half-written model; an existing complete directory is reused.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOKENIZER_DIR = REPO.parent / "shared" / "models" / "qwen3-tokenizer"

# Qwen3-8B's config.json (Hugging Face Qwen/Qwen3-8B), the fields that shape the network.
QWEN3_8B = dict(
    vocab_size=151936,
    hidden_size=4096,
    intermediate_size=12288,
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=40960,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    hidden_act="silu",
    attention_bias=False,
    bos_token_id=151643,
    eos_token_id=151645,
)
# The tiny model of the tokenizer's README: the real vocabulary, two small layers.
QWEN3_TINY = dict(
    QWEN3_8B,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
)
SIZES = {"tiny": QWEN3_TINY, "8b": QWEN3_8B}
SCORE_LETTERS = [chr(ord("A") + i) for i in range(20)]


def score_read_ids(tok) -> list[int]:
    """Token ids a score read of ``<score>X`` asks for under Qwen's tokenizer (format 2).

    Qwen merges ``>`` with most letters (``>T``), so the verifier reads at the boundary before
    ``>``: the merged tokens ``>A`` ... and ``>`` there, and the letters without a merged token
    (``Q``) after ``>`` (:mod:`densereward.verifier.boundary`). Boosting these, not the bare
    letters, puts the tiny model's mass where the read is.
    """
    ids = {tok.convert_tokens_to_ids(">")}
    for c in SCORE_LETTERS:
        merged = tok.encode(">" + c, add_special_tokens=False)
        ids |= set(merged) if len(merged) == 1 else set(tok.encode(c, add_special_tokens=False))
    return sorted(ids)


def build_atomically(out: Path, spec: dict, write: Callable[[Path], None]) -> Path:
    """Build a model directory ``out`` atomically, or reuse it as it is.

    ``out`` is reused when its ``build_spec.json`` equals ``spec``; otherwise ``write(tmp)``
    fills a temporary sibling directory, the spec is stamped into it, and it replaces ``out``
    (``os.replace``); a failed or interrupted build leaves nothing behind.
    """
    stamp = out / "build_spec.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == spec:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        write(tmp)
        (tmp / "build_spec.json").write_text(json.dumps(spec))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def build(
    out: str | Path,
    *,
    size: str = "tiny",
    seed: int = 0,
    dtype: str | None = None,
    device: str = "cpu",
    letter_boost: float | None = None,
    tokenizer_dir: str | Path = TOKENIZER_DIR,
) -> Path:
    """Write a random-weight Qwen3 checkpoint (config, safetensors, tokenizer) to ``out``.

    Args:
        out: Output directory; reused as it is when it already holds a complete build of the
            same specification (``build_spec.json``).
        size: ``tiny`` or ``8b`` (see the module docstring).
        seed: ``torch.manual_seed`` before the weights are initialised.
        dtype: ``float32`` / ``bfloat16``; default float32 for tiny, bfloat16 for 8b.
        device: where the weights are initialised (``cuda`` makes the 8b build fast).
        letter_boost: factor on the lm_head rows of the score letters; default 50 for tiny,
            1 (off) for 8b. A boosted model suits a served verifier (the letters are in the
            top-k); as a policy it writes the same letter string every time.
        tokenizer_dir: the Qwen3 tokenizer folder.

    Returns:
        ``out`` as a :class:`~pathlib.Path`.

    Raises:
        FileNotFoundError: if the tokenizer folder is missing.
        ValueError: for an unknown size or dtype.
    """
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    dtype = dtype or ("float32" if size == "tiny" else "bfloat16")
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dtype must be float32 or bfloat16, got {dtype!r}")
    boost = float(letter_boost if letter_boost is not None else (50.0 if size == "tiny" else 1.0))
    tokenizer_dir = Path(tokenizer_dir)
    if not (tokenizer_dir / "tokenizer.json").is_file():
        raise FileNotFoundError(f"Qwen3 tokenizer not found in {tokenizer_dir}")
    out = Path(out)
    spec = {"size": size, "seed": seed, "dtype": dtype, "letter_boost": boost, "format": 2}

    def write(tmp: Path) -> None:
        tok = AutoTokenizer.from_pretrained(tokenizer_dir)
        config = Qwen3Config(**SIZES[size], dtype=dtype)
        torch.manual_seed(seed)
        with torch.device(device):
            model = Qwen3ForCausalLM(config).to(getattr(torch, dtype))
        if boost != 1.0:
            ids = score_read_ids(tok)
            with torch.no_grad():
                model.get_output_embeddings().weight[ids] *= boost  # lm_head (tied: embeddings too)
        model.generation_config.pad_token_id = tok.pad_token_id
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)

    return build_atomically(out, spec, write)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--out", required=True, help="output model directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default=None)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (init device)")
    parser.add_argument("--letter-boost", type=float, default=None)
    args = parser.parse_args(argv)
    path = build(
        args.out,
        size=args.size,
        seed=args.seed,
        dtype=args.dtype,
        device=args.device,
        letter_boost=args.letter_boost,
    )
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
