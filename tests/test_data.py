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


@pytest.fixture
def no_hub(tmp_path, monkeypatch):
    """HF_HUB_OFFLINE unset and a Hub endpoint on a closed loopback port (nothing answers)."""
    from huggingface_hub import constants
    from servers import free_port

    from densereward.backends import models

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setattr(models, "_HUB_ANSWERS", {})
    return constants


def test_a_hub_data_id_the_hub_cannot_serve_is_a_problem_at_once(no_hub, monkeypatch, server):
    """Issue 41 third rerun F11: the dry run said "not checked" and exited 0 for a Hub data id
    with no route to the Hub, and the run then waited ~30 s through huggingface_hub's retries
    and ended saying "unset HF_HUB_OFFLINE", which was not set. The Hub is asked once, as for
    a model id; the run stops at once with the same line."""
    import time

    import datasets

    def no_download(*a, **k):
        raise AssertionError("load_dataset was called with the Hub unreachable")

    monkeypatch.setattr(datasets, "load_dataset", no_download)
    cfg = DataConfig(source="HuggingFaceH4/MATH-500")
    line, problem = check_source(cfg)
    assert line is None and "not checked" not in (problem or "")
    assert "the Hub data set 'HuggingFaceH4/MATH-500' cannot be reached" in problem
    assert "data.path" in problem and "HF_HUB_OFFLINE=1" in problem
    assert "unset HF_HUB_OFFLINE" not in problem
    t0 = time.monotonic()
    with pytest.raises(DataError) as err:
        load_tasks(cfg)
    assert time.monotonic() - t0 < 10 and str(err.value) == problem
    # the Hub answers: downloaded when the run starts
    no_hub.ENDPOINT = server.base_url.removesuffix("/v1")
    line, problem = check_source(cfg)
    assert problem is None and line.endswith("the Hub answers: downloaded when the run starts")


def test_a_missing_split_names_the_splits_and_not_hf_hub_offline(monkeypatch):
    """Issue 41 third rerun F11: MATH-500 has only 'test'; the error names the split to set."""
    import datasets
    from huggingface_hub import constants

    def unknown_split(*a, **k):
        raise ValueError("Unknown split \"train\". Should be one of ['test'].")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # no Hub request in the test
    monkeypatch.setattr(datasets, "load_dataset", unknown_split)
    with pytest.raises(DataError) as err:
        load_tasks({"source": "HuggingFaceH4/MATH-500"})
    msg = str(err.value)
    assert "Fix: set data.split to one of its splits ('test')" in msg and "\n" not in msg
    assert "unset HF_HUB_OFFLINE" not in msg


def test_the_data_line_says_when_data_limit_or_levels_capped_the_rows(data_dir, caplog):
    """F3: the GRPO dry run said "64 problems loaded" of MATH-500's 500 rows, as if the file held
    64: the config's ``data.limit: 64`` had capped them without a word. The line names the rows
    there were, the cap and how the kept ones were chosen; the run's start says it too."""
    math500 = str(data_dir / "math500" / "test.jsonl")
    line, _ = check_source(DataConfig(path=math500, limit=64, shuffle=True, seed=0))
    assert line == (
        f"data: jsonl {math500!r}: 64 of 500 problems loaded (data.limit=64: the first 64 after "
        "shuffling with data.seed=0)"
    )
    line, _ = check_source(DataConfig(path=math500, limit=64))
    assert line.endswith(": 64 of 500 problems loaded (data.limit=64: the first 64 in file order)")
    assert check_source(DataConfig(path=math500, limit=500))[0].endswith(": 500 problems loaded")
    line, _ = check_source(DataConfig(path=math500, levels=[1], limit=10))
    lines = Path(math500).read_text(encoding="utf-8").splitlines()
    n_level_1 = sum(json.loads(r)["level"] == 1 for r in lines)
    assert line.endswith(
        f": 10 of 500 problems loaded (data.levels=[1]: {n_level_1} of them; data.limit=10: the "
        "first 10 of those in file order)"
    ), line
    line, _ = check_source(DataConfig(path=math500, levels=[1]))
    assert line.endswith(f": {n_level_1} of 500 problems loaded (data.levels=[1])"), line
    with caplog.at_level(logging.INFO, logger="densereward.data"):
        assert len(load_tasks({"path": math500, "limit": 64})) == 64
    said = [r.getMessage() for r in caplog.records if "data.limit" in r.getMessage()]
    assert said == [
        f"data: jsonl {math500!r}: 64 of 500 problems loaded (data.limit=64: the first 64 in "
        "file order)"
    ]
