"""densereward.metrics.format: the one number formatter and Markdown table of the reports."""

import math

import numpy as np
import pytest

from densereward.metrics.format import format_number, markdown_table


def test_format_number_undefined_is_na_and_digits_apply():
    assert (
        format_number(None) == format_number(math.nan) == format_number(np.float32("nan")) == "n/a"
    )
    assert format_number(2 / 3) == "0.667" and format_number(2 / 3, 1) == "0.7"
    assert format_number(12.0, 0) == "12" and format_number(np.float64(0.25), 4) == "0.2500"
    assert format_number(7) == "7" and format_number(np.int64(7)) == "7"  # counts: no decimals
    assert format_number(-math.inf) == "-inf"  # a value, not undefined
    with pytest.raises(TypeError, match="number or None"):
        format_number([0.5])


def test_markdown_table_formats_cells_and_rejects_ragged_rows():
    text = markdown_table(["a", "b|c"], [["x", 0.5], ["y", None]], digits=2)
    assert text.splitlines() == ["| a | b\\|c |", "|---|---|", "| x | 0.50 |", "| y | n/a |"]
    with pytest.raises(ValueError, match="row 1 has 1 cells"):
        markdown_table(["a", "b"], [["x", 1], ["y"]])
