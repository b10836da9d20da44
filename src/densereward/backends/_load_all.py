"""Import every built-in backend module so their ``@register_backend`` decorators run.

Backend modules import their heavy dependencies (torch, vllm, httpx) lazily, inside
the class, so importing them here is cheap.
"""

from __future__ import annotations

from . import hf, openai_http, sampled, vllm_offline  # noqa: F401
