"""The distilled progress reward: the Bradley-Terry fit, the `distill` command, the reward model
read by `eval-progress --reward-model`, and the `distilled` SAC reward kind."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from densereward.cli import main as cli_main
from densereward.distill import DistillConfig, collect_states, select_texts
from densereward.errors import ConfigError, DataError
from densereward.reward_model import FitConfig, fit_reward_model, load_reward_model

REPO = Path(__file__).resolve().parents[1]


def _linear_pairs(n_states=300, n_pairs=400, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_states, 6)).astype(np.float32)
    score = x @ np.array([1.0, -2.0, 0.5, 0.0, 0.0, 1.5])
    pairs = []
    for _ in range(n_pairs):
        i, j = rng.choice(n_states, size=2, replace=False)
        pairs.append((int(i), int(j), float(1 / (1 + np.exp(-(score[i] - score[j]))))))
    return x, score, pairs


def test_the_bradley_terry_fit_recovers_the_order_of_a_known_score(tmp_path):
    from scipy.stats import spearmanr

    x, score, pairs = _linear_pairs()
    model, res = fit_reward_model(x, pairs, config=FitConfig(members=2, epochs=150))
    assert spearmanr(model.raw(x), score).statistic > 0.97
    assert res.val_agreement is not None and res.val_agreement > 0.9
    phi = model.potential(x)
    assert phi.min() == 0.0 and phi.max() == 1.0 and phi.shape == (300,)
    # shuffled labels (the negative control) leave nothing to recover
    rng = np.random.default_rng(1)
    labels = rng.permutation([p for *_, p in pairs])
    shuffled = [(i, j, p) for (i, j, _), p in zip(pairs, labels, strict=True)]
    control, _ = fit_reward_model(x, shuffled, config=FitConfig(members=1, epochs=150))
    assert abs(spearmanr(control.raw(x), score).statistic) < 0.5
    # saved and loaded: the same potentials; the NumPy forward is the torch one
    model.save(tmp_path / "rm")
    again = load_reward_model(tmp_path / "rm")
    np.testing.assert_allclose(again.potential(x), phi, atol=1e-6)
    import torch

    z = torch.from_numpy(np.clip((x - model.mean) / model.std, -5, 5).astype(np.float32))
    with torch.no_grad():
        t = torch.stack([m(z)[:, 0] for m in model.members]).mean(0).numpy()
    np.testing.assert_allclose(model.raw(x), t, atol=1e-5)


def test_reward_model_errors_name_the_problem(tmp_path):
    x, _, pairs = _linear_pairs(n_states=20, n_pairs=10)
    with pytest.raises(DataError, match="preferences in \\[0, 1\\]"):
        fit_reward_model(x, [(0, 1, 1.5)])
    with pytest.raises(DataError, match="at least one pair"):
        fit_reward_model(x, [])
    model, _ = fit_reward_model(x, pairs, config=FitConfig(members=1, epochs=5))
    with pytest.raises(DataError, match="takes 6 features, got 3"):
        model.potential(np.zeros((2, 3)))
    with pytest.raises(ConfigError, match="not a reward model directory"):
        load_reward_model(tmp_path)
    with pytest.raises(ConfigError, match="fit.val_fraction"):
        FitConfig(val_fraction=0.7)
    with pytest.raises(ConfigError, match="labels 'both'"):
        DistillConfig(labels="both")


def _oracle_reads(out: Path, cfg: DistillConfig) -> None:
    """reads.jsonl of an oracle labeller: progress = the text's mean true closeness, scaled to
    [0, 1] (what a perfect pointwise reader of the text would say)."""
    states = collect_states(cfg)
    close: dict[str, list[float]] = {}
    for text, c in zip(states.texts, states.closeness.tolist(), strict=True):
        close.setdefault(text, []).append(c)
    lo = min(np.mean(v) for v in close.values())
    hi = max(np.mean(v) for v in close.values())
    out.mkdir(parents=True)
    with (out / "reads.jsonl").open("w") as fh:
        for text in select_texts(states, cfg.texts, cfg.seed):
            v = (np.mean(close[text]) - lo) / (hi - lo)
            fh.write(json.dumps({"text": text, "progress": float(v), "seconds": 0.0}) + "\n")


@pytest.mark.slow
def test_distill_fits_resumed_reads_and_eval_progress_reads_the_model(tmp_path, capsys):
    """Every text already read (an oracle labeller's reads.jsonl): the command loads no
    verifier, fits, saves; eval-progress --reward-model on unseen seeds orders FetchPush
    progress; SAC's `distilled` kind shapes with it."""
    out = tmp_path / "rm"
    overrides = [
        "labels=pointwise",
        "texts=120",
        "episodes=3",
        "pairs=300",
        "expand=8",
        "fit.members=2",
    ]
    cfg = DistillConfig(
        env_id="FetchPush-v4", episodes=3, labels="pointwise", texts=120, pairs=300, expand=8
    )
    _oracle_reads(out, cfg)
    argv = [
        "distill",
        "--config",
        str(REPO / "configs/distill_fetchpush.yaml"),
        "--out",
        str(out),
        *overrides,
    ]
    assert cli_main(argv) == 0
    captured = capsys.readouterr()
    assert "pointwise labels: 120 reads" in captured.out
    assert "to read with" not in captured.err  # resumed: no verifier loaded
    summary = json.loads((out / "summary.json").read_text())
    assert summary["labels"]["read_spearman_closeness"] > 0.99
    assert summary["fit"]["val_agreement"] > 0.8
    assert "state texts read" in (out / "report.md").read_text()

    ep = tmp_path / "ep"
    argv = [
        "eval-progress",
        "--config",
        str(REPO / "configs/eval_progress_fetchpush.yaml"),
        "--reward-model",
        str(out),
        "--episodes",
        "2",
        "--seed",
        "3000",
        "--out",
        str(ep),
        "--no-plots",
    ]
    assert cli_main(argv) == 0
    m = json.loads((ep / "metrics.json").read_text())
    assert m["n_reads"] > 0 and m["n_abstained"] == 0
    assert m["closeness_spearman"] > 0.6, m
    assert "reward model" in m["meta"]["verifier"] and m["meta"]["verifier_config"] is None

    from densereward.envs import make_env
    from densereward.wrappers import RewardModelShaping

    env = make_env(
        "FetchPush-v4",
        reward="distilled",
        base="sparse",
        reward_model=str(out),
        gamma=0.9,
        monitor=False,
    )
    model = load_reward_model(out)
    obs, _ = env.reset(seed=5)
    phi = float(model.potential(obs)[0])
    obs2, r, *_, info = env.step(env.action_space.sample())
    phi2 = float(model.potential(obs2)[0])
    assert info["shaping"] == pytest.approx(0.9 * phi2 - phi)
    assert r == pytest.approx(float(info["is_success"]) + 0.9 * phi2 - phi)
    assert isinstance(env, RewardModelShaping) and env.n_calls == 2


def test_the_distilled_kind_needs_its_model():
    from densereward.trainers.sac_config import EnvConfig

    with pytest.raises(ConfigError, match="env.reward_model"):
        EnvConfig(id="FetchPush-v4", reward="distilled")
    with pytest.raises(ConfigError, match="not 'distilled'"):
        EnvConfig(id="FetchPush-v4", reward="distilled", base="distilled", reward_model="x")


@pytest.mark.slow
def test_distill_refuses_labels_without_a_preference(tmp_path, capsys):
    """The embedded 135M prefers neither state text (margins ~0.01): nothing is fitted, exit 3,
    one line with the reason and the fix; the reads stay for a rerun."""
    argv = [
        "distill",
        "--config",
        str(REPO / "configs/distill_fetchpush.yaml"),
        "--out",
        str(tmp_path / "rm"),
        "labels=pairwise",
        "pairs=4",
        "episodes=1",
        "verifier.model=null",
        "policies=[success, random]",
        "batch_size=4",
    ]
    assert cli_main(argv) == 3
    err = capsys.readouterr().err
    assert "preferred neither state" in err and "Fix:" in err
    assert not (tmp_path / "rm" / "reward_model.pt").exists()
    assert len((tmp_path / "rm" / "labels.jsonl").read_text().splitlines()) == 4
