"""Held-out pass rate of a policy before and after training, with a paired bootstrap CI.

A GRPO run's in-training ``verifier/pass_rate`` is measured on the problems being trained on,
with samples the policy has just been updated on. Whether the policy *got stronger* is a
question about problems it never trained on: :func:`evaluate_pass_rate` samples the policy
on a fixed held-out set (greedy, and ``n_samples`` fixed-seed samples per problem), checks
each completion with Math-Verify, and :func:`paired_difference` compares two evaluations of
the same problems with a bootstrap interval of the mean per-problem difference (problems
resampled with replacement, both evaluations kept together: a paired percentile bootstrap,
Efron & Tibshirani 1993, sec. 13).

The GRPO trainer runs this before the first step and after the last one when the config has
a ``heldout:`` section (:class:`HeldoutConfig`) and writes ``<run_dir>/heldout.json``; with
``heldout.every_steps`` also every k steps, a held-out learning curve
(:mod:`densereward.trainers.grpo_heldout`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import ConfigError, DataError

__all__ = ["HeldoutConfig", "evaluate_pass_rate", "heldout_tasks", "paired_difference"]


@dataclass(frozen=True)
class HeldoutConfig:
    """A fixed held-out problem set for the policy's pass rate (YAML section ``heldout:``)."""

    data: dict[str, Any] | None = None
    """``data:`` mapping (:class:`densereward.data.DataConfig` fields) of the held-out problems,
    e.g. the training task with another ``seed``; ``None`` disables the evaluation."""
    exclude_train: bool = True
    """Drop held-out problems whose text also occurs in the training set (small task spaces,
    such as one-digit sums, repeat problems across seeds)."""
    n_problems: int | None = 100
    """Keep at most this many held-out problems (after the exclusion); ``None`` = all."""
    greedy: bool = True
    """Also evaluate greedy decoding (one completion per problem)."""
    n_samples: int = 4
    """Sampled completions per problem (fixed seed); 0 = greedy only."""
    temperature: float | None = None
    """Sampling temperature; ``None`` = the training temperature (``training.temperature``)."""
    max_new_tokens: int | None = None
    """Completion length bound (tokens); ``None`` = ``training.max_completion_length``."""
    batch_size: int = 32
    """Prompts per ``generate`` call."""
    seed: int = 0
    """Sampling seed (the same before and after training: common random numbers)."""
    confidence: float = 0.95
    """Bootstrap interval mass."""
    n_resamples: int = 2000
    """Bootstrap replicates."""
    every_steps: int | None = None
    """Also evaluate every this many optimizer steps (GRPO): a held-out learning curve
    (``heldout_curve.jsonl``), which becomes the run's curve in ``densereward compare``;
    ``None`` = before and after training only."""

    def __post_init__(self) -> None:
        if self.n_samples < 0:
            raise ConfigError(f"heldout.n_samples must be >= 0, got {self.n_samples}")
        if not self.greedy and self.n_samples == 0:
            raise ConfigError("heldout: set greedy=true or n_samples >= 1 (nothing to evaluate)")
        if self.n_problems is not None and self.n_problems < 1:
            raise ConfigError(f"heldout.n_problems must be >= 1 or null, got {self.n_problems}")
        if self.every_steps is not None and self.every_steps < 1:
            raise ConfigError(f"heldout.every_steps must be >= 1 or null, got {self.every_steps}")
        if self.batch_size < 1:
            raise ConfigError(f"heldout.batch_size must be >= 1, got {self.batch_size}")
        if not 0.0 < self.confidence < 1.0:
            raise ConfigError(f"heldout.confidence must be in (0, 1), got {self.confidence}")


def heldout_tasks(cfg: HeldoutConfig, train_problems: Sequence[str] = ()):
    """The held-out problems as a conversational dataset (see :func:`densereward.data.load_tasks`).

    Args:
        cfg: The held-out config (``cfg.data`` must be set).
        train_problems: Problem texts of the training set (excluded when ``cfg.exclude_train``).

    Returns:
        A ``datasets.Dataset`` of at most ``cfg.n_problems`` rows.

    Raises:
        DataError: if ``cfg.data`` is unset or nothing is left after the exclusion.
    """
    from .data import load_tasks

    if cfg.data is None:
        raise DataError("heldout.data is not set")
    ds = load_tasks(cfg.data)
    if cfg.exclude_train:
        seen = set(train_problems)
        ds = ds.filter(lambda r: r["problem"] not in seen)
    if cfg.n_problems is not None:
        ds = ds.select(range(min(cfg.n_problems, len(ds))))
    if len(ds) == 0:
        raise DataError(
            "no held-out problems left after excluding the training problems; "
            "raise heldout.data.size or use another task seed"
        )
    return ds


