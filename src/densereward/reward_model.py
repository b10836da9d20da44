"""A learned progress reward: a small Bradley-Terry network on the raw observation.

The verifier is read on a bounded number of state pairs ("which state is closer to completing
the task?", both orders); :func:`fit_reward_model` distils those preferences into an ensemble
of small MLPs ``r(s)`` with the Bradley-Terry likelihood ``P(a > b) = sigmoid(r(a) - r(b))``
(Bradley & Terry 1952; the reward-model loss of Christiano et al. 2017, Motif (Klissarov et al.
2023) and RL-VLM-F (Wang et al. 2024), here with soft labels). Read as a potential, ``r`` costs
microseconds a state where a verifier read costs seconds.

:class:`RewardModel` maps ``r`` to a potential ``Phi(s)`` in ``[0, 1]`` by the 2nd-98th
percentile range of ``r`` over the states it was fitted on (clipped), an increasing map, so
orderings (VOC, AUROC) are those of ``r``. Saved as one directory: ``reward_model.pt`` (the
members' weights) and ``reward_model.json`` (shapes, normalisation, calibration and the
provenance of the labels). Needs torch and NumPy only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ConfigError, DataError

__all__ = [
    "RewardModel",
    "FitConfig",
    "FitResult",
    "obs_vector",
    "fit_reward_model",
    "load_reward_model",
    "MODEL_FILE",
    "META_FILE",
]

MODEL_FILE = "reward_model.pt"
META_FILE = "reward_model.json"
_STD_FLOOR = 1e-2
"""Floor of the per-feature standard deviation used to normalise (constant features)."""
_CLIP = 5.0
"""Normalised features are clipped to +-5, as SB3's ``VecNormalize`` (HER paper) does."""


def obs_vector(obs: Any, keys: Sequence[str] | None = None) -> np.ndarray:
    """One observation (or a batch) as a flat float32 vector.

    Args:
        obs: a ``Box`` observation (array), or a ``Dict`` one (mapping of arrays; Fetch:
            ``observation``, ``achieved_goal``, ``desired_goal``). A batch has a leading axis.
        keys: for a mapping, the keys in order; ``None`` = sorted keys.

    Returns:
        ``(D,)`` or, for a batch, ``(N, D)`` float32: the mapping's arrays concatenated.
    """
    if isinstance(obs, Mapping):
        keys = sorted(obs) if keys is None else list(keys)
        parts = [np.asarray(obs[k], dtype=np.float32) for k in keys]
        batch = parts[0].ndim > 1
        return np.concatenate(
            [p.reshape(p.shape[0], -1) if batch else p.reshape(-1) for p in parts], axis=-1
        )
    return np.asarray(obs, dtype=np.float32)


@dataclass(frozen=True)
class FitConfig:
    """How the Bradley-Terry ensemble is fitted (YAML section ``fit:`` of ``densereward distill``).

    Attributes:
        hidden: hidden layer widths of each member (ReLU MLP).
        members: ensemble size; each member is fitted on a bootstrap resample of the label
            pairs, and ``r`` is the members' mean.
        epochs: full-batch Adam epochs at most per member.
        learning_rate: Adam's step size.
        weight_decay: L2 weight (AdamW).
        val_fraction: share of the labelled pairs held out for early stopping and the
            reported agreement, in ``[0, 0.5)``.
        patience: epochs without a better held-out loss before a member stops.
        seed: seed of the split, the resamples and the initialisation.
    """

    hidden: tuple[int, ...] = (64, 64)
    members: int = 5
    epochs: int = 400
    learning_rate: float = 3e-3
    weight_decay: float = 1e-3
    val_fraction: float = 0.2
    patience: int = 40
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if not self.hidden or min(self.hidden) < 1:
            raise ConfigError(f"fit.hidden must be positive widths, got {list(self.hidden)}")
        if self.members < 1 or self.epochs < 1 or self.patience < 1:
            raise ConfigError("fit.members, fit.epochs and fit.patience must be >= 1")
        if not 0.0 <= self.val_fraction < 0.5:
            raise ConfigError(f"fit.val_fraction must be in [0, 0.5), got {self.val_fraction}")
        if not (self.learning_rate > 0 and self.weight_decay >= 0):
            raise ConfigError("fit.learning_rate must be > 0 and fit.weight_decay >= 0")


