"""The backend registry: a declarative table of entry points, imported on first use.

Names are resolved the way Gymnasium resolves ``entry_point="module:Name"``; a third party
registers its own backend once and may not overwrite a taken name.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from densereward.backends import (
    available_backends,
    backend_option_types,
    check_backend_name,
    get_backend_class,
    register_backend,
)
from densereward.backends import registry as R
from densereward.backends.openai_http import OpenAIBackend
from densereward.errors import BackendUnavailableError, ConfigError, RegistryError

BUILT_IN = ["openai", "sampled", "transformers", "vllm"]


@pytest.fixture
def scratch_names():
    """Names a test registers, removed again afterwards (the registry is process-wide)."""
    names: list[str] = []
    yield names
    for n in names:
        R._REGISTRY.pop(n, None)


def test_listing_and_validating_names_imports_no_backend_module():
    code = (
        "import sys\n"
        "from densereward.backends import available_backends, check_backend_name\n"
        "print(available_backends())\n"
        "check_backend_name('vllm')\n"
        "print(sorted(m for m in sys.modules if m.startswith('densereward.backends.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == str(BUILT_IN)
    assert out[1] == str(["densereward.backends.base", "densereward.backends.registry"])


def test_unknown_name_is_a_config_error_with_did_you_mean():
    with pytest.raises(
        ConfigError, match=r"unknown verifier backend 'transfomers'.*Did you mean 'transformers'"
    ):
        check_backend_name("transfomers")
    with pytest.raises(ConfigError, match="available: \\['openai'"):
        get_backend_class("zzz")


def test_register_refuses_to_overwrite_a_taken_name(scratch_names):
    class Mine:
        pass

    with pytest.raises(
        RegistryError,
        match=r"'openai' is already registered \(densereward\.backends\.openai_http:OpenAIBackend\)",
    ):
        register_backend("openai", Mine)
    assert get_backend_class("openai") is OpenAIBackend
    # the same entry point again is not an overwrite
    register_backend("openai", "densereward.backends.openai_http:OpenAIBackend")

    scratch_names.append("mine")
    assert register_backend("mine")(Mine) is Mine  # decorator form
    register_backend("mine", Mine)  # same class: no-op
    with pytest.raises(RegistryError, match="'mine' is already registered"):
        register_backend("mine", "somewhere.else:Other")
    assert get_backend_class("mine") is Mine
    assert "mine" in available_backends()


def test_string_entry_point_is_imported_on_first_use(scratch_names):
    scratch_names += ["http-again", "broken"]
    register_backend("http-again", "densereward.backends.openai_http:OpenAIBackend")
    assert get_backend_class("http-again") is OpenAIBackend
    register_backend("broken", "densereward.no_such_module:Backend")  # not imported yet
    with pytest.raises(
        BackendUnavailableError, match="cannot load 'densereward.no_such_module:Backend'"
    ):
        get_backend_class("broken")


@pytest.mark.parametrize(
    "name, entry, match",
    [
        ("", "a.b:C", "non-empty string"),
        ("x", "a.b.C", "must look like 'package.module:ClassName'"),
        ("x", 3, "a 'module:ClassName' string or a class"),
    ],
)
def test_malformed_registrations_are_refused(name, entry, match, scratch_names):
    scratch_names.append(name)
    with pytest.raises(RegistryError, match=match):
        register_backend(name, entry)
    assert name not in available_backends()


def test_option_types_follow_the_constructors():
    http, open_http = backend_option_types("openai")
    assert not open_http
    assert http["top_logprobs"] is int and http["restrict_to_candidates"] is bool
    sampled, open_sampled = backend_option_types("sampled")
    assert not open_sampled  # its **kwargs reach OpenAIBackend.__init__, which has none
    assert {"max_score_tokens", "use_n", "top_logprobs", "retry_max_s"} <= set(sampled)
    local, open_local = backend_option_types("transformers")
    assert set(local) >= {"share_prefix"} and not open_local
    _, open_vllm = backend_option_types("vllm")
    assert open_vllm  # **engine_kwargs are passed to vllm.LLM
