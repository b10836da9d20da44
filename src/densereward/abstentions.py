"""Why verifier reads abstained, counted, and the warning said once when most of them do.

A read that abstains (``ScoreResult.value is None``) is never replaced by a neutral score; in
training it falls out of the reward (GRPO: the completion's dense reward is ``None``; SAC: the
shaping holds the last potential). A verifier that abstains on nearly every read therefore
leaves the dense reward silently empty. :class:`AbstentionAlarm` watches windows of reads and
returns one warning, the first time at least half of a window abstained, with the reasons
counted and the fix for each.

A reason's *kind* is its text before the first ``:`` (the engine writes
``"low score-token mass: 0.41 < min_mass 0.5"``, ``"backend error: TimeoutError"``).

>>> alarm = AbstentionAlarm("progress reads", min_reads=4)
>>> alarm.observe(2, ["low score-token mass: 0.41 < min_mass 0.5"])
>>> print(alarm.observe(2, ["low score-token mass: 0.38 < min_mass 0.5", "backend error: X"]))
... # doctest: +ELLIPSIS
3 of 4 progress reads abstained: low score-token mass 2, backend error 1 (e.g. 'low score-token mass: 0.41 < min_mass 0.5'); fix: ...
>>> alarm.observe(4, ["empty response"] * 4) is None  # said once
True
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from .errors import ConfigError

__all__ = ["reason_kind", "count_reasons", "format_reason_counts", "AbstentionAlarm", "FIXES"]

NO_REASON = "no reason given"

FIXES = {
    "low score-token mass": (
        "the verifier model puts less than verifier.min_mass of its next-token probability on "
        "the score letters, so it is not answering in the score format; check one read with "
        "`densereward score` (it prints the mass), use a model that follows the prompt, or "
        "lower verifier.min_mass only if its reads are otherwise sound"
    ),
    "no probability mass on score tokens": (
        "no score letter was among the tokens the backend returned; use a backend that returns "
        "the score tokens' log-probabilities (or more of its top log-probabilities) or another "
        "verifier.model"
    ),
    "backend error": (
        "the verifier backend failed (the log says how); check verifier.model / backend_options.base_url, or "
        "set verifier.on_error=raise to stop at the first failure"
    ),
    NO_REASON: (
        "the progress function returned None without a reason; check what it reads "
        "(the describer's state text) and its own log"
    ),
}
"""Reason kind -> the fix the warning names (other kinds get :data:`_GENERIC_FIX`)."""

_GENERIC_FIX = "see the reason above; the verifier's stats (n_abstained, n_low_mass) count them"


def reason_kind(reason: str | None) -> str:
    """The kind of an abstention reason: the text before its first ``:`` (values dropped).

    A reason that joins several (``"a: 1; b: 2"``, several reads of one score) gives their
    kinds joined by ``" + "``.

    >>> reason_kind("low score-token mass: 0.0123 < min_mass 0.999"), reason_kind(None)
    ('low score-token mass', 'no reason given')
    """
    if not reason:
        return NO_REASON
    return " + ".join(sorted({part.split(":", 1)[0].strip() for part in reason.split("; ")}))


def count_reasons(reasons: Iterable[str | None]) -> dict[str, int]:
    """Reason kind -> count, most frequent first (ties in order of first appearance).

    >>> count_reasons(["backend error: X", "empty response", "backend error: Y"])
    {'backend error': 2, 'empty response': 1}
    """
    return dict(Counter(reason_kind(r) for r in reasons).most_common())


def format_reason_counts(counts: dict[str, int]) -> str:
    """``"low score-token mass 9, backend error 1"``."""
    return ", ".join(f"{kind} {n}" for kind, n in counts.items())


class AbstentionAlarm:
    """Say once when at least ``fraction`` of a window of reads abstained.

    Reads are taken in windows of at least ``min_reads`` (a window closes at the first call
    that brings it to ``min_reads``; a step's reads are never split), so one stray abstention
    among few reads does not trip it. The first window that trips it returns the warning; the
    alarm is silent afterwards.

    Args:
        what: the reads, as the message names them (``"verifier progress reads"``).
        min_reads: reads per window (>= 1).
        fraction: the share of abstained reads that trips the alarm, in ``(0, 1]``.

    Raises:
        ConfigError: on ``min_reads < 1`` or ``fraction`` outside ``(0, 1]``.
    """

    def __init__(
        self, what: str = "verifier reads", *, min_reads: int = 8, fraction: float = 0.5
    ) -> None:
        if min_reads < 1 or not 0.0 < fraction <= 1.0:
            raise ConfigError(
                f"min_reads must be >= 1 and fraction in (0, 1], got {min_reads}, {fraction}"
            )
        self.what = what
        self.min_reads = min_reads
        self.fraction = fraction
        self.fired = False
        self._n = 0
        self._reasons: list[str | None] = []

    def observe(self, n_reads: int, abstained: Sequence[str | None]) -> str | None:
        """Add one call's reads; the warning the first time a window trips, else ``None``.

        Args:
            n_reads: reads in this call (abstained ones included).
            abstained: the reason of each read that abstained (``None`` = not given).
        """
        if self.fired:
            return None
        self._n += n_reads
        self._reasons += list(abstained)
        if self._n < self.min_reads:
            return None
        n, reasons = self._n, self._reasons
        self._n, self._reasons = 0, []
        if len(reasons) < self.fraction * n:
            return None
        self.fired = True
        counts = count_reasons(reasons)
        example = next((r for r in reasons if r), None)
        kinds = dict.fromkeys(part for kind in counts for part in kind.split(" + "))
        fixes = "; ".join(dict.fromkeys(FIXES.get(k, _GENERIC_FIX) for k in kinds))
        return (
            f"{len(reasons)} of {n} {self.what} abstained: {format_reason_counts(counts)}"
            + (f" (e.g. {example!r})" if example else "")
            + f"; fix: {fixes}"
        )
