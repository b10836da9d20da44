"""What a backend can do is declared on the protocol, with defaults (issue 42 item 1, the backend part).

``VerifierBackend`` names each capability (``supports_images``, ``text_reads``,
``thinking_template``, ``dtype``, ``loads_model``, ``calibration_hint``, ``thread_safe``,
``boundary_logprobs``); :class:`~densereward.backends.base.BackendBase` holds the defaults, the
built-in backends inherit it, and the engine reads them through one function
(:func:`~densereward.backends.base.capabilities`), not by probing. The backend registry refuses
something that is not a backend when it is registered, and the factory picks the vision class.
"""

from __future__ import annotations

import inspect
import json
import math

import pytest

from densereward.backend_options import BACKEND_METHODS, BACKENDS, loads_model, options_class
from densereward.backends import register_backend
from densereward.backends.base import (
    BackendBase,
    Capabilities,
    LocalAsyncMixin,
    TokenLogprobs,
    VerifierBackend,
    capabilities,
)
from densereward.config import VerifierConfig
from densereward.errors import ConfigError
from densereward.verifier import Verifier

DEFAULTS = Capabilities(
    supports_images=False,
    text_reads=False,
    thinking_template=False,
    dtype=None,
    loads_model=False,
    calibration_hint="",
    thread_safe=False,
    boundary_logprobs=None,
)


class Bare:
    """A plugin backend that declares no capability and inherits nothing of ours."""

    name, model_id = "bare", "bare-v1"

    def __init__(self, config=None):
        from densereward.backends.base import BackendUsage

        self.usage = BackendUsage()

    def tokenize(self, text):
        return [ord(c) for c in text]

    def next_token_logprobs(self, prompts, candidates):
        return [TokenLogprobs({"E": math.log(0.9)}) for _ in prompts]

    async def anext_token_logprobs(self, prompts, candidates):
        return self.next_token_logprobs(prompts, candidates)

    def generate(self, prompts, **kwargs):
        return ["" for _ in prompts]

    async def agenerate(self, prompts, **kwargs):
        return self.generate(prompts, **kwargs)

    def close(self):
        pass


class Mixed(LocalAsyncMixin):
    """The docs' shape: LocalAsyncMixin (a BackendBase), no capability declared."""

    name, model_id = "mixed", "mixed-v1"
    tokenize, next_token_logprobs, generate, close = (
        Bare.tokenize,
        Bare.next_token_logprobs,
        Bare.generate,
        Bare.close,
    )


@pytest.fixture
def scratch_registry(monkeypatch):
    """The backend registry's table as it was before the test (it is process-wide)."""
    monkeypatch.setattr(BACKENDS, "_entries", dict(BACKENDS._entries))


def test_a_backend_that_declares_nothing_gets_the_defaults():
    assert capabilities(Bare()) == DEFAULTS
    assert capabilities(Mixed()) == DEFAULTS
    m = Mixed()
    assert (m.text_reads, m.supports_images, m.boundary_logprobs, m.loads_model) == (
        False,
        False,
        None,
        False,
    )
    cfg = VerifierConfig(granularity=5, calibrate=False)
    for backend in (Bare(), Mixed()):
        with Verifier(cfg, backend=backend) as v:
            assert v.capabilities == DEFAULTS and not v.read_plan.text_level
            assert v.score(problem="2+2", response="4").value == pytest.approx(1.0)


def test_the_protocol_declares_each_capability_and_the_base_defaults_it():
    declared = set(VerifierBackend.__annotations__) - {"name", "model_id", "usage"}
    fields = {f for f in Capabilities.__dataclass_fields__}
    assert declared == fields == set(BackendBase.__annotations__)
    assert capabilities(BackendBase()) == DEFAULTS
    methods = {n for n, f in vars(VerifierBackend).items() if inspect.isfunction(f)} - {
        "__init__",
        "__subclasshook__",
    }
    assert methods == set(BACKEND_METHODS)  # the registry's check and the protocol agree


def test_the_builtin_backends_inherit_the_base_and_declare_what_they_do():
    from densereward.backends.hf import TransformersBackend
    from densereward.backends.hf_vision import VisionTransformersBackend
    from densereward.backends.openai_http import OpenAIBackend
    from densereward.backends.sampled import SampledBackend
    from densereward.backends.vllm_offline import VLLMBackend

    for cls in (TransformersBackend, VisionTransformersBackend, VLLMBackend, OpenAIBackend):
        assert issubclass(cls, BackendBase), cls
    assert SampledBackend.text_reads and not OpenAIBackend.text_reads
    assert OpenAIBackend.supports_images and VisionTransformersBackend.supports_images
    assert (
        callable(TransformersBackend.boundary_logprobs) and OpenAIBackend.boundary_logprobs is None
    )
    for name in BACKENDS.names():  # the dry run reads the options; the backend agrees
        assert BACKENDS.load(name).loads_model is loads_model(name), name
        assert getattr(options_class(name), "loads_model", None) is not None, name


@pytest.mark.parametrize(
    "thing, match",
    [
        (lambda config: Bare(config), "not a backend: register a 'module:ClassName' string"),
        (Bare(), "not a backend: register a 'module:ClassName' string or a class"),
        (
            type("Half", (), {"tokenize": lambda s, t: []}),
            "lacks next_token_logprobs, anext_token_logprobs, generate, agenerate, close",
        ),
        (
            type(
                "NoAsync",
                (),
                {
                    k: Bare.__dict__[k]
                    for k in ("tokenize", "next_token_logprobs", "generate", "close")
                },
            ),
            "lacks anext_token_logprobs, agenerate .*LocalAsyncMixin",
        ),
    ],
)
def test_registering_what_is_not_a_backend_fails_at_registration(scratch_registry, thing, match):
    with pytest.raises(ConfigError, match=match):
        register_backend("not_a_backend", thing)
    assert "not_a_backend" not in BACKENDS  # refused, not half-registered
    assert register_backend("bare_ok", Bare) is Bare


def test_a_named_entry_that_is_not_a_backend_fails_when_the_config_loads(scratch_registry):
    """A ``"module:attr"`` entry is imported lazily; it is checked when first imported: the
    config's option validation, before any backend is built or read."""
    register_backend("json_dumps", "json:dumps")  # lazy: nothing imported yet
    with pytest.raises(ConfigError, match=r"'json_dumps'.*is not a backend"):
        VerifierConfig(backend="json_dumps")


def test_the_factory_chooses_the_vision_class(tmp_path):
    """``create_backend`` builds ``transformers`` on an image-text-to-text model as
    hf_vision's subclass (no ``__new__`` switch); built directly, the text class refuses it."""
    from densereward.backends.hf import TransformersBackend
    from densereward.backends.hf_vision import VisionTransformersBackend
    from densereward.backends.registry import backend_class_for

    vl = tmp_path / "vl"
    vl.mkdir()
    (vl / "config.json").write_text(json.dumps({"vision_config": {}, "model_type": "qwen2_vl"}))
    text = tmp_path / "text"
    text.mkdir()
    (text / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert backend_class_for(VerifierConfig(model=str(vl))) is VisionTransformersBackend
    assert backend_class_for(VerifierConfig(model=str(text))) is TransformersBackend
    assert (
        backend_class_for(VerifierConfig(model=str(vl), backend="vllm")).__name__ == "VLLMBackend"
    )
    assert "__new__" not in vars(TransformersBackend)
    with pytest.raises(ConfigError, match="image-text-to-text model: build it with"):
        TransformersBackend(VerifierConfig(model=str(vl)))