def _mlp(d_in: int, hidden: Sequence[int]) -> Any:
    import torch

    layers: list[Any] = []
    for h in hidden:
        layers += [torch.nn.Linear(d_in, h), torch.nn.ReLU()]
        d_in = h
    layers.append(torch.nn.Linear(d_in, 1))
    return torch.nn.Sequential(*layers)


@dataclass
class RewardModel:
    """An ensemble of Bradley-Terry reward networks on the raw observation, read as a potential.

    Attributes:
        members: the fitted ``torch.nn.Sequential`` networks (``(N, D) -> (N, 1)``).
        keys: the observation's mapping keys in order (``None`` for a ``Box`` observation).
        mean, std: ``(D,)`` feature normalisation of the fitted states.
        lo, hi: the 2nd and 98th percentile of ``r`` over the fitted states: the ends of the
            potential's ``[0, 1]``.
        meta: provenance (environment, verifier, labels, fit metrics), saved as is.
    """

    members: list[Any]
    keys: list[str] | None
    mean: np.ndarray
    std: np.ndarray
    lo: float = 0.0
    hi: float = 1.0
    meta: dict[str, Any] = field(default_factory=dict)
    _np: Any = field(default=None, repr=False, compare=False)

    def raw(self, obs: Any) -> np.ndarray:
        """``r(s)``, the members' mean Bradley-Terry strength: ``(N,)`` float64 for a batch
        of ``N`` observations (a mapping of ``(N, ...)`` arrays or an ``(N, D)`` array), or
        ``(1,)`` for one observation.

        The forward pass runs in NumPy on weights copied once from the members (tens of
        microseconds for a state, where a torch call costs about a millisecond of overhead).

        Raises:
            DataError: when the observation has another number of features.
        """
        x = obs_vector(obs, self.keys)
        if x.ndim == 1:
            x = x[None, :]
        if x.shape[1] != self.mean.shape[0]:
            raise DataError(
                f"the reward model takes {self.mean.shape[0]} features, got {x.shape[1]} "
                f"(keys {self.keys}): another environment's observations?"
            )
        h = np.clip((x - self.mean) / self.std, -_CLIP, _CLIP).astype(np.float32)
        out = np.zeros(len(h), dtype=np.float64)
        for layers in self._weights():
            z = h
            for k, (w, b) in enumerate(layers):
                z = z @ w + b
                if k < len(layers) - 1:
                    z = np.maximum(z, 0.0)
            out += z[:, 0]
        return out / len(self.members)

    def _weights(self) -> list[list[tuple[np.ndarray, np.ndarray]]]:
        if getattr(self, "_np", None) is None:
            import torch

            self._np = [
                [
                    (layer.weight.detach().numpy().T.copy(), layer.bias.detach().numpy().copy())
                    for layer in m
                    if isinstance(layer, torch.nn.Linear)
                ]
                for m in self.members
            ]
        return self._np

    def potential(self, obs: Any) -> np.ndarray:
        """``Phi(s)`` in ``[0, 1]``: ``(r(s) - lo) / (hi - lo)``, clipped; ``(N,)`` float64."""
        span = self.hi - self.lo
        return np.clip((self.raw(obs) - self.lo) / (span if span > 0 else 1.0), 0.0, 1.0)

    def save(self, directory: str | Path) -> Path:
        """Write ``reward_model.pt`` and ``reward_model.json`` into ``directory`` (atomically)."""
        import torch

        from .io import atomic_write_json

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / (MODEL_FILE + ".tmp")
        torch.save([m.state_dict() for m in self.members], tmp)
        tmp.replace(out / MODEL_FILE)
        atomic_write_json(
            out / META_FILE,
            {
                "format": 1,
                "keys": self.keys,
                "n_features": int(self.mean.shape[0]),
                "hidden": [
                    layer.out_features
                    for layer in self.members[0]
                    if isinstance(layer, torch.nn.Linear)
                ][:-1],
                "mean": self.mean.tolist(),
                "std": self.std.tolist(),
                "lo": self.lo,
                "hi": self.hi,
                "meta": self.meta,
            },
        )
        return out