def _generate(
    model,
    tokenizer,
    prompts: list[str],
    *,
    max_new_tokens: int,
    temperature: float | None,
    n: int,
    batch_size: int,
) -> list[list[str]]:
    """``n`` completions per prompt (greedy when ``temperature`` is ``None``)."""
    import torch

    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    out: list[list[str]] = []
    try:
        for i in range(0, len(prompts), batch_size):
            enc = tokenizer(prompts[i : i + batch_size], return_tensors="pt", padding=True)
            enc = {k: v.to(model.device) for k, v in enc.items()}
            kw: dict[str, Any] = {
                "do_sample": False,
                "temperature": None,
                "top_p": None,
                "top_k": None,
            }
            if temperature is not None:
                kw = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0}
            with torch.no_grad():
                ids = model.generate(
                    **enc,
                    max_new_tokens=max_new_tokens,
                    num_return_sequences=n,
                    pad_token_id=tokenizer.pad_token_id,
                    **kw,
                )
            texts = tokenizer.batch_decode(
                ids[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
            )
            out.extend(texts[j * n : (j + 1) * n] for j in range(len(texts) // n))
    finally:
        tokenizer.padding_side = side
    return out


def evaluate_pass_rate(
    model,
    tokenizer,
    dataset,
    cfg: HeldoutConfig,
    *,
    temperature: float,
    max_new_tokens: int,
    checker=None,
) -> dict[str, Any]:
    """Math-Verify pass rate of ``model`` on every problem of ``dataset``.

    Args:
        model: A causal LM (``transformers``), evaluated in ``eval`` mode and restored after.
        tokenizer: Its tokenizer (with a chat template; prompts are the dataset's conversations).
        dataset: Rows with ``prompt`` (conversational), ``problem`` and ``answer``.
        cfg: Decoding settings (greedy, ``n_samples``, batch size, seed).
        temperature: Sampling temperature when ``cfg.temperature`` is ``None``.
        max_new_tokens: Length bound when ``cfg.max_new_tokens`` is ``None``.
        checker: A :class:`densereward.rewards.math.MathChecker`; default the shared one.

    Returns:
        ``{"problems": (m,) texts, "greedy": (m,) 0/1 or None, "sampled": (m,) per-problem
        mean over ``n_samples`` in ``[0, 1]`` (None without samples), "examples": a few
        completions}``. A completion whose check abstains counts as incorrect and is counted in
        ``n_abstained``. The sampled draws come from ``cfg.seed`` on a fork of the torch
        generators (:func:`densereward.seeding.forked_rng`): the caller's CPU and CUDA random
        streams are left as they were.
    """
    from .rewards.math import default_checker
    from .seeding import forked_rng

    checker = checker or default_checker()
    temperature = cfg.temperature if cfg.temperature is not None else temperature
    max_new_tokens = cfg.max_new_tokens or max_new_tokens
    prompts = [
        tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True)
        for r in dataset
    ]
    answers = [r["answer"] for r in dataset]
    was_training = model.training
    model.eval()
    result: dict[str, Any] = {
        "problems": list(dataset["problem"]),
        "n_abstained": 0,
        "examples": [],
    }
    try:
        modes = ([("greedy", None, 1)] if cfg.greedy else []) + (
            [("sampled", temperature, cfg.n_samples)] if cfg.n_samples else []
        )
        for name, temp, n in modes:
            # cfg.seed seeds a fork of the CPU and every CUDA generator: the caller's streams
            # (a GRPO run's training samples) do not depend on the evaluation (issue 36)
            with forked_rng(cfg.seed):
                texts = _generate(
                    model,
                    tokenizer,
                    prompts,
                    max_new_tokens=max_new_tokens,
                    temperature=temp,
                    n=n,
                    batch_size=cfg.batch_size,
                )
            flat_refs = [a for a in answers for _ in range(n)]
            checks = checker.check_batch(flat_refs, [t for ts in texts for t in ts])
            ok = np.array([c.reward == 1.0 for c in checks], dtype=np.float64).reshape(-1, n)
            result["n_abstained"] += sum(c.reward is None for c in checks)
            result[name] = ok.mean(axis=1).tolist()
            result["examples"] += [
                {
                    "mode": name,
                    "problem": dataset[i]["problem"],
                    "completion": texts[i][0],
                    "correct": bool(ok[i, 0]),
                }
                for i in range(min(3, len(texts)))
            ]
    finally:
        model.train(was_training)
    result.setdefault("greedy", None)
    result.setdefault("sampled", None)
    return result


def paired_difference(
    before: Sequence[float],
    after: Sequence[float],
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """Pass rates before / after and their difference, with paired bootstrap intervals.

    Problems are resampled with replacement and each keeps its (before, after) pair
    (percentile bootstrap, Efron & Tibshirani 1993), via
    :func:`densereward.metrics.bootstrap_many`.

    Args:
        before: ``(m,)`` per-problem pass rates in ``[0, 1]`` before training.
        after: ``(m,)`` the same problems after training.
        confidence: Interval mass in ``(0, 1)``.
        n_resamples: Bootstrap replicates.
        seed: RNG seed.

    Returns:
        ``{"before", "after", "difference"}``, each ``{"value", "low", "high", "n_resamples"}``
        (``difference = mean(after - before)``, in ``[-1, 1]``).

    Raises:
        DataError: if the two sequences differ in length or are empty.

    >>> r = paired_difference([0, 0, 1, 0] * 10, [1, 0, 1, 1] * 10, n_resamples=500)
    >>> r["difference"]["value"], r["difference"]["low"] > 0
    (0.5, True)
    """
    from .metrics import bootstrap_many

    b = np.asarray(before, dtype=np.float64)
    a = np.asarray(after, dtype=np.float64)
    if b.shape != a.shape or b.size == 0:
        raise DataError(
            f"paired_difference needs two equal, non-empty sequences, got {b.size} and {a.size}"
        )
    return bootstrap_many(
        {
            "before": lambda x, y: float(np.mean(x)),
            "after": lambda x, y: float(np.mean(y)),
            "difference": lambda x, y: float(np.mean(y - x)),
        },
        b,
        a,
        n_resamples=n_resamples,
        confidence=confidence,
        seed=seed,
    )
