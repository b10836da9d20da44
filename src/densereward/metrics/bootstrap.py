"""Bootstrap confidence intervals: the project's two resampling schemes, each in one place.

- Cluster bootstrap (:func:`bootstrap_many`, :func:`bootstrap_ci`, :func:`cluster_resamples`):
  responses to the same problem are correlated, so problems are resampled with replacement and
  a resampled problem keeps all its responses (percentile interval, Efron & Tibshirani 1993;
  cluster resampling, Field & Welsh 2007). With no groups every row is its own cluster, which is
  how learning-curve bands resample whole runs.
- Stratified bootstrap over runs (:func:`stratified_bootstrap_ci`): rliable's, for scores of
  shape ``(n_runs, n_tasks)`` (Agarwal et al. 2021), behind the IQM and
  probability-of-improvement intervals of :mod:`densereward.metrics.curves`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from types import ModuleType

import numpy as np

from ..errors import DataError
from ._arrays import group_codes

__all__ = [
    "bootstrap_ci",
    "bootstrap_many",
    "cluster_resamples",
    "rliable_modules",
    "stratified_bootstrap_ci",
]

NAN = float("nan")


def bootstrap_many(
    fns: Mapping[str, Callable[..., float]],
    *arrays: Sequence | np.ndarray,
    groups: Sequence[Hashable] | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    pass_groups: Sequence[str] = (),
) -> dict[str, dict[str, float]]:
    """Percentile bootstrap intervals of several statistics on the same resamples.

    Args:
        fns: name -> statistic, called as ``fn(*resampled_arrays)``; the names listed in
            ``pass_groups`` also get the resampled group ids (int array, ``(m,)``) as the last
            positional argument (for per-problem metrics such as ``tts_pass_rate``).
        *arrays: aligned arrays, each of shape ``(n,)``.
        groups: cluster id of each row, ``(n,)``; ``None`` resamples rows independently.
            Resampled clusters get fresh ids, so a problem drawn twice counts twice.
        n_resamples: bootstrap replicates B >= 1.
        confidence: interval mass in ``(0, 1)``.
        seed: RNG seed.
        pass_groups: names of the statistics that take the group ids.

    Returns:
        name -> ``{"value": statistic on the full data, "low", "high", "n_resamples": defined
        replicates}``; ``low``/``high`` are ``NaN`` when fewer than half the replicates are
        defined (e.g. TNR on resamples without incorrect responses).

    Raises:
        DataError: on length mismatch or bad parameters.
    """
    if not arrays:
        raise DataError("bootstrap needs at least one array")
    arrs = [np.asarray(a) for a in arrays]
    n = len(arrs[0])
    if any(len(a) != n for a in arrs) or (groups is not None and len(groups) != n):
        raise DataError("bootstrap: all arrays (and groups) must have the same length")
    if not 0 < confidence < 1 or n_resamples < 1:
        raise DataError("bootstrap: confidence must be in (0, 1) and n_resamples >= 1")
    codes = group_codes(groups) if groups is not None else np.arange(n)

    def call(name: str, sample: list[np.ndarray], ids: np.ndarray) -> float:
        v = fns[name](*sample, ids) if name in pass_groups else fns[name](*sample)
        return NAN if v is None else float(v)

    values = {k: call(k, arrs, codes) for k in fns}
    stats: dict[str, list[float]] = {k: [] for k in fns}
    for idx, ids in cluster_resamples(codes, n_resamples=n_resamples, seed=seed):
        sample = [a[idx] for a in arrs]
        for k in fns:
            v = call(k, sample, ids)
            if not math.isnan(v):
                stats[k].append(v)
    alpha = (1.0 - confidence) / 2.0
    out = {}
    for k in fns:
        if len(stats[k]) < max(1, n_resamples // 2):
            low = high = NAN
        else:
            low, high = (float(q) for q in np.quantile(stats[k], [alpha, 1.0 - alpha]))
        out[k] = {"value": values[k], "low": low, "high": high, "n_resamples": float(len(stats[k]))}
    return out


def cluster_resamples(
    codes: Sequence[int] | np.ndarray, *, n_resamples: int, seed: int = 0
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The replicates of the cluster bootstrap: which rows each one draws.

    Every replicate draws as many clusters as there are, with replacement, from
    ``numpy.random.default_rng(seed)`` (one ``integers`` call per replicate) and keeps all rows
    of a drawn cluster.

    Args:
        codes: cluster code of each row, ints in ``[0, n_clusters)``, shape ``(n,)``
            (``group_codes`` of the group ids); ``np.arange(n)`` resamples rows.
        n_resamples: replicates B; none when ``n == 0``.
        seed: RNG seed.

    Yields:
        ``(idx, ids)`` per replicate: row indices into the data, shape ``(m,)`` (``m = n`` when
        every cluster is one row), and fresh cluster ids ``(m,)`` (a cluster drawn twice gets
        two ids).

    >>> [idx.tolist() for idx, _ in cluster_resamples([0, 0, 1], n_resamples=2, seed=0)]
    [[2, 2], [2, 0, 1]]
    """
    codes = np.asarray(codes, dtype=int)
    if codes.size == 0:
        return
    order = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    n_clusters = sizes.size
    rng = np.random.default_rng(seed)
    for _ in range(n_resamples):
        picks = rng.integers(0, n_clusters, size=n_clusters)
        sz = sizes[picks]
        total = int(sz.sum())
        offsets = np.repeat(starts[picks] - (np.cumsum(sz) - sz), sz) + np.arange(total)
        yield order[offsets], np.repeat(np.arange(n_clusters), sz)


