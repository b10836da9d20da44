"""Sparse correctness reward for MATH / GSM8K with Math-Verify, safe off the main thread.

Math-Verify (``math_verify.parse`` / ``math_verify.verify``) enforces its own timeouts with
``signal.alarm``, which only works in the main thread; TRL runs async reward functions on a
daemon event-loop thread and multi-process launchers may call from anywhere. Here both calls
run with their timeouts disabled (``parsing_timeout=None``, ``timeout_seconds=None``, the
Math-Verify 0.9 API) inside a separate worker *process*; the parent waits with a deadline and
kills and restarts the worker when one answer takes too long (SymPy can hang on adversarial
expressions), so a timeout never needs a signal and never leaves a runaway thread behind.

Reward semantics:

* the final answer is found by the project's one answer-extraction policy
  (:mod:`densereward.answers`): after the last ``</think>``; the last *complete*
  ``\\boxed{}`` / ``\\fbox{}``, else (``answer_format="auto"``) an explicit final-answer line
  such as ``The answer is 18`` or GSM8K's ``A: 18``;
* ``1.0`` -- that answer is mathematically equivalent to the reference (Math-Verify);
* ``0.0`` -- it is not, *including* a completion with no final answer (reason ``no_answer``:
  no box or answer line, or the last box unfinished or empty) or with unclosed thinking
  (reason ``unclosed_thinking``): a missing final answer is a real failure that the policy
  must learn to avoid;
* ``None`` -- abstain: no reference, the *reference* cannot be parsed, the check timed out,
  or the worker crashed. TRL turns ``None`` into NaN; a completion on which every reward
  function returned ``None`` is left out of its group's baseline (advantage 0). The rewards
  built on correctness (``gated``, ``mixed``, ``seed_recipe``) return ``None`` in every term
  where the check abstains on an item with a reference (:attr:`MathCheck.abstained`), so TRL
  and ``densereward serve`` see the abstention, not a wrong answer.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import queue
import re
import subprocess
import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Literal

from ..answers import (
    AnswerFormat,
    check_answer_format,
    extract_answer,
    extract_boxed,
    extract_final_line,
)
from ..errors import BackendUnavailableError, ConfigError, DataError
from ._common import check_lengths, check_trl, completion_texts

__all__ = [
    "MathCheck",
    "MathChecker",
    "MathCorrectnessReward",
    "AnswerFormatReward",
    "extract_boxed",
    "reference_answer",
]

logger = logging.getLogger(__name__)

_GSM8K_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


def reference_answer(answer: str | None = None, solution: str | None = None) -> str | None:
    """The reference final answer from a MATH or GSM8K record.

    Args:
        answer: MATH's ``answer`` field (already the final answer), GSM8K's ``answer``
            (a worked solution ending in ``#### N``) or a worked solution ending in a
            final-answer line (``A: 18``, as in GSM8K's model-solution files).
        solution: MATH's ``solution`` (the final answer is its last ``\\boxed{}``), used
            when ``answer`` is missing (e.g. ``EleutherAI/hendrycks_math``).

    Returns:
        The final answer text, or ``None`` if none can be found.

    >>> reference_answer("She makes 9 * 2 = 18.\\n#### 1,018")
    '1018'
    >>> reference_answer(None, r"... $\\boxed{5}$")
    '5'
    """
    if answer is not None and str(answer).strip():
        text = str(answer)
        m = _GSM8K_ANSWER.search(text)
        if m:
            return m.group(1).replace(",", "").strip()
        if "\n" in text.strip():  # a worked solution ending in a final-answer line ("A: 18")
            line = extract_final_line(text)
            if line:
                return line
        return text.strip()
    if solution:
        return extract_boxed(str(solution))
    return None


@dataclass(frozen=True)
class MathCheck:
    """Outcome of one correctness check.

    Attributes:
        reward: ``1.0`` correct, ``0.0`` wrong or no answer, ``None`` abstained.
        predicted: The final answer extracted from the completion (``""`` if none).
        reason: Why it abstained or scored 0 (``"no_answer"``, ``"unclosed_thinking"``,
            ``"answer_unparseable"``, ``"no_reference"`` (none given), ``"gold_unparseable"``,
            ``"timeout"``, ``"worker_error"``, ``"invalid_completion"`` for non-text), else
            ``None``.
    """

    reward: float | None
    predicted: str = ""
    reason: str | None = None

    @property
    def abstained(self) -> bool:
        """The check could not reach a verdict on an item that has a reference: it timed out,
        its worker crashed, the reference or the completion could not be read. A reward built
        on correctness (``gated``, ``mixed``, ``seed_recipe``) abstains there in every term: its
        other terms alone would score the item as a wrong answer. ``False`` for a verdict and
        for an item without a reference (``"no_reference"``: the reference-free judge scores
        it, ``serve.require_labels=false``).

        >>> MathCheck(None, "", "timeout").abstained, MathCheck(None, "", "no_reference").abstained
        (True, False)
        """
        return self.reward is None and self.reason != "no_reference"


# ---------------------------------------------------------------------------------------------
# Parent side.
# ---------------------------------------------------------------------------------------------


class _Worker:
    """One Math-Verify worker process and its pipes (see :meth:`MathChecker._remote`).

    A fresh interpreter (``python -m densereward.rewards._math_worker``) rather than fork (which
    would copy torch / CUDA / thread state) or multiprocessing's spawn (which re-imports the
    caller's ``__main__`` and fails for stdin scripts and some launchers).

    Raises:
        BackendUnavailableError: when it does not say "ready" within ``startup_timeout_s``.
    """

    def __init__(self, startup_timeout_s: float):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "densereward.rewards._math_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        self.send = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self.recv = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self.proc.stdin.close()
        self.proc.stdout.close()
        # The worker imports SymPy / Math-Verify before it says "ready"; only then does the
        # per-check deadline start, so a slow start never counts as a timeout.
        if not self.recv.poll(startup_timeout_s) or self.recv.recv() != "ready":
            self.stop()
            raise BackendUnavailableError(
                f"the math-verify worker did not start within {startup_timeout_s:.0f} s "
                "(is math-verify installed? try MathChecker(executor='inline') to debug)"
            )

    def ask(self, request: tuple[str, str], timeout_s: float) -> Any:
        """The worker's answer to ``request``, or ``None`` when it took longer than ``timeout_s``."""
        self.send.send(request)
        return self.recv.recv() if self.recv.poll(timeout_s) else None

    def stop(self, graceful: bool = False) -> None:
        """End the process (asked first when ``graceful``, else killed) and close the pipes."""
        if graceful and self.proc.poll() is None:
            try:
                self.send.send(None)
                self.proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        for conn in (self.send, self.recv):
            conn.close()


class MathChecker:
    """Thread-safe Math-Verify correctness checks with a real (signal-free) timeout.

    Checks run in ``workers`` worker processes (``python -m densereward.rewards._math_worker``,
    each started on first use), each check with its own deadline: one that exceeds
    ``timeout_s`` gets its worker killed (restarted on the next check) and returns ``None``.
    With several workers the checks of a batch, and of concurrent callers (a reward server's
    requests), run side by side, so an answer that hangs SymPy holds one worker for
    ``timeout_s``, not every other check. Results are memoised in an LRU cache keyed by
    ``(reference, final answer)`` so the sparse reward and the reward-quality tracker share the
    work: each pair is checked once, a timeout included (SymPy hangs on the expression, so a
    second check would only wait again), and a caller that asks for a pair another caller is
    checking waits for that check. A crashed worker's result is not kept. The first timeout is
    logged with its fix (raise ``timeout_s``, ``reward.math_timeout_s`` in a config); later
    ones are counted in :attr:`n_timeouts` and logged at 10, 100, 1000, ... so a flood of
    hanging answers does not flood the log.

    Args:
        timeout_s: Wall-clock seconds per check (parse + verify), > 0.
        executor: ``"process"`` (default; enforces ``timeout_s``) or ``"inline"`` (runs in the
            calling thread with no timeout at all; for debugging or where processes cannot
            be spawned).
        cache_size: Entries kept in the result cache (0 disables it).
        workers: Worker processes, >= 1 (each ~100 MB; a check waits for a free one).
        answer_format: Where the final answer may be (:mod:`densereward.answers`): ``"auto"``
            (the last complete ``\\boxed{}``, else an explicit final-answer line),
            ``"boxed"`` (only a box; TRL ``accuracy_reward``'s strict convention) or
            ``"final_line"``.

    Raises:
        ConfigError: for a non-positive timeout or worker count, an unknown executor or answer
            format.

    Example:
        >>> checker = MathChecker(executor="inline")
        >>> checker.check(r"\\frac{1}{2}", r"So the answer is $\\boxed{0.5}$.").reward
        1.0
        >>> checker.check("18", "... so she makes $18 a day\\nA: 18").reward
        1.0
    """

    def __init__(
        self,
        *,
        timeout_s: float = 10.0,
        executor: Literal["process", "inline"] = "process",
        cache_size: int = 65536,
        answer_format: AnswerFormat = "auto",
        workers: int = 1,
    ) -> None:
        try:
            self.answer_format = check_answer_format(answer_format)
        except ValueError as exc:
            raise ConfigError(f"MathChecker {exc}") from None
        if timeout_s <= 0:
            raise ConfigError(f"MathChecker timeout_s must be > 0 seconds, got {timeout_s}")
        if executor not in ("process", "inline"):
            raise ConfigError(
                f"MathChecker executor must be 'process' or 'inline', got {executor!r}"
            )
        if int(workers) < 1:
            raise ConfigError(f"MathChecker workers must be >= 1, got {workers}")
        self.timeout_s = float(timeout_s)
        self.startup_timeout_s = 120.0
        self.executor = executor
        self.cache_size = int(cache_size)
        self.workers = int(workers)
        self._cache: OrderedDict[tuple[str, str], MathCheck] = OrderedDict()
        self._gold_cache: dict[str, Any] = {}
        self.n_timeouts = 0
        self.n_checks = 0
        self._fresh()

    def _fresh(self) -> None:
        """The lock, the worker slots (``None`` = not started) and the thread pool, all new."""
        self._lock = threading.Lock()
        self._slots: queue.SimpleQueue[_Worker | None] = queue.SimpleQueue()
        for _ in range(self.workers):
            self._slots.put(None)
        self._live: set[_Worker] = set()
        self._threads: concurrent.futures.ThreadPoolExecutor | None = None
        # (reference, answer) -> the check running for it now: a second caller waits for it
        self._inflight: dict[tuple[str, str], concurrent.futures.Future[MathCheck]] = {}

    # -- worker management -------------------------------------------------------------------
    @property
    def _proc(self) -> Any:
        """A running worker's process (``None`` when none runs)."""
        return next((w.proc for w in list(self._live) if w.proc.poll() is None), None)

    def close(self) -> None:
        """Stop the worker processes (they are restarted on the next check)."""
        for w in list(self._live):
            w.stop(graceful=True)
            self._live.discard(w)

    def __getstate__(self) -> dict[str, Any]:
        # picklable (a reward shipped to another process): the settings and the verdicts
        # cached so far; not the lock, the workers or the threads, which the copy creates
        # afresh (its workers start at its first check)
        state = self.__dict__.copy()
        for name in ("_lock", "_slots", "_live", "_threads", "_inflight"):
            state.pop(name, None)
        state["_gold_cache"] = {}  # parsed gold answers: rebuilt on demand
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.workers = int(state.get("workers", 1))
        self._fresh()

    def __del__(self) -> None:  # best effort; an orphaned worker also exits on stdin EOF
        try:  # noqa: SIM105 (module globals such as contextlib may be gone at interpreter exit)
            for w in list(self._live):
                w.stop()
        except Exception:
            pass

    def _remote(self, gold: str, completion: str) -> tuple[float | None, str, str | None]:
        """One check on a free worker, with its own deadline (waits for a free worker)."""
        worker = self._slots.get()
        try:
            if worker is None or worker.proc.poll() is not None:
                if worker is not None:
                    worker.stop()
                    self._live.discard(worker)
                worker = None
                worker = _Worker(self.startup_timeout_s)
                self._live.add(worker)
            try:
                out = worker.ask((gold, completion), self.timeout_s)
            except (EOFError, OSError, ValueError) as exc:
                worker.stop()
                return None, "", f"worker_error: {type(exc).__name__}"
            if out is not None:
                return out
            with self._lock:
                self.n_timeouts += 1
                n = self.n_timeouts
            self._say_timeout(n, completion)
            worker.stop()
            return None, "", "timeout"
        finally:
            self._slots.put(worker)

    def _say_timeout(self, n: int, answer: str) -> None:
        """Log the ``n``-th timeout: the first with the answer and the fix, then a count at
        10, 100, 1000, ... (each timeout is in :attr:`n_timeouts`)."""
        if n == 1:
            logger.warning(
                "math-verify check exceeded %.1f s on the answer %r; worker restarted, the reward "
                "abstains. If correct answers take this long, raise reward.math_timeout_s "
                "(MathChecker timeout_s); later timeouts are counted, logged at 10, 100, ...",
                self.timeout_s,
                answer[:80],
            )
        elif str(n).strip("0") == "1":  # n is 10, 100, 1000, ...
            logger.warning(
                "math-verify: %d checks have exceeded %.1f s so far (each abstained and restarted "
                "its worker); raise reward.math_timeout_s if correct answers take this long",
                n,
                self.timeout_s,
            )

    def _run(self, keys: list[tuple[str, str]]) -> list[tuple[float | None, str, str | None]]:
        """Check each ``(reference, answer)`` key: inline, or on the workers side by side."""
        if self.executor == "inline":
            from ._math_worker import check_one

            out = []
            with self._lock:  # the parsed-gold cache is shared
                for gold, answer in keys:
                    try:
                        out.append(check_one(gold, answer, self._gold_cache))
                    except Exception as exc:
                        out.append((None, "", f"worker_error: {type(exc).__name__}"))
            return out
        if self.workers == 1 or len(keys) == 1:
            return [self._remote(*k) for k in keys]
        with self._lock:
            if self._threads is None:
                self._threads = concurrent.futures.ThreadPoolExecutor(
                    self.workers, thread_name_prefix="math-verify"
                )
            pool = self._threads
        return list(pool.map(lambda k: self._remote(*k), keys))

    # -- public API ----------------------------------------------------------------------------
    def check(self, reference: str | None, completion: str) -> MathCheck:
        """Check one completion against one reference answer.

        The completion's final answer is extracted here (:func:`densereward.answers.extract_answer`
        with this checker's ``answer_format``); only that answer goes to Math-Verify.

        Args:
            reference: The reference final answer (e.g. ``"\\frac{14}{3}"`` or ``"18"``);
                ``None`` or empty abstains.
            completion: The completion text.

        Returns:
            A :class:`MathCheck` (``reward`` in ``{0.0, 1.0}`` or ``None``).
        """
        return self.check_batch([reference], [completion])[0]

    def check_batch(
        self, references: Sequence[str | None], completions: Sequence[str]
    ) -> list[MathCheck]:
        """Check ``completions[i]`` against ``references[i]`` for every ``i``.

        Args:
            references: ``(n,)`` reference answers.
            completions: ``(n,)`` completion texts.

        Returns:
            ``(n,)`` :class:`MathCheck` results, in order.

        Raises:
            DataError: if the two sequences differ in length.
        """
        check_lengths(completions=completions, references=references)
        out: list[MathCheck | None] = []
        misses: dict[tuple[str, str], list[int]] = {}  # checked by this call
        waits: dict[tuple[str, str], tuple[concurrent.futures.Future[MathCheck], list[int]]] = {}
        with self._lock:
            for i, (ref, comp) in enumerate(zip(references, completions, strict=True)):
                self.n_checks += 1
                out.append(None)
                if not isinstance(comp, str):
                    out[i] = MathCheck(None, "", "invalid_completion")
                    continue
                extracted = extract_answer(comp, self.answer_format)
                if ref is None or not str(ref).strip():  # no verdict; the answer is still found
                    out[i] = MathCheck(None, extracted.answer or "", "no_reference")
                    continue
                if extracted.answer is None:
                    out[i] = MathCheck(0.0, "", extracted.reason)
                    continue
                key = (str(ref), extracted.answer)
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
                    out[i] = hit
                elif key in misses:
                    misses[key].append(i)
                elif key in self._inflight:  # another caller is checking it: wait for that
                    waits.setdefault(key, (self._inflight[key], []))[1].append(i)
                else:
                    misses[key] = [i]
                    self._inflight[key] = concurrent.futures.Future()
        try:
            results = self._run(list(misses))  # outside the lock: other callers' checks go on
        except BaseException as exc:
            with self._lock:
                for key in misses:
                    self._inflight.pop(key).set_exception(exc)
            raise
        with self._lock:
            for key, res in zip(misses, results, strict=True):
                result = MathCheck(*res)
                # a timeout is kept (the expression hangs SymPy); a crashed worker's is not
                if self.cache_size > 0 and not str(result.reason).startswith("worker_error"):
                    self._cache[key] = result
                    if len(self._cache) > self.cache_size:
                        self._cache.popitem(last=False)
                self._inflight.pop(key).set_result(result)
                for i in misses[key]:
                    out[i] = result
        for running, at in waits.values():
            result = running.result()
            for i in at:
                out[i] = result
        return out  # type: ignore[return-value]


_DEFAULT_CHECKER: MathChecker | None = None
_DEFAULT_LOCK = threading.Lock()


def default_checker() -> MathChecker:
    """The process-wide shared :class:`MathChecker` (process executor, 10 s timeout)."""
    global _DEFAULT_CHECKER
    with _DEFAULT_LOCK:
        if _DEFAULT_CHECKER is None:
            _DEFAULT_CHECKER = MathChecker()
        return _DEFAULT_CHECKER


class MathCorrectnessReward:
    """TRL reward function: 1 if the completion's final answer equals the reference, else 0.

    Follows TRL's reward-function contract: called with keyword arguments ``prompts``,
    ``completions`` (conversational: lists of message dicts; or plain strings),
    ``completion_ids``, the dataset columns (``answer`` and/or ``solution``),
    ``trainer_state``, ``log_metric`` and ``log_extra``; returns one ``float | None`` per
    completion. Its ``__name__`` (``"math_correctness"``) becomes TRL's
    ``rewards/math_correctness/mean`` key.

    Args:
        checker: The :class:`MathChecker` to use (default: the shared process-wide one).
        answer_column: Dataset column with the reference answer.
        name: ``__name__`` shown by TRL.
        log_columns: Also add ``gold_answer`` / ``predicted_answer`` to the completions table.

    Returns (from ``__call__``):
        ``(len(completions),)`` rewards in ``{0.0, 1.0}``, ``None`` where the reference is
        unparseable or the check timed out (see the module docstring).

    Raises (from ``__call__``):
        DataError: if a per-completion column's length differs from ``len(completions)``.

    Example:
        >>> reward = MathCorrectnessReward(checker=MathChecker(executor="inline"))
        >>> reward(prompts=["1+1?", "1+1?"], completions=[r"\\boxed{2}", r"\\boxed{3}"], answer=["2", "2"])
        [1.0, 0.0]
    """

    thread_safe = True
    """Callable from several threads at once (the checker is): a reward server runs it
    without the lock its in-process model needs."""

    def __init__(
        self,
        *,
        checker: MathChecker | None = None,
        answer_column: str = "answer",
        name: str = "math_correctness",
        log_columns: bool = True,
    ) -> None:
        self.checker = checker
        self.answer_column = answer_column
        self.__name__ = name
        self.log_columns = log_columns
        self._audit: Any = None
        self._audit_index = 0

    def set_audit(self, audit: Any, index: int) -> None:
        """Report the verdicts to ``audit`` (:class:`~densereward.rewards.advantage.AdvantageAudit`)
        as component ``index``; the completing call logs ``verifier/advantage/*``."""
        self._audit, self._audit_index = audit, int(index)

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] = (),
        completion_ids: Sequence[Any] | None = None,
        log_extra: Any = None,
        log_metric: Any = None,
        **kwargs: Any,
    ) -> list[float | None]:
        check_trl(kwargs.get("trainer_state"))
        texts = completion_texts(completions)
        references = references_from_columns(kwargs, len(texts), self.answer_column)
        checker = self.checker or default_checker()
        results = checker.check_batch(references, texts)
        if log_extra is not None and self.log_columns:
            log_extra("gold_answer", [r if r is not None else "" for r in references])
            log_extra("predicted_answer", [c.predicted for c in results])
        rewards = self._rewards(results)
        if self._audit is not None:
            audit = self._audit.report(self._audit_index, rewards)
            if audit and log_metric is not None:
                for k, v in audit.items():
                    log_metric(f"verifier/{k}", v)
        return rewards

    def _rewards(self, results: Sequence[MathCheck]) -> list[float | None]:
        """This function's reward of each check: the verdict."""
        return [c.reward for c in results]


