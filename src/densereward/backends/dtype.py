"""What ``dtype: auto`` (a local backend's option) stands for on a device: bf16 where it is fast, else fp32.

bf16 halves the weights' and activations' memory traffic, but it only pays where the
hardware multiplies bf16 matrices faster than fp32 ones: GPUs with native bf16
(``torch.cuda.is_bf16_supported()``: Ampere on) and CPUs with AMX tiles (4th-gen Xeon on;
PyTorch's oneDNN kernels use them: 1,024 bf16 vs 64 fp32 operations per cycle and core, per
the PyTorch AMX recipe, https://pytorch.org/tutorials/recipes/amx.html). AVX-512 BF16 alone
is *not* enough: on the 2-core AVX-512 BF16 CPU (no AMX) this project is developed on, with
torch 2.13, a bf16 matmul of the embedded model's shapes runs at ~85 GFLOP/s against ~155 in
fp32 (MKL), and the verifier scores 0.65x as fast in bf16 as in fp32 (docs/measurements.md,
"Verifier cost"). So ``auto`` keeps fp32 there, and everywhere else.

torch is imported inside the functions: importing this module stays cheap.
"""

from __future__ import annotations

from typing import Any

from ..backend_options import DTYPES, check_dtype

__all__ = ["DTYPES", "bf16_supported", "choose_dtype", "resolve_dtype"]


def bf16_supported(device_type: str) -> bool:
    """Whether ``device_type`` multiplies bf16 matrices natively, faster than fp32.

    ``cuda``: :func:`torch.cuda.is_bf16_supported` (compute capability >= 8.0). ``cpu``: AMX
    tiles (``torch.cpu._is_amx_tile_supported()``, the check PyTorch's own CPU code uses;
    a torch without it counts as no support); AVX-512 BF16 without AMX counts as no support
    (slower than fp32, see the module docstring). Anything else: ``False``.
    """
    import torch

    if device_type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if device_type == "cpu":
        probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
        return bool(probe()) if probe is not None else False
    return False


def choose_dtype(requested: str, *, bf16: bool) -> str:
    """The dtype name ``requested`` stands for (a pure decision, no probing).

    Args:
        requested: ``"auto"`` or one of :data:`DTYPES`.
        bf16: whether the device runs bf16 natively (:func:`bf16_supported`).

    Returns:
        ``requested`` when it names a dtype; for ``auto``: ``"bfloat16"`` if ``bf16`` else
        ``"float32"``.

    Raises:
        ConfigError: for any other name (:func:`~densereward.backend_options.check_dtype`).

    >>> choose_dtype("auto", bf16=True), choose_dtype("auto", bf16=False)
    ('bfloat16', 'float32')
    """
    if check_dtype(requested, "dtype") == "auto":
        return "bfloat16" if bf16 else "float32"
    return requested


def resolve_dtype(requested: str, device: Any) -> str:
    """:func:`choose_dtype` with the support of ``device`` (a ``torch.device`` or a name) probed.

    Raises:
        ConfigError: for an unknown dtype name.
    """
    device_type = getattr(device, "type", None) or str(device).split(":")[0]
    if requested != "auto":
        return choose_dtype(requested, bf16=False)
    return choose_dtype(requested, bf16=bf16_supported(device_type))