def bootstrap_ci(
    fn: Callable[..., float],
    *arrays: Sequence | np.ndarray,
    groups: Sequence[Hashable] | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    pass_groups: bool = False,
) -> dict[str, float]:
    """Percentile bootstrap interval of ``fn(*arrays)`` (see :func:`bootstrap_many`).

    Returns:
        ``{"value", "low", "high", "n_resamples"}``.

    Raises:
        DataError: on length mismatch or bad parameters.

    >>> ci = bootstrap_ci(lambda x: float(np.mean(x)), np.r_[np.zeros(50), np.ones(50)], n_resamples=200)
    >>> ci["value"], ci["low"] < 0.5 < ci["high"]
    (0.5, True)
    """
    return bootstrap_many(
        {"stat": fn},
        *arrays,
        groups=groups,
        n_resamples=n_resamples,
        confidence=confidence,
        seed=seed,
        pass_groups=("stat",) if pass_groups else (),
    )["stat"]


def rliable_modules() -> tuple[ModuleType, ModuleType]:
    """rliable's ``library`` and ``metrics`` modules, imported on first use.

    Raises:
        ImportError: naming the extra to install when rliable is missing.
    """
    try:
        from rliable import library, metrics
    except ImportError as exc:
        raise ImportError(
            "the learning-curve statistics (IQM, probability of improvement, stratified "
            "bootstrap) need rliable: pip install 'densereward[compare]'"
        ) from exc
    return library, metrics


def stratified_bootstrap_ci(
    fn: Callable[..., float],
    *scores: np.ndarray,
    n_bootstrap: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """Percentile stratified-bootstrap interval of ``fn(*scores)`` (Agarwal et al. 2021, Sec. 4).

    A thin wrapper of ``rliable.library.get_interval_estimates``: each score matrix has shape
    ``(n_runs, n_tasks)``; the runs of every task (column) are resampled with replacement
    (``StratifiedBootstrap`` for one matrix, ``StratifiedIndependentBootstrap`` -- each matrix
    independently -- for several, e.g. the two sides of a probability of improvement).
    Needs ``rliable`` (``pip install densereward[compare]``).

    Args:
        fn: statistic of the score matrices, e.g. ``rliable.metrics.aggregate_iqm`` or
            ``rliable.metrics.probability_of_improvement``; returns a scalar.
        *scores: one or more matrices ``(n_runs, n_tasks)`` (run counts may differ).
        n_bootstrap: replicates B.
        confidence: interval coverage in ``(0, 1)``.
        seed: seed of the bootstrap; the interval depends on it alone (see below).

    Returns:
        ``{"value": fn on the data, "low", "high", "n_runs": runs of the first matrix}``.

    Raises:
        DataError: for an empty matrix, a non-2-D input, a matrix of one run of several tasks
            (the seeds and tasks swapped: rliable#20; see below) or bad parameters.
        ImportError: without rliable (``pip install densereward[compare]``).

    The runs must be the rows. Given the seeds of one task as one row, ``(1, n_seeds)``, the
    bootstrap resamples the one run within each "task" and every replicate equals the data: the
    interval collapses to zero width (google-research/rliable#20). That orientation is refused;
    ``n`` runs of one task are ``(n, 1)``.

    >>> from rliable import metrics
    >>> r = stratified_bootstrap_ci(metrics.aggregate_iqm, np.array([[0.1], [0.5], [0.9]]),
    ...                             n_bootstrap=200)
    >>> round(r["value"], 3), 0.1 <= r["low"] <= r["value"] <= r["high"] <= 0.9
    (0.5, True)
    """
    import warnings

    rly, _ = rliable_modules()
    mats = [np.asarray(s, dtype=float) for s in scores]
    if not mats or any(m.ndim != 2 or m.shape[0] == 0 for m in mats):
        raise DataError("stratified_bootstrap_ci needs non-empty (n_runs, n_tasks) matrices")
    for m in mats:
        if m.shape[0] == 1 and m.shape[1] > 1:
            raise DataError(
                f"stratified_bootstrap_ci got one run of {m.shape[1]} tasks, shape {m.shape}: "
                "runs are resampled within each task, so the interval would have zero width. "
                f"If these are {m.shape[1]} runs (seeds) of one task, pass shape "
                f"({m.shape[1]}, 1) (rliable#20)"
            )
    if not 0.0 < confidence < 1.0 or n_bootstrap < 1:
        raise DataError("confidence must be in (0, 1) and n_bootstrap >= 1")
    data = mats[0] if len(mats) == 1 else tuple(mats)

    def statistic(*m: np.ndarray) -> np.ndarray:
        return np.atleast_1d(np.asarray(fn(*m), dtype=float))

    # rliable 1.2's StratifiedBootstrap.update_indices draws from the *global* np.random
    # (np.random.choice), ignoring the random_state it is given; seed the global generator for
    # the call and put its state back, so the interval depends on ``seed`` alone and the
    # caller's random stream is untouched.
    global_state = np.random.get_state()
    np.random.seed(seed)
    with warnings.catch_warnings():
        # arch 7 deprecates the ``random_state`` argument rliable passes; same numbers
        warnings.filterwarnings(
            "ignore", message="random_state is deprecated", category=FutureWarning
        )
        try:
            point, interval = rly.get_interval_estimates(
                {"x": data},
                statistic,
                method="percentile",
                reps=n_bootstrap,
                confidence_interval_size=confidence,
                random_state=np.random.RandomState(seed),
            )
        finally:
            np.random.set_state(global_state)
    low, high = (float(v) for v in np.asarray(interval["x"], dtype=float).reshape(2, -1)[:, 0])
    value = float(np.asarray(point["x"], dtype=float).ravel()[0])
    return {"value": value, "low": low, "high": high, "n_runs": int(mats[0].shape[0])}
