"""Griffe extension for the documentation site (mkdocs.yml): docstrings written for pytest and
Sphinx-style readers become Markdown that mkdocstrings renders and checks.

* Doctest blocks: the docstrings keep their doctests at the top level of the text (``>>> ...``
  lines and their output, run by pytest's ``--doctest-modules``), outside any ``Examples:``
  section. Markdown would render them as prose, and read an output such as
  ``[[2, 2], [2, 0, 1]]`` as a reference link; each becomes a fenced ``pycon`` block.
* Sphinx roles (``:class:`~densereward.scale.ScoreScale```): a fully qualified ``densereward``
  name that exists becomes a link (plain code where the object has no page of its own); one
  that does not exist becomes a cross-reference that nothing resolves, so ``mkdocs build
  --strict`` fails on it. Other names (relative ones, other packages) become code spans.

The source is not changed.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")


def fence_doctests(text: str) -> str:
    """Wrap each unindented doctest block of ``text`` in a fenced ``pycon`` code block.

    >>> fence_doctests("Intro.\\n\\n>>> 1 + 1\\n2\\n\\nAfter.").splitlines()
    ['Intro.', '', '```pycon', '>>> 1 + 1', '2', '```', '', 'After.']
    """
    out: list[str] = []
    in_block = in_fence = False
    for line in text.split("\n"):
        if line.startswith("```"):
            in_fence = not in_fence
        if not in_fence and not in_block and line.startswith(">>>"):
            out.append("```pycon")
            in_block = True
        elif in_block and not line.strip():
            out.append("```")
            in_block = False
        out.append(line)
    if in_block:
        out.append("```")
    return "\n".join(out)


def roles_to_markdown(text: str, exists: Any = lambda path: True) -> str:
    """Sphinx roles as Markdown; ``exists(path)`` says whether a ``densereward`` name is real.

    >>> roles_to_markdown(":class:`~densereward.scale.ScoreScale` and :func:`make_env`")
    '<autoref identifier="densereward.scale.ScoreScale" optional><code>ScoreScale</code></autoref> and `make_env`'
    >>> roles_to_markdown(":func:`densereward.nope`", exists=lambda path: False)
    '[`densereward.nope`][densereward.nope]'
    """

    def markdown(match: re.Match[str]) -> str:
        short, target = match.group(1), match.group(2).strip()
        shown = target.rsplit(".", 1)[-1] if short else target
        if not target.startswith("densereward."):
            return f"`{shown}`"
        if exists(target):  # a link where the object has a page, else plain code
            return f'<autoref identifier="{target}" optional><code>{shown}</code></autoref>'
        return f"[`{shown}`][{target}]"  # unresolvable: the strict build reports it

    return _ROLE.sub(markdown, text)


def _objects(obj: griffe.Object) -> Any:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)


class FenceDoctests(griffe.Extension):
    """Rewrite every docstring of the loaded package (doctests fenced, roles as Markdown)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        def exists(path: str) -> bool:
            try:
                loader.modules_collection.get_member(path)
            except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
                return False
            return True

        for obj in _objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = roles_to_markdown(fence_doctests(obj.docstring.value), exists)
