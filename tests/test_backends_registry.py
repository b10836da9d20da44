"""The backend registry: a declarative table of entry points, imported on first use.

Names are resolved the way Gymnasium resolves ``entry_point="module:Name"``; a third party
registers its own backend once and may not overwrite a taken name.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings

import pytest
from servers import MisbehavingServer, scripted_verifier

from densereward.backends import (
    available_backends,
    backend_option_types,
    check_backend_name,
    get_backend_class,
    register_backend,
)
from densereward.backends import registry as R
from densereward.backends.openai_http import OpenAIBackend
from densereward.config import VerifierConfig, from_dict, load_yaml
from densereward.errors import BackendUnavailableError, ConfigError, RegistryError
from densereward.verifier import Verifier

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
    # the leaves only (the protocol, the table, the dtype names VerifierConfig validates):
    # no backend implementation, so no torch / httpx / vLLM import
    leaves = [
        "densereward.backends.base",
        "densereward.backends.dtype",
        "densereward.backends.registry",
    ]
    assert set(ast.literal_eval(out[1])) <= set(leaves), out[1]


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


# ------------------------------------------------ VerifierConfig: names and options from YAML


def _verifier_config(tmp_path, yaml_text: str):
    """``VerifierConfig`` from the ``verifier:`` section of a YAML file, as the commands load it."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml_text)
    return from_dict(VerifierConfig, load_yaml(path)["verifier"], prefix="verifier.")


def _chat_bodies(srv: MisbehavingServer) -> list[dict]:
    return [r["body"] for r in srv.chat_requests()]


def test_backend_options_from_yaml_reach_the_http_backend(tmp_path):
    with MisbehavingServer() as srv:
        cfg = _verifier_config(
            tmp_path,
            f"verifier:\n  backend: openai\n  base_url: {srv.base_url}\n"
            "  backend_options: {top_logprobs: '5'}\n",
        )
        assert cfg.backend_options == {"top_logprobs": 5}  # coerced to the annotation (int)
        with scripted_verifier(srv.base_url, backend_options=cfg.backend_options) as v:
            assert v.score(problem="2+2", response="4").value is not None
        with scripted_verifier(srv.base_url) as v:
            v.score(problem="2+2", response="4")
        assert [b["top_logprobs"] for b in _chat_bodies(srv)] == [5, 20]


def test_restrict_to_candidates_from_yaml(tmp_path):
    with MisbehavingServer() as srv:
        cfg = _verifier_config(
            tmp_path,
            f"verifier:\n  backend: openai\n  base_url: {srv.base_url}\n"
            "  backend_options:\n    restrict_to_candidates: true\n    top_logprobs: 40\n",
        )
        with scripted_verifier(srv.base_url, backend_options=cfg.backend_options) as v:
            assert v.backend.restrict_to_candidates is True and v.backend.top_logprobs == 40
            r = v.score(problem="2+2", response="4")
        # the scripted server has no /tokenize, so the restricted read cannot be asked for:
        # the engine abstains (counted) and no chat request is sent
        assert r.value is None and "backend error" in r.reason
        assert v.stats.n_failures == 1 and _chat_bodies(srv) == []


@pytest.mark.parametrize(
    "options, match",
    [
        (
            "{top_logprob: 5}",
            r"'top_logprob' \(did you mean 'top_logprobs'\?\); it takes .*restrict_to_candidates",
        ),
        (
            "{top_logprobs: many}",
            r"verifier.backend_options.top_logprobs: expected int, got 'many'",
        ),
        ("[top_logprobs]", "must be a mapping of option names to values"),
    ],
)
def test_bad_backend_options_are_config_errors(tmp_path, options, match):
    with pytest.raises(ConfigError, match=match):
        _verifier_config(
            tmp_path,
            f"verifier:\n  backend: openai\n  base_url: http://x/v1\n  backend_options: {options}\n",
        )


def test_options_of_each_backend_are_its_own(tmp_path):
    with pytest.raises(
        ConfigError, match="unknown verifier.backend_options for backend 'transformers'"
    ):
        VerifierConfig(backend_options={"top_logprobs": 5})
    assert VerifierConfig(backend_options={"share_prefix": "false"}).backend_options == {
        "share_prefix": False
    }
    # the sampled backend takes its own options and, through **kwargs, the HTTP backend's
    cfg = VerifierConfig(
        backend="sampled",
        base_url="http://x/v1",
        backend_options={"use_n": False, "top_logprobs": 3},
    )
    assert cfg.backend_options == {"use_n": False, "top_logprobs": 3}
    # vLLM passes names it does not know on to vllm.LLM
    cfg = VerifierConfig(backend="vllm", backend_options={"max_model_len": "2048", "swap_space": 1})
    assert cfg.backend_options == {"max_model_len": 2048, "swap_space": 1}


def test_backend_name_is_checked_against_the_registry(tmp_path, scratch_names):
    with pytest.raises(
        ConfigError, match=r"unknown verifier backend 'opneai'.*Did you mean 'openai'"
    ):
        _verifier_config(tmp_path, "verifier:\n  backend: opneai\n")
    with pytest.raises(ConfigError, match="unknown verifier backend 'loopback-http'"):
        VerifierConfig(backend="loopback-http")
    scratch_names.append("loopback-http")
    register_backend("loopback-http", "densereward.backends.openai_http:OpenAIBackend")
    with MisbehavingServer() as srv:
        cfg = _verifier_config(
            tmp_path,
            f"verifier:\n  backend: loopback-http\n  base_url: {srv.base_url}\n"
            "  backend_options: {top_logprobs: 3}\n",
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*cannot tokenize.*")
            v = Verifier(cfg)
        with v:
            assert isinstance(v.backend, OpenAIBackend)
            assert v.score(problem="2+2", response="4").value is not None
        assert [b["top_logprobs"] for b in _chat_bodies(srv)] == [3]
