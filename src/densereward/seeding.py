"""Seeded sampling that leaves the caller's random streams alone.

A held-out evaluation or a verifier's sampled analysis draws from a fixed seed (common random
numbers: the same draws before and after training). Seeding the *global* generators for that
would make every later draw of the caller depend on the evaluation's seed instead of its own:
a GRPO run that evaluates before its first step would sample its training completions from
``heldout.seed``'s stream whatever its ``training.seed`` (issue 36). :func:`forked_rng` seeds a
fork of the CPU generator and of every visible CUDA device's generator
(``torch.random.fork_rng``) and restores all of them on exit.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["forked_rng", "visible_cuda_devices"]


def visible_cuda_devices() -> list[int]:
    """Indices of every CUDA device this process can see (``[]`` without CUDA).

    ``torch.manual_seed`` seeds all of them, so a fork that restores the caller's streams must
    cover all of them, not only the device a model sits on.
    """
    import torch

    if not torch.cuda.is_available():
        return []
    return list(range(torch.cuda.device_count()))


@contextmanager
def forked_rng(seed: int | None) -> Iterator[None]:
    """Run the block on forked torch generators seeded with ``seed`` (``None``: not reseeded).

    On exit the CPU generator and every visible CUDA device's generator are what they were
    before the block, so the caller's next ``torch.rand`` is the draw it would have made had
    the block never run.

    Args:
        seed: Seed of the block's draws (``torch.manual_seed``), or ``None`` to fork only.

    >>> import torch
    >>> _ = torch.manual_seed(3); expected = torch.rand(2)
    >>> _ = torch.manual_seed(3)
    >>> with forked_rng(0):
    ...     _ = torch.rand(5)
    >>> bool(torch.equal(torch.rand(2), expected))
    True
    """
    import torch

    with torch.random.fork_rng(devices=visible_cuda_devices()):
        if seed is not None:
            torch.manual_seed(seed)
        yield
