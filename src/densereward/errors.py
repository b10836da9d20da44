"""Exception hierarchy of densereward.

Every error the library raises on purpose derives from :class:`DenseRewardError`,
so callers can catch the library's errors without catching programming errors.
:class:`ConfigError` is for configuration only (a field, an argument that configures an
object, a command-line choice); faults met while running have their own types: the model
(:class:`BackendError`), data and values handed over at run time (:class:`DataError`), a call
in the wrong state (:class:`StateError`), the verifier's abstention (:class:`AbstentionError`).

A command stopped by Ctrl-C or SIGTERM is not an error: :class:`Interrupted` (a
``KeyboardInterrupt``, so every clean-up written for Ctrl-C runs) carries the signal, the exit
status (130 for Ctrl-C, 143 for SIGTERM: 128 + the signal's number, as a shell reports it) and
what the stopped run left; :func:`sigterm_interrupts` turns SIGTERM into it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = [
    "DenseRewardError",
    "ConfigError",
    "ScoreTokenError",
    "BackendError",
    "BackendUnavailableError",
    "BackendClosedError",
    "BackendRefusedError",
    "AbstentionError",
    "DataError",
    "StateError",
    "RegistryError",
    "Interrupted",
    "command_finished",
    "finished_before_stop_signal",
    "late_stop_signal",
    "sigterm_interrupts",
]


class DenseRewardError(Exception):
    """Base class of every error densereward raises on purpose."""


class ConfigError(DenseRewardError, ValueError):
    """A configuration value is invalid; the message names the field and the fix."""


class ScoreTokenError(DenseRewardError, ValueError):
    """A score token does not map to exactly one token id in the verifier's tokenizer."""


class BackendError(DenseRewardError, RuntimeError):
    """A verifier backend failed to answer (after its retries)."""


class BackendClosedError(BackendError):
    """A read on a verifier backend after its owner closed it (``Verifier.close``, the end of
    ``densereward serve``): the read is never sent."""


class BackendUnavailableError(BackendError):
    """A verifier backend could not be reached or loaded at start-up."""


