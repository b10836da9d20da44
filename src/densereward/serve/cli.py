"""``densereward serve --config FILE [section.field=value ...]``: build and run the reward server.

The YAML holds the ``reward:`` and ``verifier:`` sections of ``train grpo`` (a GRPO config
file works as it is: its other sections are not used) and an optional ``serve:`` section
(:class:`~densereward.serve.app.ServeConfig`).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from typing import Any

from ..config import (
    VerifierConfig,
    add_override_arguments,
    apply_overrides,
    from_dict,
    load_yaml,
    overrides_from,
)
from ..errors import ConfigError
from .app import RewardService, ServeConfig, make_app

__all__ = ["add_arguments", "main", "build_service", "build_app"]

logger = logging.getLogger(__name__)

_GRPO_ONLY = ("model", "data", "training", "wandb", "heldout")


def build_service(config: dict[str, Any]) -> tuple[RewardService, Callable[[], None]]:
    """The reward service of a config dict (``reward``, ``verifier``, ``serve`` sections) and
    the function that closes it (the verifier).

    Raises:
        ConfigError: for unknown sections or keys, invalid values, and ``reward.type=group``
            (a group reward needs whole GRPO groups in one call; OpenRLHF and slime send one
            sample per request).
    """
    from ..rewards import RewardConfig, RewardQualityTracker, build_reward_funcs
    from ..rewards._common import check_prompt_settings
    from ..verifier import Verifier

    unknown = sorted(set(config) - {"reward", "verifier", "serve", *_GRPO_ONLY})
    if unknown:
        raise ConfigError(f"unknown section(s) {unknown}; serve reads reward, verifier and serve")
    reward = from_dict(RewardConfig, config.get("reward"), prefix="reward.")
    verifier_config = from_dict(VerifierConfig, config.get("verifier"), prefix="verifier.")
    serve = from_dict(ServeConfig, config.get("serve"), prefix="serve.")
    check_prompt_settings(reward, verifier_config)
    if reward.type == "group":
        raise ConfigError(
            "reward.type=group needs whole GRPO groups in one call; the reward server scores "
            "each sample on its own (OpenRLHF and slime send one per request): use dense, gated, "
            "mixed or sparse"
        )
    verifier = Verifier(verifier_config)
    try:
        tracker = RewardQualityTracker() if reward.track else None
        funcs, weights = build_reward_funcs(reward, verifier, tracker=tracker)
    except BaseException:
        verifier.close()
        raise

    def close() -> None:
        for f in funcs:
            checker = getattr(f, "checker", None)
            if checker is not None and hasattr(checker, "close"):
                checker.close()
        verifier.close()

    return RewardService(funcs, weights, verifier, serve), close


def build_app(config: dict[str, Any]):
    """``(app, serve_config)``: the Starlette app of a config dict, closing its verifier at shutdown."""
    service, close = build_service(config)
    return make_app(service, on_close=close), service.config


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, help="YAML with reward:, verifier: (and serve:)")
    p.add_argument("--host", default=None, help="overrides serve.host")
    p.add_argument("--port", type=int, default=None, help="overrides serve.port")
    add_override_arguments(p, "verifier.backend=openai verifier.backend_options.base_url=http://127.0.0.1:8000/v1")


def main(args: argparse.Namespace) -> int:
    """Run the server until SIGINT / SIGTERM (then requests in flight finish). Returns 0."""
    import signal

    import uvicorn

    config = load_yaml(args.config) if args.config else {}
    apply_overrides(config, overrides_from(args))
    for key in ("host", "port"):
        if getattr(args, key, None) is not None:
            config.setdefault("serve", {})[key] = getattr(args, key)
    app, serve = build_app(config)
    print(f"[serve] reward server on http://{serve.host}:{serve.port} "
          "(POST /get_reward /slime /score /rank; GET /health /metrics)", flush=True)  # fmt: skip
    # uvicorn finishes the requests in flight, then re-raises the signal it caught: with this
    # handler in place the re-raised SIGTERM ends main() normally (exit status 0), not the process.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    uvicorn.run(
        app,
        host=serve.host,
        port=serve.port,
        timeout_graceful_shutdown=serve.shutdown_timeout_s,
        log_level="warning",
    )
    return 0
