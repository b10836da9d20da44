"""``verifier.backend_options.dtype: auto``: bf16 where the device multiplies bf16 fast, fp32 elsewhere.

The decision (:func:`densereward.backends.dtype.choose_dtype`) is pure; the probe
(:func:`bf16_supported`) reads PyTorch's AMX check on CPU, cross-checked here against the
kernel's own CPU flags; the transformers backend loads the model in the resolved dtype.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from densereward.backends import dtype as dt
from densereward.backends.hf import TransformersBackend
from densereward.config import VerifierConfig
from densereward.errors import ConfigError


def _cpu_flags() -> set[str] | None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return None


def test_auto_resolves_to_a_real_dtype():
    for device in ("cpu", torch.device("cpu"), "cuda", "cuda:1"):
        name = dt.resolve_dtype("auto", device)
        assert name in ("bfloat16", "float32")
        assert isinstance(getattr(torch, name), torch.dtype)
    assert dt.resolve_dtype("auto", "cpu") == (
        "bfloat16" if dt.bf16_supported("cpu") else "float32"
    )
    if not torch.cuda.is_available():
        assert dt.resolve_dtype("auto", "cuda") == "float32"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/cpuinfo")
def test_cpu_probe_agrees_with_the_kernels_cpu_flags():
    flags = _cpu_flags()
    if flags is None:
        pytest.skip("no CPU flags in /proc/cpuinfo")
    # AMX tiles with bf16 (AVX-512 BF16 alone is slower than fp32: backends/dtype.py)
    native = {"amx_tile", "amx_bf16"} <= flags
    assert dt.bf16_supported("cpu") is native


@pytest.mark.parametrize("amx, expected", [(False, "float32"), (True, "bfloat16")])
def test_auto_follows_the_capability_probe(monkeypatch, amx, expected):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    assert dt.bf16_supported("cpu") is amx
    assert dt.resolve_dtype("auto", "cpu") == expected


def test_explicit_dtypes_pass_through_and_unknown_names_fail():
    for name in dt.DTYPES:
        assert dt.choose_dtype(name, bf16=False) == name
        assert dt.resolve_dtype(name, "cpu") == name
    assert dt.choose_dtype("auto", bf16=True) == "bfloat16"
    assert dt.choose_dtype("auto", bf16=False) == "float32"
    with pytest.raises(ValueError, match="float64"):
        dt.choose_dtype("float64", bf16=True)
    assert dt.bf16_supported("mps") is False


@pytest.mark.parametrize("supported, expected", [(False, torch.float32), (True, torch.bfloat16)])
def test_backend_loads_the_auto_dtype(monkeypatch, default_model_dir, supported, expected):
    monkeypatch.setattr(dt, "bf16_supported", lambda device_type: supported)
    b = TransformersBackend(
        VerifierConfig(model=str(default_model_dir), backend_options={"device": "cpu"})
    )
    try:
        assert b.dtype == expected
        assert {p.dtype for p in b.model.parameters()} == {expected}
    finally:
        b.close()


def test_an_unknown_dtype_is_refused_at_config_load(default_model_dir):
    """Since issue 28 item 9 the config refuses it, naming the field, before any backend loads."""
    with pytest.raises(
        ConfigError, match=r"verifier\.backend_options\.dtype: 'float64' \(did you mean 'float16'"
    ):
        VerifierConfig(model=str(default_model_dir), backend_options={"dtype": "float64"})


@pytest.mark.parametrize(
    "device, use_cpu, native",
    [("cpu", True, False), ("cpu", True, True), ("cuda", False, True), ("cuda", False, False)],
)
def test_the_policy_and_the_verifier_resolve_auto_by_one_rule(monkeypatch, device, use_cpu, native):
    """Issue 42: ``model.dtype: auto`` (the policy) resolved as ``verifier.backend_options.dtype:
    auto`` does, on the training device: bf16 where it is native (a CPU with AMX, a GPU with
    native bf16), else fp32; and the bf16 autocast decision agrees with it."""
    from densereward.trainers import grpo_config

    monkeypatch.setattr(torch.cuda, "is_available", lambda: device == "cuda")
    monkeypatch.setattr(dt, "bf16_supported", lambda device_type: native and device_type == device)
    training = {"use_cpu": True} if use_cpu else {}
    expected = dt.resolve_dtype("auto", device)
    assert expected == ("bfloat16" if native else "float32")
    assert grpo_config.policy_dtype("auto", training) == expected
    assert grpo_config.policy_dtype("float16", training) == "float16"  # a named dtype is kept


@pytest.mark.parametrize("bad", ["bf16", "float64", "fp32", "Auto"])
def test_one_dtype_validator_for_the_policy_the_verifier_options_and_the_resolver(bad):
    """Issue 42: ``model.dtype``, ``verifier.backend_options.dtype`` (every local backend) and
    :func:`choose_dtype` refuse a name by one check (:func:`densereward.backend_options.check_dtype`),
    so the same name gets the same message, each naming its own field."""
    from densereward.backend_options import TransformersOptions, VLLMOptions, check_dtype
    from densereward.trainers.grpo_config import ModelConfig

    refusals = {
        "verifier.backend_options.dtype": lambda: TransformersOptions(dtype=bad),
        "verifier.backend_options.dtype ": lambda: VLLMOptions(dtype=bad),
        "model.dtype": lambda: ModelConfig(dtype=bad),
        "dtype": lambda: dt.choose_dtype(bad, bf16=True),
        "x.dtype": lambda: check_dtype(bad, "x.dtype"),
    }
    messages = set()
    for field, refuse in refusals.items():
        with pytest.raises(ConfigError) as err:
            refuse()
        message = str(err.value)
        assert message.startswith(f"{field.strip()}: {bad!r}"), message
        messages.add(message.removeprefix(field.strip()))
    assert len(messages) == 1, messages
    assert messages.pop().endswith("; use auto | float32 | bfloat16 | float16")
    assert check_dtype("auto") == "auto" and check_dtype("float16", "model.dtype") == "float16"
