"""Griffe extension for the documentation site (mkdocs.yml): doctest blocks become code blocks.

The docstrings keep their doctests at the top level of the text (``>>> ...`` lines and their
output, run by pytest's ``--doctest-modules``), outside any ``Examples:`` section. Markdown would
render them as prose, and read an output such as ``[[2, 2], [2, 0, 1]]`` as a reference link.
This wraps every unindented doctest block (from a ``>>>`` line to the next blank line) in a
fenced ``pycon`` block before mkdocstrings renders the docstring. The source is not changed.
"""

from __future__ import annotations

from typing import Any

import griffe


def fence_doctests(text: str) -> str:
    """Wrap each unindented doctest block of ``text`` in a fenced ``pycon`` code block.

    >>> print(fence_doctests("Intro.\\n\\n>>> 1 + 1\\n2\\n\\nAfter."))
    Intro.
    <BLANKLINE>
    ```pycon
    >>> 1 + 1
    2
    ```
    <BLANKLINE>
    After.
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


class FenceDoctests(griffe.Extension):
    """Fence the top-level doctest blocks of every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