def load_reward_model(directory: str | Path) -> RewardModel:
    """Load a :class:`RewardModel` saved by :meth:`RewardModel.save` (``densereward distill``).

    Raises:
        ConfigError: when the directory or either file is missing or unreadable, naming it.
    """
    import torch

    d = Path(directory)
    meta_path, model_path = d / META_FILE, d / MODEL_FILE
    if not meta_path.is_file() or not model_path.is_file():
        raise ConfigError(
            f"{d} is not a reward model directory (needs {META_FILE} and {MODEL_FILE}; "
            "`densereward distill` writes one)"
        )
    try:
        info = json.loads(meta_path.read_text())
        states = torch.load(model_path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - a corrupt file: say which
        raise ConfigError(f"cannot read the reward model in {d}: {type(e).__name__}: {e}") from e
    members = []
    for sd in states:
        m = _mlp(int(info["n_features"]), info["hidden"])
        m.load_state_dict(sd)
        m.eval()
        members.append(m)
    return RewardModel(
        members=members,
        keys=info["keys"],
        mean=np.asarray(info["mean"], dtype=np.float32),
        std=np.asarray(info["std"], dtype=np.float32),
        lo=float(info["lo"]),
        hi=float(info["hi"]),
        meta=dict(info.get("meta") or {}),
    )


@dataclass
class FitResult:
    """What :func:`fit_reward_model` measured: held-out agreement and the losses."""

    n_pairs: int
    n_val: int
    train_loss: float
    val_loss: float | None
    val_agreement: float | None
    """Share of held-out pairs with a clear label (``|p - 0.5| >= 0.1``) whose order ``r``
    reproduces; ``None`` without such pairs."""
    epochs: list[int]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fit_members(
    cfg: FitConfig,
    d_in: int,
    z: Any,
    idx: np.ndarray,
    p: np.ndarray,
    tr: np.ndarray,
    va: np.ndarray,
    rng: np.random.Generator,
) -> tuple[list[Any], list[int], list[float]]:
    """Fit ``cfg.members`` networks, each on a bootstrap resample of the training pairs ``tr``,
    early-stopped on the held-out pairs ``va``; returns them, their best epochs and losses."""
    import torch

    def loss_of(net: Any, rows: np.ndarray) -> Any:
        r = net(z)[:, 0]
        logits = r[idx[rows, 0]] - r[idx[rows, 1]]
        target = torch.from_numpy(p[rows])
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, target)

    members, epochs, train_losses = [], [], []
    for _ in range(cfg.members):
        boot = rng.choice(tr, size=len(tr), replace=True)
        net = _mlp(d_in, cfg.hidden)
        opt = torch.optim.AdamW(
            net.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay
        )
        best, best_state, best_epoch, since = math.inf, None, 0, 0
        for epoch in range(cfg.epochs):
            net.train()
            opt.zero_grad()
            loss = loss_of(net, boot)
            loss.backward()
            opt.step()
            net.eval()
            with torch.no_grad():
                watch = float(loss_of(net, va)) if len(va) else float(loss)
            if watch < best - 1e-5:
                best, best_epoch, since = watch, epoch + 1, 0
                best_state = {k: v.clone() for k, v in net.state_dict().items()}
            else:
                since += 1
                if since >= cfg.patience:
                    break
        if best_state is not None:
            net.load_state_dict(best_state)
        net.eval()
        members.append(net)
        epochs.append(best_epoch)
        with torch.no_grad():
            train_losses.append(float(loss_of(net, tr)))
    return members, epochs, train_losses