class AnswerFormatReward(MathCorrectnessReward):
    """TRL reward function: 1 if the completion states a final answer in the expected format.

    The format term of the seed paper's GRPO recipe, ``r = r_correct + r_format + beta *
    r_reasoning`` (Kwok et al. 2026, reinforcement-learning guide): 1.0 where the checker's
    answer policy (``answer_format``: a ``\\boxed{}`` or an answer line, after the last
    ``</think>``) finds a final answer, whether or not it is right; 0.0 where none is found;
    ``None`` for a completion that is not text and where the correctness check abstained on an
    item with a reference (a timeout: :attr:`MathCheck.abstained`). ``__name__``
    ``"answer_format"``.

    Example:
        >>> reward = AnswerFormatReward(checker=MathChecker(executor="inline"))
        >>> reward(prompts=["1+1?", "1+1?"], completions=["The answer is 3.", "two"], answer=["2", "2"])
        [1.0, 0.0]
    """

    def __init__(
        self,
        *,
        checker: MathChecker | None = None,
        answer_column: str = "answer",
        name: str = "answer_format",
    ) -> None:
        super().__init__(checker=checker, answer_column=answer_column, name=name, log_columns=False)

    def _rewards(self, results: Sequence[MathCheck]) -> list[float | None]:
        """1.0 where a final answer was found, 0.0 where none; ``None`` for non-text and where
        the correctness check abstained (:attr:`MathCheck.abstained`: a timeout found an answer
        it could not check; ``seed_recipe``'s row then abstains in every term)."""
        return [None if c.abstained else (1.0 if c.predicted else 0.0) for c in results]


