"""`densereward eval-progress`: scripted Fetch policies, the metrics, and the command end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from densereward.cli import main as cli_main
from densereward.errors import ConfigError
from densereward.eval_progress import EvalProgressConfig, progress_metrics, rollouts
from densereward.eval_progress.cli import build_configs

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["FetchReach-v4", "FetchPush-v4"])
def test_the_scripted_success_policy_succeeds_and_the_others_fail(env_id):
    cfg = EvalProgressConfig(env_id=env_id, episodes=3, seed=11, stride=10)
    eps = rollouts(cfg)
    got = {}
    for e in eps:
        got.setdefault(e.policy, []).append(e.success)
    assert got["success"] == [True, True, True], got
    for kind in ("short", "wrong", "random"):
        assert not any(got[kind]), (kind, got)
    # the same initial states for every policy: the first observation's goal repeats
    goals = {
        e.policy: [
            tuple(np.round(x.observations[0]["desired_goal"], 6))
            for x in eps
            if x.policy == e.policy
        ]
        for e in eps
    }
    assert len({tuple(v) for v in goals.values()}) == 1
    assert eps[0].reads == [0, 10, 20, 30, 40, 50]


def _rows(progress_by_episode, success, policy):
    rows = []
    for e, (vals, ok, pol) in enumerate(zip(progress_by_episode, success, policy, strict=True)):
        for t, v in enumerate(vals):
            rows.append(
                {
                    "episode": e,
                    "policy": pol,
                    "t": 5 * t,
                    "progress": v,
                    "success": ok,
                    "closeness": -10.0 + t if ok else -10.0,
                }
            )
    return rows


def test_metrics_voc_auroc_and_closeness_are_what_the_reads_give():
    rows = _rows(
        [[0.1, 0.4, 0.9], [0.2, 0.1, 0.3], [0.3, 0.3, 0.2], [0.5, 0.5, 0.5]],
        [True, True, False, False],
        ["success", "success", "random", "short"],
    )
    m = progress_metrics(rows, seconds=6.0)
    assert m["voc_per_episode"] == {"0": pytest.approx(1.0), "1": pytest.approx(0.5)}
    assert m["voc_mean"] == pytest.approx(0.75)
    # finals: success 0.9, 0.3; failed 0.2, 0.5 -> pairs (0.9>0.2, 0.9>0.5, 0.3>0.2, 0.3<0.5) = 3/4
    assert m["final_auroc"] == pytest.approx(0.75)
    assert m["mean_final_progress"] == {"success": pytest.approx(0.6), "random": 0.2, "short": 0.5}
    assert m["n_reads"] == 12 and m["n_abstained"] == 0 and m["reads_per_second"] == 2.0
    assert -1.0 <= m["closeness_spearman"] <= 1.0
    assert m["progress_range"] == [0.1, 0.9]
    # an abstained read is dropped from VOC and counted; constant reads give an undefined VOC
    rows[1]["progress"] = None
    rows[3:6] = [dict(r, progress=0.4) for r in rows[3:6]]
    m = progress_metrics(rows)
    assert m["n_abstained"] == 1 and m["n_voc_undefined"] == 1
    assert m["voc_per_episode"]["0"] == pytest.approx(1.0) and m["voc_mean"] == pytest.approx(1.0)
    # one class only: AUROC is undefined, never 0.5
    only_ok = [r for r in rows if r["success"]]
    assert progress_metrics(only_ok)["final_auroc"] is None


def test_nearly_constant_reads_lead_the_report(tmp_path):
    from densereward.eval_progress.cli import write_outputs

    rows = _rows([[0.52, 0.521, 0.522], [0.52, 0.52, 0.519]], [True, False], ["success", "random"])
    meta = {
        "env": "FetchReach-v4",
        "verifier": "v",
        "read": "pointwise",
        "episodes": "1",
        "machine": "m",
    }
    paths = write_outputs(tmp_path, rows, progress_metrics(rows), meta)
    text = paths["report"].read_text()
    assert "**The reads are nearly constant** (every read in [0.519, 0.522])" in text
    assert (tmp_path / "progress.png").stat().st_size > 5000
    rows = _rows([[0.1, 0.5, 0.9], [0.2, 0.2, 0.3]], [True, False], ["success", "random"])
    assert (
        "nearly constant"
        not in write_outputs(tmp_path, rows, progress_metrics(rows), meta)["report"].read_text()
    )


def test_settings_errors_name_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="read_mode 'votes'"):
        build_configs(None, ["read_mode=votes"], {})
    with pytest.raises(ConfigError, match="FetchReach-\\* and FetchPush-\\* only"):
        build_configs(None, [], {"env": "CartPole-v1"})
    with pytest.raises(ConfigError, match="policies"):
        build_configs(None, ["policies=[success, sideways]"], {})
    with pytest.raises(ConfigError, match="stroid"):
        build_configs(None, ["stroid=3"], {})
    cfg, v = build_configs(None, ["read_mode=complete", "verifier.granularity=20"], {"episodes": 2})
    assert cfg.episodes == 2 and v.granularity == 2  # complete reads P(complete) at G = 2
    # a bad value on the command line: exit status 2 and one line, no traceback
    assert cli_main(["eval-progress", "--out", str(tmp_path / "x"), "form=video"]) == 2
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["pointwise", "pairwise"])
def test_eval_progress_end_to_end_with_the_embedded_model(tmp_path, mode, capsys):
    out = tmp_path / mode
    argv = [
        "eval-progress",
        "--config",
        str(REPO / "configs/eval_progress_fetchreach.yaml"),
        "--episodes",
        "1",
        "--seed",
        "3",
        "--stride",
        "25",
        "--out",
        str(out),
        "verifier.model=null",
        "policies=[success, random]",
        f"read_mode={mode}",
    ]
    assert cli_main(argv) == 0
    assert "final-progress AUROC" in capsys.readouterr().out
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert [(r["policy"], r["t"]) for r in rows] == [
        ("success", 0),
        ("success", 25),
        ("success", 50),
        ("random", 0),
        ("random", 25),
        ("random", 50),
    ]
    assert all(0.0 <= r["progress"] <= 1.0 for r in rows)
    assert [r["success"] for r in rows] == [True] * 3 + [False] * 3
    assert all("gripper_target_cm" in r and r["text"].startswith("Gripper-target") for r in rows)
    metrics = json.loads((out / "metrics.json").read_text())
    again = progress_metrics(rows)  # anyone can recompute the numbers from scores.jsonl
    for key in ("voc_mean", "final_auroc", "closeness_spearman", "mean_final_progress"):
        assert again[key] == metrics[key], key
    assert metrics["meta"]["config"]["read_mode"] == mode
    assert "| final-progress AUROC" in (out / "report.md").read_text()
    assert (out / "progress.png").stat().st_size > 5000
