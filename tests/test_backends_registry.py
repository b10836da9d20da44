"""The backend registry: a declarative table of entry points, imported on first use.

Names are resolved the way Gymnasium resolves ``entry_point="module:Name"``; a third party
registers its own backend once and may not overwrite a taken name. Each backend owns a frozen
options dataclass, validated when the config loads (issue 29 item 2).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings

import pytest
from servers import MisbehavingServer, scripted_verifier

from densereward.backend_options import (
    BACKEND_OPTIONS,
    BACKENDS,
    OpenAIOptions,
    SampledOptions,
    TransformersOptions,
    VLLMOptions,
)
from densereward.backends import (
    available_backends,
    backend_options_class,
    check_backend_name,
    get_backend_class,
    register_backend,
)
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
        BACKENDS._entries.pop(n, None)
        BACKEND_OPTIONS._entries.pop(n, None)


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
    # the leaves only (the protocol and the thin registry functions; the table and the
    # options live in densereward.backend_options): no backend implementation, so no
    # torch / httpx / vLLM import
    implementations = {"hf", "vllm_offline", "openai_http", "sampled", "replicas", "transport"}
    loaded = {m.rsplit(".", 1)[-1] for m in ast.literal_eval(out[1])}
    assert "registry" in loaded and not loaded & implementations, out[1]


def test_unknown_name_is_a_config_error_with_did_you_mean():
    with pytest.raises(
        ConfigError, match=r"unknown verifier backend 'transfomers'.*Did you mean 'transformers'"
    ):
        check_backend_name("transfomers")
    with pytest.raises(ConfigError, match="available: \\['openai'"):
        get_backend_class("zzz")


def test_register_refuses_to_overwrite_a_taken_name(scratch_names):
    from densereward.backends.base import LocalAsyncMixin

    class Mine(LocalAsyncMixin):  # a backend: the registry refuses anything else (issue 42)
        tokenize = next_token_logprobs = generate = close = print

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
        ("x", "a.b.C", "must look like 'package.module:attr'"),
        ("x", 3, "a 'module:ClassName' string or a class"),
    ],
)
def test_malformed_registrations_are_refused(name, entry, match, scratch_names):
    scratch_names.append(name)
    with pytest.raises(RegistryError, match=match):
        register_backend(name, entry)
    assert name not in available_backends()


def test_each_backend_owns_a_frozen_options_dataclass_found_without_importing_it():
    assert backend_options_class("transformers") is TransformersOptions
    assert backend_options_class("vllm") is VLLMOptions
    assert backend_options_class("openai") is OpenAIOptions
    assert backend_options_class("sampled") is SampledOptions  # and every OpenAIOptions field
    assert issubclass(SampledOptions, OpenAIOptions)
    code = (
        "import sys\n"
        "from densereward.config import VerifierConfig\n"
        "c = VerifierConfig(backend='vllm', backend_options={'dtype': 'bfloat16'})\n"
        "heavy = ('torch', 'vllm', 'httpx', 'transformers')\n"
        "impl = ('hf', 'vllm_offline', 'openai_http', 'sampled', 'replicas')\n"
        "print(type(c.options).__name__, sorted(m for m in sys.modules if m.split('.')[0] in "
        "heavy or m.removeprefix('densereward.backends.') in impl))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "VLLMOptions []", out.stdout


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
            f"verifier:\n  backend: openai\n"
            f"  backend_options: {{base_url: '{srv.base_url}', top_logprobs: '5'}}\n",
        )
        # coerced to the annotation (int)
        assert cfg.backend_options == {"base_url": srv.base_url, "top_logprobs": 5}
        with scripted_verifier(srv.base_url, backend_options={"top_logprobs": 5}) as v:
            assert v.score(problem="2+2", response="4").value is not None
        with scripted_verifier(srv.base_url) as v:
            v.score(problem="2+2", response="4")
        assert [b["top_logprobs"] for b in _chat_bodies(srv)] == [5, 20]


def test_restrict_to_candidates_from_yaml(tmp_path):
    with MisbehavingServer() as srv:
        cfg = _verifier_config(
            tmp_path,
            "verifier:\n  backend: openai\n  backend_options:\n"
            f"    base_url: {srv.base_url}\n    restrict_to_candidates: true\n    top_logprobs: 40\n",
        )
        with scripted_verifier(srv.base_url, backend_options=dict(cfg.backend_options)) as v:
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
            "{base_url: 'http://x/v1', top_logprob: 5}",
            r"'verifier.backend_options.top_logprob' \(did you mean "
            r"'verifier.backend_options.top_logprobs'\?\); it takes .*restrict_to_candidates",
        ),
        (
            "{base_url: 'http://x/v1', top_logprobs: many}",
            r"verifier.backend_options.top_logprobs: expected int, got 'many'",
        ),
        ("[top_logprobs]", "must be a mapping of option names to values"),
        ("{top_logprobs: 5}", r"backend_options\.base_url is required"),
    ],
)
def test_bad_backend_options_are_config_errors(tmp_path, options, match):
    with pytest.raises(ConfigError, match=match):
        _verifier_config(
            tmp_path,
            f"verifier:\n  backend: openai\n  backend_options: {options}\n",
        )


def test_options_of_each_backend_are_its_own(tmp_path):
    with pytest.raises(
        ConfigError, match="unknown verifier.backend_options for backend 'transformers'"
    ):
        VerifierConfig(backend_options={"top_logprobs": 5})
    cfg = VerifierConfig(backend_options={"share_prefix": "false"})
    assert cfg.backend_options == {"share_prefix": False} and cfg.options.share_prefix is False
    # the sampled backend takes its own options and every option of the HTTP backend
    cfg = VerifierConfig(
        backend="sampled",
        backend_options={"base_url": "http://x/v1", "use_n": False, "top_logprobs": 3},
    )
    assert (cfg.options.use_n, cfg.options.top_logprobs, cfg.options.n_samples) == (False, 3, 16)
    # vLLM's own engine arguments go under engine_kwargs; a bare unknown name is refused
    cfg = VerifierConfig(
        backend="vllm",
        backend_options={"max_model_len": "2048", "engine_kwargs": {"swap_space": 1}},
    )
    assert cfg.options.max_model_len == 2048 and cfg.options.engine_kwargs == {"swap_space": 1}
    with pytest.raises(ConfigError, match="'verifier.backend_options.swap_space'.*engine_kwargs"):
        VerifierConfig(backend="vllm", backend_options={"swap_space": 1})


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
            "verifier:\n  backend: loopback-http\n"
            f"  backend_options: {{base_url: '{srv.base_url}', top_logprobs: 3}}\n",
        )
        # no options registered for it: the backend class's options_class is used
        assert isinstance(cfg.options, OpenAIOptions)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*cannot tokenize.*")
            v = Verifier(cfg)
        with v:
            assert isinstance(v.backend, OpenAIBackend)
            assert v.score(problem="2+2", response="4").value is not None
        assert [b["top_logprobs"] for b in _chat_bodies(srv)] == [3]