def references_from_columns(
    columns: dict[str, Any], n: int, answer_column: str = "answer"
) -> list[str | None]:
    """Reference final answers from TRL's per-completion dataset columns.

    Uses ``columns[answer_column]`` (MATH's ``answer`` or GSM8K's ``#### N``); falls back to the
    last ``\\boxed{}`` of ``columns["solution"]``.

    Args:
        columns: The reward function's keyword arguments (dataset columns, each ``(n,)``).
        n: Number of completions.
        answer_column: Name of the answer column.

    Returns:
        ``(n,)`` references (``None`` where none exists).

    Raises:
        DataError: if neither column is present or a column's length is not ``n``.
    """
    answers = columns.get(answer_column)
    solutions = columns.get("solution")
    if answers is None and solutions is None:
        raise DataError(
            f"the reward function needs a dataset column {answer_column!r} (or 'solution') with the "
            "reference answer; load the data with densereward.data.load_tasks, which keeps it"
        )
    if answers is not None:
        check_lengths(completions=range(n), **{answer_column: answers})
    if solutions is not None:
        check_lengths(completions=range(n), solution=solutions)
    return [
        reference_answer(
            answers[i] if answers is not None else None,
            solutions[i] if solutions is not None else None,
        )
        for i in range(n)
    ]
