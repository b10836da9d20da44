"""W&B, configured one way for every command: the top-level ``wandb:`` section.

``train grpo``, ``train sac`` and ``compare`` read the same section into :class:`WandbConfig`
and apply it the same way (:func:`wandb_environment`): as W&B's own environment variables
(``WANDB_PROJECT``, ``WANDB_ENTITY``, ``WANDB_RUN_GROUP``, ``WANDB_NAME``, ``WANDB_TAGS``,
``WANDB_MODE``, ``WANDB_DIR``) for the duration of the run, which TRL's W&B callback and
``wandb.init`` both read. A comparison gives each run the comparison's section, with its
``group`` (default: the comparison's name) and no ``name`` (each run is named after its run
directory, ``<condition>-seed<k>``).

The earlier shapes are refused with the key to use (:func:`refuse_old_keys`):
``training.wandb`` (SAC) -> ``wandb.enabled``, ``training.wandb_project`` (SAC) ->
``wandb.project``, ``wandb`` in ``training.report_to`` (GRPO) -> ``wandb.enabled``. Refused,
not translated: a translation would keep three shapes alive in the code and the docs, and the
fix is one line the error names.

W&B writes through a service process it starts beside the run (``wandb-core``). When that
process ends during a run (killed, crashed, the OOM killer), every W&B call raises
``ConnectionError`` ("Connection lost"); :class:`WandbService` turns that into one warning and
a run that goes on without W&B: W&B is the run's observer, not its record (the run's own files,
its checkpoints and summary stay complete), so losing it must not end hours of training.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .errors import ConfigError
from .io import configure_wandb, wandb_key_configured

__all__ = [
    "SERVICE_LOST",
    "WandbConfig",
    "WandbService",
    "describe_wandb",
    "refuse_old_keys",
    "restored_environ",
    "wandb_environment",
]

logger = logging.getLogger(__name__)

MODES = ("auto", "online", "offline", "disabled")

SERVICE_LOST: tuple[type[Exception], ...] = (ConnectionError,)
"""What a W&B call raises once W&B's service process (``wandb-core``) has ended:
``ConnectionResetError`` ("Connection lost") or ``BrokenPipeError`` on the socket to it; and
:func:`service_lost` adds W&B's ``HandleAbandonedError`` (``run.finish()`` waiting on a reply
the dead service will not send, seen under load)."""


def service_lost() -> tuple[type[Exception], ...]:
    """:data:`SERVICE_LOST` and W&B's ``HandleAbandonedError`` where this W&B version has it."""
    try:
        from wandb.sdk.mailbox.mailbox_handle import HandleAbandonedError
    except ImportError:
        return SERVICE_LOST
    return (*SERVICE_LOST, HandleAbandonedError)


@dataclass(frozen=True)
class WandbConfig:
    """W&B logging of a run (YAML section ``wandb:``, the same keys for every command)."""

    enabled: bool = True
    """Log the run to W&B. GRPO: adds ``wandb`` to ``trl.GRPOConfig.report_to``; SAC: an SB3
    logger output that sends every logged value to the W&B run."""
    project: str = "densereward"
    """W&B project."""
    entity: str | None = None
    """W&B entity (user or team); ``None`` = the account's default."""
    group: str | None = None
    """W&B group; in a comparison ``None`` = the comparison's ``name``."""
    name: str | None = None
    """Run name; ``None`` = the run directory's name. A GRPO run without ``training.output_dir``
    or ``--output-dir`` also names its directory ``runs/<name>``."""
    tags: tuple[str, ...] = ()
    """W&B tags."""
    mode: Literal["auto", "online", "offline", "disabled"] = "auto"
    """``auto``: ``WANDB_MODE`` when it is set, else ``online`` with an API key (``WANDB_API_KEY``
    or ``~/.netrc``), else ``offline`` (``wandb sync <dir>`` uploads later)."""
    dir: str | None = None
    """Folder W&B writes its files in; ``None`` = the run directory."""

    def dir_for(self, run_dir: str | Path) -> Path:
        """The folder W&B writes this run's ``wandb/`` in (``WANDB_DIR``): :attr:`dir`, or
        ``run_dir``."""
        return Path(self.dir or run_dir)

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"wandb.enabled must be true or false, got {self.enabled!r}")
        if not isinstance(self.project, str) or not self.project:
            raise ConfigError(f"wandb.project must be a non-empty name, got {self.project!r}")
        if self.mode not in MODES:
            raise ConfigError(f"wandb.mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        tags = (self.tags,) if isinstance(self.tags, str) else tuple(self.tags)
        if not all(isinstance(t, str) and t for t in tags):
            raise ConfigError(f"wandb.tags must be a list of names, got {self.tags!r}")
        object.__setattr__(self, "tags", tags)

    @classmethod
    def from_section(cls, section: Any) -> WandbConfig:
        """Parse a ``wandb:`` mapping (``None`` = the defaults).

        Raises:
            ConfigError: naming each unknown key and the valid ones, or a bad value.
        """
        if section is None:
            return cls()
        if not isinstance(section, Mapping):
            raise ConfigError(f"section 'wandb' must be a mapping, got {section!r}")
        valid = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(section) - set(valid))
        if unknown:
            from .sections import unknown_key_hints

            raise ConfigError(
                f"unknown key(s) in section 'wandb': {unknown_key_hints(unknown, valid)}; the "
                f"keys are {', '.join(valid)}"
            )
        return cls(**section)


