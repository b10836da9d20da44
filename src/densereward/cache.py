"""Persistent score cache.

Backed by :mod:`diskcache` (SQLite in WAL mode): safe with several writer processes, and a
crash mid-write leaves the previous state (each ``set`` is one transaction), never a
half-written entry. Keys are SHA-256 digests of everything that determines a backend's
answer: backend name, model id, the rendered prompt, the candidate tokens, and the settings
that change it (not timeouts, retries, health checks or replica balancing:
:func:`densereward.backend_options.answer_options`).
Values are the backend's raw answer, so a cached and an uncached run compute identical
rewards.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

__all__ = ["ScoreCache", "cache_key"]


def cache_key(**parts: Any) -> str:
    """SHA-256 hex digest of ``parts`` serialised canonically (sorted keys, JSON).

    >>> cache_key(a=1, b=[1, 2]) == cache_key(b=[1, 2], a=1)
    True
    """
    blob = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=True).encode()
    return hashlib.sha256(blob).hexdigest()


class ScoreCache:
    """A process-safe, crash-safe key-value store for backend answers.

    Args:
        directory: where the SQLite files live (created if missing).
        size_limit_bytes: eviction bound (least recently stored first); default 4 GiB.
    """

    def __init__(self, directory: str | Path, *, size_limit_bytes: int = 4 * 2**30) -> None:
        import diskcache

        self.directory = Path(directory)
        self._cache = diskcache.Cache(str(self.directory), size_limit=size_limit_bytes)

    def get(self, key: str) -> Any | None:
        """The stored value, or ``None`` when absent."""
        return self._cache.get(key, default=None, retry=True)

    def set(self, key: str, value: Any) -> None:
        """Store ``value`` (one SQLite transaction; concurrent writers are serialised)."""
        self._cache.set(key, value, retry=True)

    def __len__(self) -> int:
        return len(self._cache)

    def close(self) -> None:
        """Close the SQLite connections. Idempotent."""
        self._cache.close()

    def __repr__(self) -> str:
        return f"ScoreCache({str(self.directory)!r}, n={len(self)})"
