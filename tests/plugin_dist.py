"""Install a tiny plugin distribution for a test: a module and its ``*.dist-info`` (``METADATA``
and ``entry_points.txt``) in a directory put on ``sys.path``; the registries re-read their
entry-point groups, and are restored afterwards. Nothing registers the plugin in Python: every
name reaches densereward through ``importlib.metadata``, as from a ``pip install``."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any


def install(
    tmp_path: Path,
    monkeypatch: Any,
    module: str,
    source: str,
    entry_points: str,
    registries: Sequence[Any],
) -> Iterator[Path]:
    """Yield the site directory holding ``module`` (a generator for a pytest fixture)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{module}.py").write_text(source)
    dist = site / f"{module}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(entry_points)
    saved = [dict(r._entries) for r in registries]
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    for r in registries:
        r.reload_plugins()
    yield site
    for r, entries in zip(registries, saved, strict=True):
        r._entries.clear()
        r._entries.update(entries)
    sys.modules.pop(module, None)
