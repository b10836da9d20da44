"""Verification-dynamics metrics: pure functions on arrays of scores and 0/1 labels.

Threshold metrics accept continuous scores: ``V = 1[score >= threshold]`` (default 0.5), or
``V = score`` with ``soft=True``. Undefined values are ``NaN`` (never 0 or 0.5); the one
per-item score here, a trajectory's Value-Order Correlation, is ``None`` when undefined (an
abstention, as a verifier's; :mod:`.progress`).
Learning-curve statistics (IQM, AUC, probability of improvement, steps to threshold) are in
:mod:`.curves`.
"""

from __future__ import annotations

from ._arrays import group_indices
from .bootstrap import bootstrap_ci, bootstrap_many, cluster_resamples, stratified_bootstrap_ci
from .classification import (
    accept,
    accuracy,
    auprc,
    auroc,
    balanced_accuracy,
    best_threshold,
    brier_score,
    calibrate_threshold,
    expected_calibration_error,
    f1,
    fnr,
    fpr,
    precision,
    recall,
    reliability_curve,
    tnr,
    tpr,
)
from .curves import (
    final_performance,
    iqm_ci,
    mean_curve_ci,
    normalized_auc,
    probability_of_improvement_ci,
    resample_curve,
    steps_to_threshold,
)
from .difficulty import (
    balanced_subsample,
    bin_labels,
    difficulty_bins,
    difficulty_quartiles,
    per_generator_balanced,
    per_group,
    problem_difficulty,
)
from .pairwise import mean_score_gap, pair_gaps, pairwise_accuracy, score_gap_snr, tie_rate
from .progress import mean_value_order_correlation, value_order_correlation
from .report import REPORT_KEYS, classification_report
from .similarity import (
    SELF_VERIFICATION_KEYWORDS,
    MiniLMEmbedder,
    cosine_similarity,
    self_verification_keyword_rate,
    solver_verifier_similarity,
)
from .tts import (
    gap_closed,
    mean_problem_pass_rate,
    precision_from_rates,
    simulate_rejection_sampling,
    tts_pass_rate,
    tts_verification_gain,
    verifier_gain,
    verifier_gain_from_rates,
)

__all__ = [
    "REPORT_KEYS",
    "SELF_VERIFICATION_KEYWORDS",
    "MiniLMEmbedder",
    "accept",
    "accuracy",
    "auprc",
    "auroc",
    "balanced_accuracy",
    "balanced_subsample",
    "best_threshold",
    "bin_labels",
    "bootstrap_ci",
    "bootstrap_many",
    "brier_score",
    "calibrate_threshold",
    "classification_report",
    "cluster_resamples",
    "cosine_similarity",
    "difficulty_bins",
    "difficulty_quartiles",
    "expected_calibration_error",
    "f1",
    "final_performance",
    "fnr",
    "fpr",
    "gap_closed",
    "group_indices",
    "iqm_ci",
    "mean_curve_ci",
    "mean_score_gap",
    "mean_problem_pass_rate",
    "mean_value_order_correlation",
    "normalized_auc",
    "pair_gaps",
    "pairwise_accuracy",
    "per_generator_balanced",
    "per_group",
    "precision",
    "precision_from_rates",
    "probability_of_improvement_ci",
    "problem_difficulty",
    "recall",
    "reliability_curve",
    "resample_curve",
    "score_gap_snr",
    "self_verification_keyword_rate",
    "simulate_rejection_sampling",
    "solver_verifier_similarity",
    "steps_to_threshold",
    "stratified_bootstrap_ci",
    "tie_rate",
    "tnr",
    "tpr",
    "tts_pass_rate",
    "tts_verification_gain",
    "value_order_correlation",
    "verifier_gain",
    "verifier_gain_from_rates",
]