def fit_reward_model(
    states: np.ndarray,
    pairs: Sequence[tuple[int, int, float]],
    *,
    groups: Sequence[int] | None = None,
    keys: Sequence[str] | None = None,
    config: FitConfig | None = None,
    meta: Mapping[str, Any] | None = None,
) -> tuple[RewardModel, FitResult]:
    """Fit the Bradley-Terry ensemble to soft pairwise preferences.

    Args:
        states: ``(N, D)`` observation vectors (:func:`obs_vector`).
        pairs: ``(i, j, p)``: ``p`` in ``[0, 1]`` is the labeller's probability that state
            ``i`` is further along than state ``j``.
        groups: per pair, the id of the verifier read it comes from (pairs of states that
            share their texts share a read); the held-out split is by group, so no read is on
            both sides. ``None`` = one group per pair.
        keys: the observation keys (:func:`obs_vector`) saved with the model.
        config: :class:`FitConfig`.
        meta: provenance stored in the model (``meta["fit"]`` is added).

    Returns:
        ``(model, result)``.

    Raises:
        DataError: without pairs, with an index outside ``states``, or a ``p`` outside
            ``[0, 1]``.
    """
    import torch

    cfg = config or FitConfig()
    x = np.asarray(states, dtype=np.float32)
    if x.ndim != 2 or not len(pairs):
        raise DataError(f"need (N, D) states and at least one pair, got {x.shape}, {len(pairs)}")
    idx = np.asarray([(int(i), int(j)) for i, j, _ in pairs], dtype=np.int64)
    p = np.asarray([float(q) for _, _, q in pairs], dtype=np.float32)
    if idx.min() < 0 or idx.max() >= len(x) or not np.all((p >= 0) & (p <= 1)):
        raise DataError("pair indices must be in [0, N) and preferences in [0, 1]")
    grp = np.arange(len(p)) if groups is None else np.asarray(groups)
    rng = np.random.default_rng(cfg.seed)
    ids = np.unique(grp)
    n_val_groups = int(round(cfg.val_fraction * len(ids)))
    val_ids = set(rng.choice(ids, size=n_val_groups, replace=False).tolist())
    is_val = np.asarray([g in val_ids for g in grp])
    mean = x.mean(0)
    std = np.maximum(x.std(0), _STD_FLOOR)
    z = torch.from_numpy(np.clip((x - mean) / std, -_CLIP, _CLIP).astype(np.float32))
    tr, va = np.flatnonzero(~is_val), np.flatnonzero(is_val)
    torch.manual_seed(cfg.seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny full-batch steps: more threads only wait on each other
    try:
        members, epochs, train_losses = _fit_members(cfg, x.shape[1], z, idx, p, tr, va, rng)
    finally:
        torch.set_num_threads(threads)

    model = RewardModel(members, list(keys) if keys is not None else None, mean, std)
    r = model.raw(x)
    model.lo, model.hi = (float(v) for v in np.percentile(r, [2, 98]))
    val_loss = val_agree = None
    if len(va):
        d = r[idx[va, 0]] - r[idx[va, 1]]
        q = p[va].astype(np.float64)
        val_loss = float(np.mean(np.logaddexp(0, -d) * q + np.logaddexp(0, d) * (1 - q)))
        clear = np.abs(q - 0.5) >= 0.1
        if clear.any():
            val_agree = float(np.mean((d[clear] > 0) == (q[clear] > 0.5)))
    result = FitResult(
        len(p), int(len(va)), float(np.mean(train_losses)), val_loss, val_agree, epochs
    )
    model.meta = {**dict(meta or {}), "fit": {**asdict(cfg), **result.as_dict()}}
    return model, result
