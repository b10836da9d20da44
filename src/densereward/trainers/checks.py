"""The models a run loads: start-up checks without weights or downloads, and their names.

:func:`check_model` is what ``--dry-run`` reports for ``model.name`` and ``verifier.model``, and
what a run checks before it creates its run directory: a local path must exist, an offline
model name (:mod:`densereward.backends.models`) must be one, and a Hugging Face id must be in
the local cache or the Hub must answer (one request, none under ``HF_HUB_OFFLINE``); one that
cannot load here is reported with the offline names. :func:`name_base_model` gives TRL's model
card the name of a policy that was loaded from a local directory (the embedded model).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from densereward.backend_options import loads_model
from densereward.data import looks_like_path
from densereward.errors import ConfigError

__all__ = [
    "base_model_id",
    "check_model",
    "check_models",
    "check_verifier_server",
    "print_dry_run",
    "name_base_model",
    "verifier_reads_images",
]


def check_model(value: str | os.PathLike | None, field: str) -> tuple[str, str | None]:
    """Check one configured model for a dry run or a start: what would load, or why it cannot.

    Args:
        value: The configured model: ``None`` (the embedded SmolLM2-135M-Instruct), a local
            path, an offline model name or a Hugging Face id.
        field: The config field, for the messages (``"model.name"``, ``"verifier.model"``).

    Returns:
        ``(description, problem)``: ``problem`` is ``None``, or why the run would fail here
        although the value is valid (a Hub id not in the local cache while the Hub cannot be
        reached, an offline name whose packages are not installed).

    Raises:
        ConfigError: naming ``field``, for an empty value, a path that does not exist (or a
            directory without ``config.json``), or a typo of an offline model name.
    """
    from densereward.backends import models

    if value is None:
        return f"{field}: the embedded SmolLM2-135M-Instruct", None
    text = os.fspath(value).strip()
    if not text:
        raise ConfigError(
            f"{field} is empty: leave it unset (null) for the embedded model, or give a Hugging "
            "Face id, an offline model name or a local path"
        )
    path = Path(text).expanduser()
    if path.is_dir() and not (path / "config.json").is_file():
        raise ConfigError(
            f"{field}={text!r} is a directory without config.json: not a Hugging Face model "
            "directory (give the directory that holds config.json and the weights)"
        )
    if path.exists():
        return f"{field}: local {text}", None
    if text.lower() in {m.name for m in models.available_models()}:
        missing = models.missing_packages(text)
        where = "converted" if models.is_converted(text) else "converted on first use"
        line = f"{field}: offline model {text!r} ({models.get_model(text).model}, {where})"
        if missing and not models.is_converted(text):
            return line, f"{field}: {models.not_installed(text)}"
        return line, None
    if looks_like_path(text):
        raise ConfigError(
            f"{field}={text!r}: no such file or directory (a local model path must exist; or "
            "give a Hugging Face id owner/name, or an offline model name)"
        )
    try:
        _refuse_name_typo(text, models)
    except ConfigError as exc:
        raise ConfigError(f"{field}: {exc}") from None
    return _check_hub_id(text, field)


def check_models(
    policy: str | None, verifier: Any, *, refuse_problems: bool = False
) -> tuple[list[str | None], list[str]]:
    """:func:`check_model` for the policy (``model.name``) and, where the verifier loads its own
    weights (:func:`densereward.backend_options.loads_model`: ``transformers``, ``vllm``, a
    plugin whose options say ``loads_model = True``), for ``verifier.model``.

    Args:
        policy: The policy's ``model.name``.
        verifier: The :class:`~densereward.config.VerifierConfig`; ``None`` for a run that
            builds no verifier (its model is not checked).
        refuse_problems: Raise the problems instead of returning them (a run's start).

    Returns:
        ``(lines, problems)``: a line per model checked, policy first, ``None`` for a model
        with a problem (its problem is its one line: a dry run prints no ``ok`` line for it);
        the problems found.

    Raises:
        ConfigError: as :func:`check_model`; with ``refuse_problems``, also for the problems.
    """
    checked = [(policy, "model.name")]
    if verifier is not None and loads_model(verifier.backend):
        checked.append((verifier.model, "verifier.model"))
    lines, problems = [], []
    for value, field in checked:
        line, problem = check_model(value, field)
        lines.append(None if problem else line)
        problems += [problem] if problem else []
    if problems and refuse_problems:
        raise ConfigError("; ".join(problems))
    return lines, problems


def print_dry_run(lines: list[str], problems: list[str] = ()) -> int:
    """Print a dry run: the checks (``ok``), the notes (``note``: a line of ``lines`` that
    starts with ``"note: "``, an outcome certain before the run that does not stop it, e.g. a
    metric it can never define), then the problems the run would hit here (``!!``; a line of
    ``lines`` that starts with ``"!! "`` is one too).

    Returns:
        The exit status: 0, or 2 when there is a problem (a start that would fail here); a
        note alone is 0.
    """
    problems = [*(x[3:] for x in lines if x.startswith("!! ")), *problems]
    print(
        "dry run: configuration valid; nothing created, no weights loaded, nothing downloaded"
        + (f"; {len(problems)} problem(s) the run would hit here:" if problems else "")
    )
    for line in lines:
        if line.startswith("note: "):
            print("  note  " + line[len("note: ") :])
        elif not line.startswith("!! "):
            print("  ok  " + line)
    for problem in problems:
        print("  !!  " + problem)
    return 2 if problems else 0


def check_verifier_server(
    verifier: Any, *, timeout_s: float = 3.0
) -> tuple[str | None, str | None]:
    """Contact a verifier served over HTTP as a run's start does, with a short timeout.

    A backend whose options have ``base_url`` and ``health_timeout_s`` (``openai``,
    ``sampled``, a plugin built on their options) is built as the run builds it (``GET
    {base_url}/models`` on each replica, the model it lists, the server kind for
    ``chat_template_kwargs``), with ``health_timeout_s`` at most ``timeout_s``, and closed. A dry
    run said "not contacted" and exited 0 for a server that was down.

    Args:
        verifier: The :class:`~densereward.config.VerifierConfig`.
        timeout_s: The longest wait for one server's answer, seconds.

    Returns:
        ``(line, problem)``: what was contacted and how it answered; ``problem`` is ``None``,
        or the error the run's start would stop with (one line naming the URL and the fix).
        ``(None, None)`` for a backend that loads its model in this process or has no URL.
    """
    import dataclasses

    from densereward.backends import create_backend
    from densereward.errors import BackendError

    opts = verifier.options
    if loads_model(verifier.backend) or not hasattr(opts, "base_url"):
        return None, None
    if not hasattr(opts, "health_timeout_s"):
        return f"verifier server: {opts.base_url} -- not contacted (no health check)", None
    given = {
        **(verifier.backend_options or {}),
        "health_timeout_s": min(opts.health_timeout_s, timeout_s),
    }
    try:
        backend = create_backend(dataclasses.replace(verifier, backend_options=given))
    except (BackendError, ConfigError) as exc:
        return None, str(exc)
    try:
        replicas = getattr(backend, "replicas", None) or []
        down = [r["url"] for r in replicas if not r.get("healthy", True)]
        url = getattr(backend, "base_url", opts.base_url)
        line = f"verifier server: {url} -- contacted, model {backend.model_id!r}"
        if down:  # the run starts on the others and takes these back when they answer
            up = [r["url"] for r in replicas if r.get("healthy", True)]
            line += (
                f"; {len(down)} of {len(replicas)} replicas did not answer: {', '.join(down)} "
                f"(the run starts on {', '.join(up)} and takes them back when they answer)"
            )
    finally:
        backend.close()
    return line, None


def verifier_reads_images(verifier: Any) -> tuple[bool | None, str]:
    """Whether the configured verifier reads camera frames, as far as it is known unloaded.

    A backend that loads its model here (:func:`~densereward.backend_options.loads_model`)
    reads frames when the model directory's ``config.json`` has ``vision_config`` (an
    image-text-to-text model; the embedded model and the offline names are text-only LLMs).

    Args:
        verifier: the :class:`~densereward.config.VerifierConfig`.

    Returns:
        ``(reads, why)``: ``True`` / ``False``, or ``None`` when only loading or serving can
        tell (a served model, a Hub id not on this machine); ``why`` says which model and how
        it was decided, for the dry run's line or an error.
    """
    import json

    from densereward.backends import models

    if not loads_model(verifier.backend):
        return None, (
            f"backend {verifier.backend!r} sends frames to its server as image_url parts; the "
            "served model must take images (checked at the first read)"
        )
    value = verifier.model
    names = {m.name for m in models.available_models()}
    if value is None or str(value).lower() in names:
        name = "smollm2-135m" if value is None else str(value).lower()
        path = models.model_dir(name)
        label = "(the embedded SmolLM2-135M-Instruct)" if value is None else f"{name!r}"
    else:
        path, label = Path(os.fspath(value)).expanduser(), repr(os.fspath(value))
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None, f"verifier.model {label} is not on this machine yet (checked when it loads)"
    if "vision_config" in config:
        return True, f"verifier.model {label} is an image-text-to-text model (vision_config)"
    return False, f"verifier.model {label} is a text-only model (no vision_config in config.json)"


_HUB_ORGS = {"SmolLM2": "HuggingFaceTB", "Qwen2.5": "Qwen"}
"""Hub organisation of each offline model family (``OfflineModel.model``'s first word)."""


def base_model_id(name: str | None) -> str | None:
    """The Hugging Face id a policy was converted from: the embedded model (``None``) and the
    offline model names are local directories, which TRL's model card cannot name.

    >>> base_model_id(None), base_model_id("Qwen/Qwen3-8B")
    ('HuggingFaceTB/SmolLM2-135M-Instruct', None)
    """
    from densereward.backends import models

    if name is not None and str(name).lower() not in {m.name for m in models.available_models()}:
        return None  # a Hub id names itself; a directory of the user's own stays unnamed
    model = models.get_model(name or "smollm2-135m").model
    org = _HUB_ORGS.get(model.split("-")[0])
    return f"{org}/{model}" if org else None


def name_base_model(trainer: Any, policy: str | None) -> None:
    """Make a TRL trainer's model card name the model ``policy`` was converted from.

    TRL names the base model from ``config._name_or_path`` and writes ``[None]`` for a local
    directory; for the embedded model and the offline names (:func:`base_model_id`) the Hub id
    is swapped in while the card is written. Any other policy is left as TRL names it.
    """
    base_model = base_model_id(policy)
    if base_model is None:
        return
    create = trainer.create_model_card

    def create_model_card(*args: Any, **kwargs: Any) -> Any:
        config = trainer.model.config
        local, config._name_or_path = config._name_or_path, base_model
        try:
            return create(*args, **kwargs)
        finally:
            config._name_or_path = local

    trainer.create_model_card = create_model_card


def _refuse_name_typo(text: str, models) -> None:
    """A bare word close to an offline name but not one is a typo (``resolve_model``'s rule)."""
    import difflib

    names = [m.name for m in models.available_models()]
    if "/" not in text and difflib.get_close_matches(text.lower(), names, n=1):
        models.get_model(text)  # raises ConfigError with the suggestion


def _check_hub_id(repo_id: str, field: str) -> tuple[str, str | None]:
    """A Hugging Face id: looked up in the local cache (on disk), and when it is not there,
    whether the Hub answers (one request, :func:`~densereward.backends.models.hub_unreachable`;
    none under ``HF_HUB_OFFLINE``)."""
    from densereward.backends import models

    line = f"{field}: Hugging Face id {repo_id!r} -- NOT downloaded"
    snapshot = models.cached_snapshot(repo_id)
    if snapshot is not None:
        return line + f", found in the local cache ({snapshot})", None
    if models.hub_unreachable() is None:
        return line + ", not in the local cache: downloaded when the run starts", None
    return line + ", not in the local cache", models.hub_id_problem(repo_id, field)