def refuse_old_keys(config: Mapping[str, Any]) -> None:
    """Refuse the W&B keys of earlier releases, naming the ``wandb:`` key that replaced each.

    Raises:
        ConfigError: ``training.wandb`` / ``training.wandb_project`` is set,
            ``training.report_to`` names ``wandb`` (or ``all``, which includes it), or is
            ``none`` / ``[]`` while ``wandb.enabled`` is true (it used to switch W&B off).
    """
    training = config.get("training")
    if not isinstance(training, Mapping):
        return
    moved = {"wandb": "wandb.enabled", "wandb_project": "wandb.project"}
    for old, new in moved.items():
        if old in training:
            raise ConfigError(
                f"training.{old} moved to the top-level wandb: section: set {new} "
                f"(e.g. wandb: {{{new.split('.')[1]}: {_yaml(training[old])}}})"
            )
    report_to = training.get("report_to")
    named = [report_to] if isinstance(report_to, str) else list(report_to or [])
    if "wandb" in named or "all" in named:
        raise ConfigError(
            f"training.report_to={report_to!r}: W&B is switched by the top-level wandb: section "
            "(wandb.enabled, default true); drop wandb/all from training.report_to"
        )
    section = config.get("wandb")
    enabled = section.get("enabled", True) if isinstance(section, Mapping) else True
    if "report_to" in training and named in ([], ["none"]) and enabled is True:
        raise ConfigError(
            f"training.report_to={report_to!r} asks for no W&B run, but wandb.enabled is true "
            "(the default): set wandb.enabled: false and drop training.report_to"
        )


