"""MkDocs hooks (mkdocs.yml ``hooks:``) that keep the site whole while pages and modules land.

* A nav entry whose page is not in ``docs/`` stops the build with an error naming the page (and
  the nav title it sits under): list a page in ``mkdocs.yml`` in the change that adds it.
* Every public module gets a reference: a subpackage or top-level module of ``densereward``
  with an ``__all__`` that no ``docs/api/*.md`` page renders (``::: module``) is rendered on a
  generated page, ``api/more.md``, so a new module is in the reference (and its docstrings are
  checked strictly) before someone gives it a page of its own.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

GENERATED = "api/more.md"
_DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)


def missing_pages(items: list[Any], docs_dir: Path, where: str = "") -> list[str]:
    """``"title > page"`` for each nav entry (nested too) whose Markdown file is not in ``docs_dir``.

    >>> missing_pages([{"B": [{"C": "nope.md"}]}, {"D": "https://x"}], Path("/no/docs"))
    ['B > C: nope.md']
    """
    out: list[str] = []
    for item in items:
        title, value = next(iter(item.items())) if isinstance(item, dict) else ("", item)
        label = " > ".join(t for t in (where, str(title)) if t)
        if isinstance(value, list):
            out += missing_pages(value, docs_dir, label)
        elif not _exists(str(value), docs_dir):
            out.append(f"{label}: {value}" if label else str(value))
    return out


def _exists(page: str, docs_dir: Path) -> bool:
    return "://" in page or page == GENERATED or (docs_dir / page).is_file()


def public_modules(src: Path) -> list[str]:
    """``densereward.<name>`` for each subpackage or top-level module (not ``_x``) with ``__all__``."""
    found = []
    for path in sorted([*src.glob("*/__init__.py"), *src.glob("*.py")]):
        name = path.parent.name if path.name == "__init__.py" else path.stem
        if path.parent != src and path.name != "__init__.py":
            continue
        if name != src.name and not name.startswith("_") and "__all__" in path.read_text():
            found.append(f"{src.name}.{name}")
    return found


def undocumented_modules(docs_dir: Path, src: Path) -> list[str]:
    """The public modules no ``docs/api/*.md`` page renders with a ``::: module`` directive."""
    pages = [p.read_text() for p in sorted((docs_dir / "api").glob("*.md"))]
    documented = {m for text in pages for m in _DIRECTIVE.findall(text)}
    return [m for m in public_modules(src) if m not in documented]


def more_page(modules: list[str]) -> str:
    """The generated page: one ``::: module`` per undocumented public module."""
    if not modules:
        return "# More modules\n\nEvery public module has a page of its own.\n"
    body = "\n\n".join(f"::: {m}" for m in modules)
    return f"# More modules\n\nPublic modules that have no page of their own yet.\n\n{body}\n"


def on_config(config: Any, **kwargs: Any) -> Any:
    """Refuse a nav whose entries name a Markdown file that does not exist under ``docs_dir``.

    Raises:
        mkdocs.exceptions.PluginError: naming each missing page.
    """
    missing = missing_pages(config.get("nav") or [], Path(config["docs_dir"]))
    if missing:
        from mkdocs.exceptions import PluginError

        raise PluginError(
            f"mkdocs.yml nav names {len(missing)} page(s) not in {config['docs_dir']}: "
            f"{'; '.join(missing)}; add the page or remove its nav entry"
        )
    return config


def on_files(files: Any, config: Any, **kwargs: Any) -> Any:
    """Add ``api/more.md`` with the public modules no API page renders."""
    from mkdocs.structure.files import File

    src = Path(config["config_file_path"]).parent / "src" / "densereward"
    if src.is_dir() and files.get_file_from_path(GENERATED) is None:
        content = more_page(undocumented_modules(Path(config["docs_dir"]), src))
        files.append(File.generated(config, GENERATED, content=content))
    return files
