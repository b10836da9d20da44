"""Tournaments as generators: they yield the pairs of a batch and receive the preferences.

The schedules are pure; :class:`~densereward.verifier.Verifier` runs each yielded batch as
one compare plan. ``TableBackend`` (tests/test_verifier.py) grades ``quality=q`` texts
deterministically, so which pairs reach the model, and in what order, can be checked.
"""

from __future__ import annotations

import asyncio
import math
import re

import numpy as np
import pytest
from test_verifier import make

from densereward.cache import ScoreCache
from densereward.errors import ConfigError, DataError
from densereward.tournament import (
    aggregate,
    bradley_terry_preference,
    pivot_pairs,
    ppt_comparison_count,
    ppt_schedule,
    ring_pairs,
    round_robin_pairs,
    round_robin_schedule,
    run_ppt,
    run_round_robin,
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


# ---- Bradley-Terry and the schedules' pieces ---------------------------------------------------


def test_bradley_terry():
    assert bradley_terry_preference(0.5, 0.5) == 0.5
    assert bradley_terry_preference(1.0, 0.0, beta=1.0) == pytest.approx(1 / (1 + math.exp(-1)))
    assert bradley_terry_preference(0.0, 1.0, beta=10.0) == pytest.approx(1 / (1 + math.exp(10)))
    for a, b in [(0.9, 0.2), (0.3, 0.31), (0.0, 1.0)]:  # p(a > b) + p(b > a) = 1
        assert bradley_terry_preference(a, b) + bradley_terry_preference(b, a) == pytest.approx(1)
    # no overflow at extreme inverse temperatures: exactly 1 / 0 in the limit
    assert bradley_terry_preference(1.0, 0.0, beta=1e6) == 1.0
    assert bradley_terry_preference(0.0, 1.0, beta=1e6) == 0.0


def test_ppt_comparison_count_formula_and_small_n():
    assert ppt_comparison_count(0, 0) == ppt_comparison_count(1, 1) == 0
    assert ppt_comparison_count(2, 1) == 2 + 1  # ring (both slot orders) + the pivot pair
    assert [ppt_comparison_count(8, k) for k in range(4)] == [8, 15, 21, 26]
    # k = n - 1 pivots costs more than the n(n-1)/2 of a round robin (the ring is extra)
    assert ppt_comparison_count(6, 5) == 6 + 15 > len(round_robin_pairs(6))


@pytest.mark.parametrize("n", [2, 3, 7])
def test_ring_pairs_is_one_hamiltonian_cycle(n):
    ring = ring_pairs(n, np.random.default_rng(1))
    nxt = dict(ring)
    assert len(nxt) == n and sorted(nxt.values()) == list(range(n))
    node, visited = ring[0][0], []
    for _ in range(n):  # following the edges visits every candidate once, then closes
        visited.append(node)
        node = nxt[node]
    assert node == ring[0][0] and sorted(visited) == list(range(n))


def test_round_robin_pairs_are_every_unordered_pair_once():
    pairs = round_robin_pairs(5)
    assert len(pairs) == len(set(pairs)) == 10 and all(a < b for a, b in pairs)
    assert round_robin_pairs(1) == [] and round_robin_pairs(0) == []


def test_select_pivots_breaks_ties_by_index_and_ranks_undecided_last():
    pairs = [(0, 1), (1, 2), (2, 3), (3, 0)]
    # 0 and 2 win everything they play; 1 and 3 lose everything: ties broken by lower index
    assert select_pivots(4, 2, pairs, [1.0, 0.0, 1.0, 0.0]) == [0, 2]
    assert select_pivots(4, 3, pairs, [1.0, 0.0, 1.0, 0.0]) == [0, 2, 1]
    # candidate 1 has no decided comparison: below even a candidate that lost all of its games
    assert select_pivots(4, 4, pairs, [None, None, 1.0, 0.0]) == [0, 2, 3, 1]
    assert pivot_pairs(4, [0, 2]) == [(1, 0), (1, 2), (3, 0), (3, 2), (0, 2)]


def test_aggregate_counts_soft_wins_and_skips_abstentions():
    res = aggregate(4, [(0, 1), (0, 2), (1, 2), (2, 3)], [0.75, None, 0.5, None], pivots=[0])
    np.testing.assert_array_equal(res.wins, [0.75, 0.25 + 0.5, 0.5, 0.0])
    np.testing.assert_array_equal(res.counts, [1, 2, 1, 0])
    np.testing.assert_allclose(res.win_rate[:3], [0.75, 0.375, 0.5])
    assert np.isnan(res.win_rate[3])  # no decided comparison: NaN, never a neutral 0.5
    assert res.order == (0, 2, 1, 3) and res.winner == 0
    assert res.n_comparisons == 4 and res.n_abstained == 2 and res.pivots == (0,)
    tie = aggregate(3, [(0, 1), (1, 2), (0, 2)], [0.5, 0.5, 0.5])
    assert tie.order == (0, 1, 2) and tie.winner == 0
    with pytest.raises(ValueError):  # one preference per pair
        aggregate(2, [(0, 1)], [])


def test_round_robin_schedule_sizes():
    with pytest.raises(DataError, match="at least one candidate"):
        next(round_robin_schedule(0))
    alone = run_round_robin(1, lambda pairs: pytest.fail("nothing to compare"))
    assert alone.winner == 0 and alone.n_comparisons == 0 and alone.order == (0,)
    assert issubclass(DataError, ValueError)


def test_abstaining_compare_function_leaves_win_rates_undefined():
    res = run_ppt(4, 1, lambda pairs: [None] * len(pairs), seed=0)
    assert res.n_comparisons == res.n_abstained == ppt_comparison_count(4, 1)
    assert np.isnan(res.win_rate).all() and res.winner == 0 and res.order == (0, 1, 2, 3)


# ---- through the engine --------------------------------------------------------------------


@pytest.mark.parametrize("n,k", [(2, 1), (4, 1), (5, 2), (8, 2), (8, 0), (6, 6), (16, 3)])
def test_ppt_comparison_count(n, k):
    v, b = make(granularity=20)
    cands = [f"quality={(i * 7 % n) / n:.3f} id={i}" for i in range(n)]
    res = v.rank(problem="p", candidates=cands, pivots=k)
    assert res.n_comparisons == ppt_comparison_count(n, k) == n + k * (n - k) + k * (k - 1) // 2
    assert len(b.seen) == 2 * res.n_comparisons  # two reads (A and B) per comparison, no cache
    assert res.counts.sum() == 2 * res.n_comparisons


def test_ppt_equals_round_robin_with_dominant_candidate():
    v, _ = make(granularity=20)
    cands = [f"quality={q} id={i}" for i, q in enumerate([0.3, 0.2, 0.95, 0.4, 0.1, 0.35])]
    ppt = v.rank(problem="p", candidates=cands, pivots=2, seed=3)
    rr = v.rank(problem="p", candidates=cands, method="round_robin")
    assert ppt.winner == rr.winner == 2
    assert rr.n_comparisons == 15


def test_rank_deterministic_and_cache_invariant(tmp_path):
    cands = [f"quality={q} id={i}" for i, q in enumerate([0.3, 0.5, 0.52, 0.1, 0.7])]
    v0, _ = make(granularity=20)
    base = v0.rank(problem="p", candidates=cands, pivots=2, seed=7)
    cache = ScoreCache(tmp_path / "cache")
    v1, b1 = make(granularity=20, cache=cache)
    first = v1.rank(problem="p", candidates=cands, pivots=2, seed=7)
    v2, b2 = make(granularity=20, cache=cache)
    second = v2.rank(problem="p", candidates=cands, pivots=2, seed=7)
    assert len(b2.seen) == 0 and v2.stats.n_cache_hits > 0
    for r in (first, second):
        assert r.winner == base.winner and r.order == base.order
        np.testing.assert_array_equal(r.win_rate, base.win_rate)


def test_rank_errors_and_a_single_candidate():
    v, b = make(granularity=20)
    with pytest.raises(ConfigError, match="swiss"):
        v.rank(problem="p", candidates=["quality=0.1", "quality=0.2"], method="swiss")
    with pytest.raises(DataError, match="at least one candidate"):
        v.rank(problem="p", candidates=[])
    with pytest.raises(DataError, match=r"pivots must be in \[0, 2\]"):
        v.rank(problem="p", candidates=["quality=0.1", "quality=0.2"], pivots=3)
    alone = v.rank(problem="p", candidates=["quality=0.4"], pivots=1)
    assert alone.winner == 0 and alone.n_comparisons == 0
    assert b.usage.n_calls == 0  # none of these reached the model


def test_arank_matches_rank():
    cands = [f"quality={q} id={i}" for i, q in enumerate([0.6, 0.1, 0.8, 0.3])]
    v, _ = make(granularity=20)
    sync = v.rank(problem="p", candidates=cands, pivots=1, seed=2)
    asyn = asyncio.run(v.arank(problem="p", candidates=cands, pivots=1, seed=2))
    assert sync.order == asyn.order and sync.n_comparisons == asyn.n_comparisons
    np.testing.assert_array_equal(sync.win_rate, asyn.win_rate)
