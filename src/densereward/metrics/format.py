"""Numbers and Markdown tables for reports: the one formatter every report uses.

An undefined metric (``None``, or ``NaN`` as the metrics return it) prints as ``n/a``, never
as ``0`` or ``nan``.

>>> format_number(0.12345), format_number(float("nan")), format_number(None), format_number(7)
('0.123', 'n/a', 'n/a', '7')
>>> print(markdown_table(["metric", "value"], [["auroc", 0.6789], ["tpr", None]]))
| metric | value |
|---|---|
| auroc | 0.679 |
| tpr | n/a |
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

__all__ = ["format_number", "format_threshold", "markdown_table"]


def format_number(x: Any, digits: int = 3) -> str:
    """``x`` with ``digits`` decimals; ``None`` or ``NaN`` -> ``"n/a"``.

    Integers (and booleans) print as they are, without decimals; ``inf`` prints as ``inf``.

    Args:
        x: a real number, ``None``, or a string (returned unchanged).
        digits: decimals of a non-integer number (``>= 0``).

    Raises:
        TypeError: if ``x`` is neither a number, ``None`` nor a string.
    """
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    if isinstance(x, (bool, numbers.Integral)):
        return str(x)
    if isinstance(x, numbers.Real):
        return "n/a" if math.isnan(x) else f"{float(x):.{digits}f}"
    raise TypeError(f"format_number needs a number or None, got {type(x).__name__}: {x!r}")


def format_threshold(threshold: float | None, scores: Sequence[float], digits: int = 4) -> str:
    """An accept threshold written so that copying it reproduces the rates read at it.

    The fewest decimals (at least ``digits``) of ``threshold``, rounded or else rounded down,
    with which ``score >= text`` accepts exactly the ``scores`` that ``score >= threshold``
    accepts: an auto threshold is often a score itself (Youden's J picks among the scores), and
    rounded up it would reject that score (``0.14998714`` printed as ``0.1500``), so a report's
    ``verifier.threshold=<text>`` would give other TPR / TNR than the report.

    >>> format_threshold(0.14998714440278324, [0.14998714440278324, 0.16, 0.149])
    '0.1499'
    >>> format_threshold(0.61234, [0.6123, 0.61234, 0.7])
    '0.61234'
    >>> format_threshold(0.5, []), format_threshold(float("nan"), [0.3])
    ('0.5000', 'n/a')

    Args:
        threshold: the threshold in ``[0, 1]``; ``None`` or ``NaN`` -> ``"n/a"``.
        scores: ``(n,)`` the scores it is applied to (``NaN``: abstained, ignored).
        digits: the fewest decimals written (``>= 0``).
    """
    from decimal import ROUND_FLOOR, Decimal

    if threshold is None or math.isnan(threshold):
        return "n/a"
    t = float(threshold)
    read = [float(x) for x in scores if not math.isnan(float(x))]
    accepted = [x >= t for x in read]
    for d in range(digits, 18):
        down = Decimal(repr(t)).quantize(Decimal(1).scaleb(-d), rounding=ROUND_FLOOR)
        for text in (f"{t:.{d}f}", f"{down:.{d}f}"):
            if [x >= float(text) for x in read] == accepted:
                return text
    return repr(t)


def markdown_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], *, digits: int = 3
) -> str:
    """A GitHub-flavoured Markdown table (no trailing newline).

    Args:
        headers: ``(n_columns,)`` column titles.
        rows: rows of ``n_columns`` cells each; strings are written as they are, numbers and
            ``None`` through :func:`format_number` with ``digits`` decimals. A ``|`` inside a
            cell is escaped.

    Raises:
        ValueError: if a row has a different number of cells than ``headers``.
    """

    def cell(c: Any) -> str:
        return format_number(c, digits).replace("|", "\\|")

    lines = ["| " + " | ".join(map(cell, headers)) + " |", "|" + "---|" * len(headers)]
    for i, r in enumerate(rows):
        if len(r) != len(headers):
            raise ValueError(f"row {i} has {len(r)} cells, the table has {len(headers)} columns")
        lines.append("| " + " | ".join(map(cell, r)) + " |")
    return "\n".join(lines)
