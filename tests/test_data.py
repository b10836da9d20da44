"""GRPO task loading (``densereward.data``): rows a file cannot give are named and counted."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from densereward.data import DataConfig, check_source, load_tasks
from densereward.errors import DataError


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_rows_without_the_answer_field_are_named_counted_and_reported(tmp_path, caplog):
    """Issue 28 item 10: a misspelt answer column is named; dropped rows are counted with why."""
    capital = [{"problem": f"{i}+{i}?", "Answer": str(2 * i)} for i in range(1, 4)]
    none = _jsonl(tmp_path / "none.jsonl", capital)
    with pytest.raises(DataError) as err:
        load_tasks({"path": none})
    msg = str(err.value)
    assert "none of its 3 rows has a reference answer" in msg
    assert "no 'answer' field" in msg and "'Answer'" in msg and "case-sensitive" in msg
    assert "level / limit" not in msg  # the filters had nothing to do with it

    some = _jsonl(tmp_path / "some.jsonl", [{"problem": "0+0?", "answer": "0"}, *capital])
    line, problem = check_source(DataConfig(path=some))  # what --dry-run prints
    assert line.endswith("1 problems loaded")
    assert "3 of 4 rows dropped (no reference answer)" in problem and "'Answer'" in problem
    with caplog.at_level(logging.WARNING, logger="densereward.data"):
        assert len(load_tasks({"path": some})) == 1  # the run says it too
    assert any("3 of 4 rows dropped" in r.getMessage() for r in caplog.records)

    empty = _jsonl(tmp_path / "empty.jsonl", [{"problem": "1+1?", "answer": " "}])
    with pytest.raises(DataError, match="1 with an empty 'answer'"):
        load_tasks({"path": empty})
    whole = _jsonl(tmp_path / "whole.jsonl", [{"problem": "1+1?", "answer": "2"}])
    assert check_source(DataConfig(path=whole))[1] is None  # nothing dropped: nothing said


def test_a_level_filter_that_leaves_nothing_names_the_levels(tmp_path):
    rows = [
        {"problem": "1+1?", "answer": "2", "level": "Level 1"},
        {"problem": "2+2?", "answer": "4", "level": "Level 3"},
    ]
    path = _jsonl(tmp_path / "levels.jsonl", rows)
    with pytest.raises(
        DataError, match=r"no rows of data.levels=\[5\] .* levels there are \[1, 3\]"
    ):
        load_tasks({"path": path, "levels": [5]})
    assert len(load_tasks({"path": path, "levels": [3]})) == 1
