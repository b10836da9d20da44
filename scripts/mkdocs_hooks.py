"""MkDocs hook (mkdocs.yml ``hooks:``): nav entries whose page is not in ``docs/`` are dropped.

Pages written by other work streams can be listed in the nav before they land; a page that does
not exist is left out of the site instead of failing ``mkdocs build --strict``. Every link
*inside* a page is still checked strictly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _prune(items: list[Any], docs_dir: Path) -> list[Any]:
    kept: list[Any] = []
    for item in items:
        if isinstance(item, dict):
            (title, value), *_ = item.items()
            if isinstance(value, list):
                value = _prune(value, docs_dir)
                if value:
                    kept.append({title: value})
            elif "://" in str(value) or (docs_dir / str(value)).is_file():
                kept.append(item)
        elif "://" in str(item) or (docs_dir / str(item)).is_file():
            kept.append(item)
    return kept


def on_config(config: Any, **kwargs: Any) -> Any:
    """Drop nav entries whose Markdown file does not exist under ``docs_dir``."""
    if config.get("nav"):
        config["nav"] = _prune(config["nav"], Path(config["docs_dir"]))
    return config