def _yaml(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _environment(w: WandbConfig, run_dir: Path) -> dict[str, str | None]:
    return {
        "WANDB_PROJECT": w.project,
        "WANDB_ENTITY": w.entity,
        "WANDB_RUN_GROUP": w.group,
        "WANDB_NAME": w.name or run_dir.name,
        "WANDB_TAGS": ",".join(w.tags) or None,
        "WANDB_MODE": None if w.mode == "auto" else w.mode,
    }


@contextmanager
def wandb_environment(w: WandbConfig, run_dir: str | Path) -> Iterator[str | None]:
    """Set W&B's environment for one run; restore the previous one when the block ends.

    Yields the mode W&B will run in (``online``, ``offline``, ``disabled``), or ``None`` with
    ``enabled: false`` (nothing is set then). A ``WANDB_JOB_TYPE`` set by the caller (a
    comparison's condition) is kept.
    """
    if not w.enabled:
        yield None
        return
    run_dir = Path(run_dir)
    values = _environment(w, run_dir)
    with restored_environ((*values, "WANDB_DIR", "WANDB_SILENT")):
        for k, v in values.items():
            if v is not None:
                os.environ[k] = v
            elif k != "WANDB_MODE":  # an unset mode keeps the user's WANDB_MODE (auto)
                os.environ.pop(k, None)
        yield configure_wandb(w.dir_for(run_dir))


@contextmanager
def restored_environ(keys: Iterable[str]) -> Iterator[None]:
    """Put the environment variables ``keys`` back as they were (set or unset) when the block ends."""
    old = {k: os.environ.get(k) for k in keys}
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def describe_wandb(w: WandbConfig, run_dir: str | Path) -> str:
    """The dry run's line: the resolved settings, as :func:`wandb_environment` would apply them.

    >>> describe_wandb(WandbConfig(enabled=False), "runs/x")
    'wandb: off (wandb.enabled: false)'
    """
    if not w.enabled:
        return "wandb: off (wandb.enabled: false)"
    run_dir = Path(run_dir)
    mode = w.mode
    if mode == "auto":
        env_mode = os.environ.get("WANDB_MODE")
        key = "online (API key found)" if wandb_key_configured() else "offline (no API key)"
        mode = f"{env_mode} (WANDB_MODE)" if env_mode else key
    return (
        f"wandb: project {w.project}, entity {w.entity or '(default)'}, group "
        f"{w.group or '(none)'}, name {w.name or run_dir.name}, tags {list(w.tags)}, mode {mode}, "
        f"dir {w.dir_for(run_dir)}"
    )


class WandbService:
    """One run's W&B calls, watched for the end of W&B's service process (``wandb-core``).

    When a call raises :data:`SERVICE_LOST` (the service was killed, crashed or met the OOM
    killer), :meth:`lost` warns once (the service, the step, what the run keeps), tears W&B
    down quietly (its exit hook, which would print a 30-line traceback at exit, is removed)
    and every later call is skipped: the run goes on without W&B.

    Args:
        run_dir: the run directory (named in the warning as what stays complete).
        wandb_dir: where W&B writes this run's files (``WANDB_DIR``: ``wandb.dir`` or the run
            directory).
        unit: what a step counts, in words (``"environment step"``, ``"step"``).

    Attributes:
        lost_at: the step at which the service was found gone, ``None`` while it answers.
    """

    def __init__(self, run_dir: str | Path, wandb_dir: str | Path, *, unit: str = "step") -> None:
        self.run_dir = Path(run_dir)
        self.wandb_dir = Path(wandb_dir)
        self.unit = unit
        self.lost_at: int | None = None
        self._finishing = False

    def call(self, step: int, fn: Any, /, *args: Any, **kwargs: Any) -> bool:
        """Run ``fn(*args, **kwargs)`` (a W&B call, at the run's ``step``) unless the service
        is gone; ``False`` when it was gone or went now (then :meth:`lost` said so)."""
        if self.lost_at is not None:
            return False
        try:
            fn(*args, **kwargs)
        except service_lost() as exc:
            self.lost(exc, step)
            return False
        return True

    def lost(self, exc: BaseException, step: int) -> None:
        """Say once that the service ended (found at ``step``) and tear W&B down quietly."""
        if self.lost_at is not None:
            return
        self.lost_at = int(step)
        when, then = (
            ("before the run could finish its W&B run, found", "that W&B run stays unfinished")
            if self._finishing
            else ("during the run", "W&B logging stops there and the run goes on without W&B")
        )
        logger.warning(
            "the W&B service (wandb-core) ended %s at %s %d (%s: %s): %s; the run's own files "
            "in %s stay complete, W&B's files for this run (under %s) end at that step and may "
            "be incomplete (wandb.enabled=false runs without W&B)",
            when,
            self.unit,
            self.lost_at,
            type(exc).__name__,
            str(exc) or "no reply from it",  # HandleAbandonedError says nothing
            then,
            self.run_dir,
            self.wandb_dir / "wandb",
        )
        _drop_dead_service()

    def guard_log(self, step: Any) -> None:
        """Route W&B's module-level ``wandb.log`` of the current run (TRL's profiling, its
        completion tables and transformers' ``WandbCallback`` call it) through :meth:`call`;
        ``step()`` gives the run's step. Finishing the run (``wandb.finish``, or the teardown
        after a lost service) puts W&B's own back."""
        import wandb

        log = wandb.log

        def guarded(*args: Any, **kwargs: Any) -> None:
            self.call(int(step()), log, *args, **kwargs)

        wandb.log = guarded

    def finish(self, run: Any, *, step: int) -> None:
        """Finish ``run`` (``None``: W&B's current run, if any) and reset W&B's process-wide
        state for a next run in this process (``wandb.teardown``); nothing after a lost
        service (:meth:`lost` did the reset). A service found gone here is said once too."""
        import wandb

        self._finishing = True
        if self.lost_at is None:
            run = run if run is not None else wandb.run
            if run is not None and not self.call(step, run.finish):
                return  # lost() tore W&B down
            self.call(step, wandb.teardown)


def _drop_dead_service() -> None:
    """Tear down W&B's connection to a service that has ended: ``wandb.teardown`` removes W&B's
    exit hook first and then fails to reach the service (quiet), the dead run's capture of
    stdout and stderr (each line sent to the service) is removed, and the dead run stops being
    W&B's current run (``wandb.run``), so TRL's and a next run's ``wandb.run`` checks skip it.
    The private parts are guarded: another W&B version loses only the extra quiet."""
    import wandb

    run = wandb.run
    with contextlib.suppress(*service_lost()):
        wandb.teardown()
    with contextlib.suppress(Exception):
        run._restore()  # what run.finish() would have done with the console capture
    try:
        from wandb.sdk.lib import module

        module.unset_globals()
    except (ImportError, AttributeError):  # another W&B layout: at least no current run
        wandb.run = None
