"""``densereward serve --config FILE [section.field=value ...]``: build and run the reward server.

The YAML holds the ``reward:`` and ``verifier:`` sections of ``train grpo`` (a GRPO config
file works as it is: its other sections are not used) and an optional ``serve:`` section
(:class:`~densereward.serve.app.ServeConfig`). ``--dry-run`` checks them and contacts a served
verifier without starting anything (:func:`dry_run`).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from ..config import VerifierConfig
from ..config_files import (
    add_override_arguments,
    apply_overrides,
    from_dict,
    load_yaml,
    overrides_from,
)
from ..errors import ConfigError
from ..sections import COMMAND_SECTIONS, other_command
from .app import RewardService, ServeConfig, make_app

__all__ = ["add_arguments", "main", "build_service", "build_app", "dry_run"]

logger = logging.getLogger(__name__)

_GRPO_ONLY = ("model", "data", "training", "wandb", "heldout")

CLIENT_LENGTH_SETTINGS = (
    "the trainer's response length limit (OpenRLHF --generate_max_len, slime "
    "--rollout-max-response-len, verl data.max_response_length)"
)
"""What bounds a served completion's length: the client's setting (the format warning names it)."""


def build_service(config: dict[str, Any]) -> tuple[RewardService, Callable[[], None]]:
    """The reward service of a config dict (``reward``, ``verifier``, ``serve`` sections) and
    the function that closes it (the verifier).

    Raises:
        ConfigError: for unknown sections or keys, invalid values, and ``reward.type=group``
            (a group reward needs whole GRPO groups in one call; OpenRLHF and slime send one
            sample per request).
    """
    from ..rewards import MathChecker, RewardQualityTracker, build_reward_funcs
    from ..verifier import Verifier

    reward, verifier_config, serve = _sections(config)
    verifier = Verifier(verifier_config)
    try:
        # bounded: the auto threshold on the last quality_history labelled items, as many records;
        # verifier.threshold (a number or an eval-verifier metrics.json) as train grpo reads it
        tracker = (
            RewardQualityTracker(
                threshold=verifier_config.threshold,
                window=reward.track_window,
                history=serve.quality_history,
                max_records=serve.quality_history,
                length_setting=CLIENT_LENGTH_SETTINGS,
                unit="batch",  # a server has requests, not training steps
            )
            if reward.track
            else None
        )
        checker = MathChecker(
            timeout_s=reward.math_timeout_s,
            answer_format=reward.answer_format,
            workers=serve.math_workers,
        )
        funcs, weights = build_reward_funcs(reward, verifier, tracker=tracker, checker=checker)
        for f in funcs:  # a served call's samples are unrelated: no group normalisation
            if hasattr(f, "per_sample"):
                f.per_sample = True
        service = RewardService(funcs, weights, verifier, serve)
    except BaseException:
        verifier.close()
        raise
    note = tracking_note(reward, verifier_config)
    if note:
        logger.warning("%s", note)
    if (config.get("serve") or {}).get("require_labels") is None:
        service.labels_why = f"the default for reward.type={reward.type} with reference answers"

    def close() -> None:
        checker.close()
        for f in funcs:
            other = getattr(f, "checker", None)
            if other is not None and other is not checker and hasattr(other, "close"):
                other.close()
        # the reads still running are the drain's cut-off requests' (its log line named them)
        verifier.close(abandon=True)

    return service, close


def tracking_note(reward: Any, verifier: VerifierConfig) -> str | None:
    """What the verifier does on a server whose reward does not read it (``sparse``) while
    ``reward.track`` is on: it reads every labelled item, only to track reward quality. Said
    once by the start and by the dry run; ``None`` when nothing needs saying."""
    if reward.kind.uses_verifier or not reward.track:
        return None
    return (
        f"reward.type={reward.type} is Math-Verify's verdict alone, but reward.track is on: the "
        f"verifier ({verifier.model or 'the embedded default'}, backend {verifier.backend}) reads "
        "every labelled item too, only to track reward quality (/metrics verifier/*), one read "
        "per item (its latency and compute on every request); reward.track=false turns that off "
        "(the verifier then serves only /rank)"
    )


def _resolve_require_labels(reward: Any, serve: ServeConfig) -> ServeConfig:
    """``serve`` with ``require_labels`` decided: ``None`` = on when the reward uses references
    (``reward.reference_guided``, or a kind whose spec says ``checks_answer``: a Math-Verify
    term has nothing to check without a label)."""
    if serve.require_labels is not None:
        return serve
    uses = reward.reference_guided or reward.kind.checks_answer
    return dataclasses.replace(serve, require_labels=bool(uses))


def _sections(config: dict[str, Any]) -> tuple[Any, VerifierConfig, ServeConfig]:
    """The ``reward``, ``verifier`` and ``serve`` sections, validated (no model, no server).

    Raises:
        ConfigError: as :func:`build_service`.
    """
    from ..rewards import RewardConfig
    from ..rewards._common import check_prompt_settings

    unknown = sorted(set(config) - {"reward", "verifier", "serve", *_GRPO_ONLY})
    other = other_command(config, "serve") if unknown else None
    if other is not None and other != "train grpo":  # serve reads a GRPO file's sections
        theirs = ", ".join(k for k in COMMAND_SECTIONS[other][0] if k in config)
        raise ConfigError(
            f"this is a `{other}` config (it has {theirs}), not a `serve` one: run "
            f"`densereward {other} --config FILE`, or give serve a file of reward, verifier "
            "and serve sections (e.g. configs/grpo_math_cpu.yaml, whose reward and verifier "
            "it reads)"
        )
    if unknown:
        raise ConfigError(f"unknown section(s) {unknown}; serve reads reward, verifier and serve")
    reward = from_dict(RewardConfig, config.get("reward"), prefix="reward.")
    verifier_config = from_dict(VerifierConfig, config.get("verifier"), prefix="verifier.")
    serve = _resolve_require_labels(
        reward, from_dict(ServeConfig, config.get("serve"), prefix="serve.")
    )
    check_prompt_settings(reward, verifier_config)
    if not reward.kind.servable:
        why = (
            "needs whole GRPO groups in one call; the reward server scores each sample on its "
            "own (OpenRLHF and slime send one per request)"
            if reward.kind.needs_groups
            else "is not servable (its RewardKind says servable=False)"
        )
        raise ConfigError(f"reward.type={reward.type} {why}: use dense, gated, mixed or sparse")
    return reward, verifier_config, serve


def dry_run(config: dict[str, Any]) -> tuple[list[str], list[str]]:
    """What ``densereward serve`` would start with, checked without starting it.

    The sections are validated as :func:`build_service` validates them; a served verifier is
    contacted as its start contacts it, a verifier model loaded here is checked on disk (a path,
    an offline name, a Hugging Face id in the local cache or a Hub that answers); nothing is
    bound, no weights are loaded.

    Returns:
        ``(checks, problems)``: a line per check; the problems the server's start would hit here.

    Raises:
        ConfigError: as :func:`build_service`.
    """
    from ..backend_options import loads_model
    from ..trainers.checks import check_model, check_verifier_server

    reward, v, serve = _sections(config)
    checks = [
        f"serve: http://{serve.host}:{serve.port} (max_batch {serve.max_batch}, batch_wait_ms "
        f"{serve.batch_wait_ms}, require_labels {serve.require_labels}) -- not started",
        f"reward: {reward.type} (use_async {reward.use_async})",
        f"verifier: VerifierConfig ok (backend {v.backend}, G={v.granularity}, options {v.options})",
    ]
    note = tracking_note(reward, v)
    if note:
        checks.append(f"verifier use: {note}")
    line, problem = (
        check_model(v.model, "verifier.model") if loads_model(v.backend) else (None, None)
    )
    server, down = check_verifier_server(v)
    checks += [x for x in (None if problem else line, server) if x]  # a problem: its !! only
    return checks, [x for x in (problem, down) if x]


def build_app(config: dict[str, Any]):
    """``(app, serve_config)``: the Starlette app of a config dict, closing its verifier at shutdown."""
    service, close = build_service(config)
    return make_app(service, on_close=close), service.config


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, help="YAML with reward:, verifier: (and serve:)")
    p.add_argument("--host", default=None, help="overrides serve.host")
    p.add_argument("--port", type=int, default=None, help="overrides serve.port")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="validate the sections and contact a served verifier (or check a local model); "
        "start nothing, load no weights (exit 2 when the start would fail here)",
    )
    p.add_argument(
        "--verl-path",
        action="store_true",
        help="print the path of verl_reward.py (verl's custom_reward_function.path) and exit",
    )
    add_override_arguments(
        p, "verifier.backend=openai verifier.backend_options.base_url=http://127.0.0.1:8000/v1"
    )


def main(args: argparse.Namespace) -> int:
    """Run the server until SIGINT / SIGTERM, then drain (:mod:`.lifecycle`). Returns 0 after
    SIGTERM, 130 after Ctrl-C; with ``--dry-run`` the checks' exit status (0, or 2 for a problem
    the start would hit); with ``--verl-path`` 0 after printing the path of ``verl_reward.py``."""
    if getattr(args, "verl_path", False):
        from . import verl_reward

        print(verl_reward.__file__)
        return 0
    config = load_yaml(args.config) if args.config else {}
    apply_overrides(config, overrides_from(args))
    for key in ("host", "port"):
        if getattr(args, key, None) is not None:
            config.setdefault("serve", {})[key] = getattr(args, key)
    if getattr(args, "dry_run", False):
        from ..trainers.checks import print_dry_run

        return print_dry_run(*dry_run(config))
    from .lifecycle import run_server

    app, serve = build_app(config)
    print(
        f"[serve] reward server on http://{serve.host}:{serve.port} "
        "(POST /get_reward /slime /score /rank; GET /health /metrics)",
        flush=True,
    )
    status = run_server(app, serve, app.state.service.drain)
    # a forward pass the drain cut off still runs: the interpreter's teardown under it aborts
    # the process ("terminate called without an active exception", exit 134), so the console
    # command ends it at once, its logs flushed (densereward.cli.main)
    args.end_at_once = app.state.service.left_running
    return status