class BackendRefusedError(BackendError):
    """A verifier server refused a request (HTTP 4xx other than 408/409/425/429): the request is
    wrong for that server, and retrying it will not help.

    Attributes:
        status: the HTTP status.
        detail: the server's message.
        setting: the setting to change (e.g. ``verifier.backend_options.top_logprobs``), or
            ``None`` when the server's message names none.
        item_dependent: the refusal depends on the item (a prompt longer than the model's
            context), not on the configuration.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        detail: str = "",
        setting: str | None = None,
        item_dependent: bool = False,
    ):
        super().__init__(message)
        self.status = status
        self.detail = detail
        self.setting = setting
        self.item_dependent = item_dependent


class AbstentionError(DenseRewardError, RuntimeError):
    """The verifier abstained and the configuration asked to raise (``on_error='raise'``)."""


class DataError(DenseRewardError, ValueError):
    """Data handed to the library is malformed: a data set that cannot be loaded or has the
    wrong fields, or a value met at run time that breaks its contract (a progress function's
    value outside ``[0, 1]`` or wrong count, an observation of another environment, inputs of
    mismatched lengths or shapes)."""


class StateError(DenseRewardError, RuntimeError):
    """A call came in a state that does not allow it (an environment stepped before
    ``reset()``, ``step_wait()`` before ``step_async()``)."""


class RegistryError(ConfigError):
    """A registry refused a registration: the name is taken, the entry point is malformed, or
    the entry is not what the registry holds (a backend that is not a backend). A
    :class:`ConfigError`: registering an entry configures the library."""


class Interrupted(KeyboardInterrupt):
    """A command stopped by a signal: Ctrl-C (SIGINT) or SIGTERM.

    A ``KeyboardInterrupt``, so whatever cleans up after Ctrl-C cleans up after SIGTERM too.
    A trainer that was stopped re-raises it with ``detail``: what the stopped run left and how
    to go on (the checkpoint and ``--resume``, or nothing), which the CLI prints on one line.

    Attributes:
        signal_name: ``"SIGINT"`` or ``"SIGTERM"``.
        exit_code: the command's exit status: 128 + the signal's number (130, 143).
        detail: what the stopped run left, in words (``""`` when nothing is known).
    """

    def __init__(self, detail: str = "", *, signal_name: str = "SIGINT") -> None:
        super().__init__(detail)
        self.detail = detail
        self.signal_name = signal_name
        self.exit_code = 128 + int(getattr(signal, signal_name))

    @classmethod
    def of(cls, exc: BaseException, detail: str | None = None) -> Interrupted:
        """``exc`` (a ``KeyboardInterrupt``: Ctrl-C, or an :class:`Interrupted`) as an
        :class:`Interrupted` of the same signal, with ``detail`` when given."""
        name = exc.signal_name if isinstance(exc, Interrupted) else "SIGINT"
        if detail is None:
            detail = exc.detail if isinstance(exc, Interrupted) else ""
        return cls(detail, signal_name=name)

    @property
    def words(self) -> str:
        """The signal as a user sent it: ``"Ctrl-C (SIGINT)"`` or ``"SIGTERM"``."""
        return "Ctrl-C (SIGINT)" if self.signal_name == "SIGINT" else self.signal_name


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Interrupted` (``signal_name="SIGTERM"``) in
    the main thread, as Ctrl-C raises ``KeyboardInterrupt``; the previous handler is restored
    after the block, and at once after the first SIGTERM (a second one acts as before: by
    default it ends the process). Outside the main thread, and in a child process forked
    within the block, SIGTERM keeps its default action. ``densereward train`` and
    ``compare`` run inside it; ``serve`` has its own drain. After :func:`command_finished`
    a SIGTERM no longer stops the command: :func:`late_stop_signal` says it came."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = os.getpid()
    _late.update(finished=False, signal=None, console_done=False)
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None:  # a handler not set from Python: the default action stands for it
        previous = signal.SIG_DFL

    def handler(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, previous if os.getpid() == owner else signal.SIG_DFL)
        if os.getpid() != owner:  # a forked worker: end as SIGTERM ends it by default
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if _late["finished"]:  # the outputs are complete: only the console lines are left
            _late["signal"] = "SIGTERM"
            return
        raise Interrupted(signal_name="SIGTERM")

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        if not _late["console_done"]:  # else finished_before_stop_signal's handler stays
            signal.signal(signal.SIGTERM, previous)


_late: dict[str, object] = {"finished": False, "signal": None, "console_done": False}


def command_finished() -> None:
    """Mark the command's work done, its outputs written (a trainer's ``main`` calls it once
    ``run`` returned, before printing its summary): under :func:`sigterm_interrupts`, a
    SIGTERM from here on lets the summary print instead of stopping a finished run, and
    :func:`late_stop_signal` names it for the caller to say."""
    _late["finished"] = True


def late_stop_signal() -> str | None:
    """``"SIGTERM"`` when one arrived after :func:`command_finished` in the current
    :func:`sigterm_interrupts` block (or after it), else ``None``."""
    return _late["signal"]  # type: ignore[return-value]


def late_signal_line(name: str, command: str, status: int) -> str:
    """The one stderr line for a signal that arrived after ``command`` had finished."""
    return (
        f"densereward: {name} arrived after {command} had finished (exit status {status}); "
        f"its outputs are complete, so it exits with {status}"
    )


def finished_before_stop_signal(status: int, command: str) -> None:
    """After ``command`` returned ``status``: a SIGTERM or Ctrl-C that arrives while the
    interpreter shuts down (joining threads, flushing caches: seconds, after the command printed
    its last line) ends the process at once with ``status`` and one line on stderr saying that
    the command had finished and its outputs are complete, instead of the default action's
    silent 143 (or a ``KeyboardInterrupt`` traceback) on a run that finished. Only in the main
    thread; for the rest of the process's life (call it only where the process ends next:
    ``densereward``'s console entry point)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: object) -> None:
        name = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        with contextlib.suppress(Exception):
            print(late_signal_line(name, command, status), file=sys.stderr, flush=True)
        os._exit(status)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    _late["console_done"] = True  # the last moments of the exit ignore them (atexit below)
    for stream in (sys.stdout, sys.stderr):  # the last lines are out while the handler runs
        with contextlib.suppress(Exception):
            stream.flush()


def _ignore_late_stop_signals() -> None:
    """At exit, after :func:`finished_before_stop_signal`: ignore SIGTERM and SIGINT for the
    interpreter's last moments, once Python's handlers no longer run (Python restores the
    default action of the signals it handled, and a default SIGTERM then ended a finished
    command with a silent 143). Registered when this module is imported, so it runs after
    the exit hooks of the libraries imported later (W&B's, torch's), under whose run the
    handler above still answers."""
    if _late.get("console_done") and threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                signal.signal(signum, signal.SIG_IGN)


atexit.register(_ignore_late_stop_signals)
