"""Shared fixtures: the read-only data sets beside the checkout, the embedded default model and
the scripted OpenAI-compatible loopback server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """``../shared/data`` (or ``$DENSEREWARD_DATA_DIR``): MATH-500, GSM8K, ... as JSONL."""
    d = Path(os.environ.get("DENSEREWARD_DATA_DIR", REPO.parent / "shared" / "data"))
    if not d.is_dir():
        pytest.fail(f"test data not found at {d}; set DENSEREWARD_DATA_DIR")
    return d


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """The converted embedded SmolLM2-135M-Instruct directory (converted once per machine)."""
    from densereward.backends.default_model import ensure_default_model

    return ensure_default_model()


@pytest.fixture
def server():
    """A fresh :class:`servers.MisbehavingServer` on a loopback port, stopped after the test."""
    from servers import MisbehavingServer

    with MisbehavingServer() as srv:
        yield srv
