"""Tournaments as generators: they yield the pairs of a batch and receive the preferences.

The schedules are pure; :class:`~densereward.verifier.Verifier` runs each yielded batch as
one compare plan. ``TableBackend`` (tests/test_verifier.py) grades ``quality=q`` texts
deterministically, so which pairs reach the model, and in what order, can be checked.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_verifier import make

from densereward.tournament import (
    pivot_pairs,
    ppt_comparison_count,
    ppt_schedule,
    round_robin_schedule,
    run_ppt,
    run_tournament,
    select_pivots,
)


def _by_quality(quality):
    """A compare function: ``p(a > b)`` = 1 if a's quality is higher, 0.5 on ties."""

    def compare(pairs):
        return [
            1.0 if quality[a] > quality[b] else 0.5 if quality[a] == quality[b] else 0.0
            for a, b in pairs
        ]

    return compare


@pytest.mark.parametrize("n,k", [(2, 1), (5, 2), (8, 0), (6, 6), (9, 3)])
def test_ppt_yields_the_ring_then_the_pivot_pairs(n, k):
    sched = ppt_schedule(n, k, seed=4)
    ring = next(sched)
    assert len(ring) == n
    assert sorted(a for a, _ in ring) == sorted(b for _, b in ring) == list(range(n))
    quality = np.random.default_rng(0).permutation(n)
    prefs = _by_quality(quality)(ring)
    try:
        rest = sched.send(prefs)
    except StopIteration as done:  # nothing left to compare (k = 0)
        assert k == 0
        result = done.value
    else:
        pivots = select_pivots(n, k, ring, prefs)  # the top-k by mean preference in the ring
        assert rest == pivot_pairs(n, pivots)
        assert all(b in pivots for a, b in rest) and len(rest) == k * (n - k) + k * (k - 1) // 2
        with pytest.raises(StopIteration) as done:
            sched.send(_by_quality(quality)(rest))
        result = done.value.value
    assert result.n_comparisons == ppt_comparison_count(n, k)


def test_same_seed_same_ring_and_run_tournament_matches_a_hand_driven_schedule():
    quality = [0.3, 0.9, 0.1, 0.5, 0.7]
    assert next(ppt_schedule(5, 2, seed=11)) == next(ppt_schedule(5, 2, seed=11))
    assert next(ppt_schedule(5, 2, seed=11)) != next(ppt_schedule(5, 2, seed=12))
    compare = _by_quality(quality)
    via_driver = run_tournament(ppt_schedule(5, 2, seed=11), compare)
    assert via_driver.winner == 1 and via_driver.order == run_ppt(5, 2, compare, seed=11).order
    rr = run_tournament(round_robin_schedule(5), compare)
    assert rr.order == (1, 4, 3, 0, 2) and rr.n_comparisons == 10


def test_bad_sizes_raise_before_any_pair_is_yielded():
    with pytest.raises(ValueError, match="at least one candidate"):
        next(ppt_schedule(0, 0))
    with pytest.raises(ValueError, match=r"pivots must be in \[0, 3\]"):
        next(ppt_schedule(3, 4))
    with pytest.raises(StopIteration):  # one candidate: decided without a comparison
        next(ppt_schedule(1, 0))


@pytest.mark.parametrize("method", ["ppt", "round_robin"])
def test_verifier_sends_each_yielded_batch_to_the_model_once_in_order(method):
    """The engine compares exactly the pairs the schedule yields, batch by batch, in order."""
    v, backend = make(granularity=20, batch_size=64)
    quality = [0.2, 0.8, 0.45, 0.6, 0.05, 0.9]
    cands = [f"quality={q} id={i}" for i, q in enumerate(quality)]
    result = v.rank(problem="p", candidates=cands, pivots=2, method=method, seed=5)
    n_calls, seen = backend.usage.n_calls, list(backend.seen)

    # The pairs the model saw, in order: each comparison is two reads (A, then B) of one
    # prompt that shows the pair's first candidate in slot A.
    shown = []
    for p in seen[::2]:
        user = p.messages[-1]["content"]
        a = re.search(r'<response id="A">\nquality=[0-9.]+ id=(\d+)', user).group(1)
        b = re.search(r'<response id="B">\nquality=[0-9.]+ id=(\d+)', user).group(1)
        shown.append((int(a), int(b)))

    expected, prefs = [], []
    sched = ppt_schedule(6, 2, seed=5) if method == "ppt" else round_robin_schedule(6)
    try:
        pairs = next(sched)
        while True:
            expected += pairs
            res = v.compare_batch(
                problems=["p"] * len(pairs),
                a=[cands[a] for a, _ in pairs],
                b=[cands[b] for _, b in pairs],
            )
            prefs += [r.preference for r in res]
            pairs = sched.send([r.preference for r in res])
    except StopIteration as done:
        by_hand = done.value
    assert shown == expected
    assert n_calls == (2 if method == "ppt" else 1)  # one model call per batch, no replays
    assert result.order == by_hand.order and result.winner == 5
    np.testing.assert_array_equal(result.win_rate, by_hand.win_rate)
