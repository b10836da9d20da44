"""Reward functions for TRL's GRPOTrainer: Math-Verify correctness, verifier rewards, tracking, data."""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from densereward.errors import DataError
from densereward.rewards import (
    MathChecker,
    MathCorrectnessReward,
    RewardConfig,
    RewardQualityTracker,
    build_reward_funcs,
    extract_boxed,
    reference_answer,
    reward_quality_metrics,
)
from densereward.rewards._common import completion_texts, group_slices


@pytest.fixture(scope="module")
def checker():
    c = MathChecker(timeout_s=5.0)
    yield c
    c.close()


@pytest.fixture(scope="module")
def math500(data_dir: Path) -> list[dict]:
    with open(data_dir / "math500" / "test.jsonl") as f:
        return [json.loads(line) for line in f]


def _conv(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


# ---- answer extraction ---------------------------------------------------------------------


def test_extract_boxed_nested_and_last():
    assert extract_boxed(r"first \boxed{1} then \boxed{\frac{a}{b^{2}}} end") == r"\frac{a}{b^{2}}"
    assert extract_boxed(r"\boxed{unclosed") is None


def test_reference_answer_gsm8k_and_math(data_dir: Path):
    row = json.loads((data_dir / "gsm8k" / "test.jsonl").open().readline())
    assert reference_answer(row["answer"]) == "18"
    assert reference_answer(None, r"so it is $\boxed{\frac{14}{3}}$") == r"\frac{14}{3}"


# ---- Math-Verify correctness on real MATH-500 answers --------------------------------------


def test_math500_boxed_reference_answers_are_correct(checker, math500):
    rows = math500[:40]
    refs = [r["answer"] for r in rows]
    right = checker.check_batch(
        refs, [f"Reasoning...\nThe final answer is $\\boxed{{{a}}}$." for a in refs]
    )
    # the reference solutions themselves end in \boxed{answer}
    sols = checker.check_batch(refs, [r["solution"] for r in rows])
    assert [c.reward for c in right] == [1.0] * len(rows)
    assert (
        sum(c.reward == 1.0 for c in sols) >= 38
    )  # a couple of MATH solutions box an intermediate form
    wrong = checker.check_batch(
        refs, [r"\boxed{" + refs[(i + 1) % len(refs)] + "}" for i in range(len(refs))]
    )
    assert sum(c.reward == 0.0 for c in wrong) >= 37  # a few neighbouring answers coincide


@pytest.mark.parametrize(
    ("gold", "completion", "expected"),
    [
        (r"\frac{1}{2}", r"$\boxed{0.5}$", 1.0),
        (r"\frac{14}{3}", r"$\boxed{\dfrac{14}{3}}$", 1.0),
        (r"\left( 3, \frac{\pi}{2} \right)", r"\boxed{(3, \pi/2)}", 1.0),
        ("18", "so she makes 18 dollars. The answer is 18.", 1.0),
        ("18", r"\boxed{19}", 0.0),
        ("18", "I am not sure.", 0.0),  # present but no extractable answer -> 0 (documented)
        ("", r"\boxed{1}", None),  # no reference -> abstain
    ],
)
def test_equivalent_forms_and_edge_cases(checker, gold, completion, expected):
    assert checker.check(gold, completion).reward == expected


def test_checker_works_off_the_main_thread(checker):
    results = []
    t = threading.Thread(
        target=lambda: results.append(checker.check(r"\sqrt{2}", r"\boxed{2^{1/2}}"))
    )
    t.start()
    t.join(timeout=60)
    assert results and results[0].reward == 1.0
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda k: checker.check(str(k), rf"\boxed{{{k}}}").reward, range(8)))
    assert outs == [1.0] * 8
    assert asyncio.run(asyncio.to_thread(checker.check, "7", r"\boxed{7}")).reward == 1.0


@pytest.mark.slow
def test_timeout_kills_worker_without_signals():
    c = MathChecker(timeout_s=1.0)
    try:
        out = []
        t = threading.Thread(target=lambda: out.append(c.check("5", r"\boxed{9^{9^{9^{9}}}}")))
        t.start()
        t.join(timeout=60)
        assert out[0].reward is None and out[0].reason == "timeout"
        assert c.n_timeouts == 1
        assert c.check("5", r"\boxed{5}").reward == 1.0  # the worker was restarted
    finally:
        c.close()


HANGING = [rf"\boxed{{{b}^{{{b}^{{{b}^{{{b}}}}}}}}}" for b in (9, 8, 7)]
"""Answers that really hang Math-Verify (SymPy evaluates the power tower)."""


@pytest.mark.slow
def test_a_hanging_answer_is_checked_once_and_a_timeout_flood_is_counted_not_logged(caplog):
    """F8: ``serve`` logged "math-verify check exceeded 1.0 s" twice per hanging item: the sparse
    reward and the reward-quality tracker each checked it (a timeout was not remembered, and
    two checks at once both ran), so each cost two timeouts. Now one (reference, answer) is
    checked once -- again later, or by a caller at the same time, it reads the same abstention --
    and the first timeout is logged with its fix, later ones counted (at 10, 100, ...)."""
    import logging

    c = MathChecker(timeout_s=1.0, workers=2)
    try:
        with caplog.at_level(logging.WARNING, logger="densereward.rewards.math"):
            with ThreadPoolExecutor(2) as pool:  # the reward and the tracker, side by side
                both = list(pool.map(lambda _: c.check("5", HANGING[0]), range(2)))
            again = c.check("5", HANGING[0])  # the tracker after the reward
            assert [r.reason for r in [*both, again]] == ["timeout"] * 3
            assert c.n_timeouts == 1
            for answer in HANGING[1:]:
                assert c.check("5", answer).reason == "timeout"
            assert c.n_timeouts == 3
            assert c.check("5", r"\boxed{5}").reward == 1.0
        lines = [r.getMessage() for r in caplog.records if r.name == "densereward.rewards.math"]
        assert len(lines) == 1, lines
        assert "exceeded 1.0 s" in lines[0] and "math_timeout_s" in lines[0]
    finally:
        c.close()


def test_inline_executor_matches():
    c = MathChecker(executor="inline")
    assert c.check("3", r"\boxed{3}").reward == 1.0
    with pytest.raises(ValueError, match="executor"):
        MathChecker(executor="thread")  # type: ignore[arg-type]


# ---- TRL reward contract -------------------------------------------------------------------


def test_sparse_reward_conversational_and_plain(checker):
    reward = MathCorrectnessReward(checker=checker)
    assert reward.__name__ == "math_correctness"
    extra: dict[str, list] = {}
    out = reward(
        prompts=[[{"role": "user", "content": "q"}]] * 3,
        completions=[_conv(r"\boxed{4}"), _conv(r"\boxed{5}"), _conv("no idea")],
        completion_ids=[[1], [2], [3]],
        answer=["4", "4", "4"],
        trainer_state=None,
        log_metric=lambda k, v: None,
        log_extra=lambda k, v: extra.__setitem__(k, v),
    )
    assert out == [1.0, 0.0, 0.0]
    assert extra["gold_answer"] == ["4"] * 3 and extra["predicted_answer"][0] == "4"
    # plain strings; a bare answer is its own final answer, a number in prose is not one
    plain = [r"\boxed{4}", "4", "I think it is 4 maybe"]
    assert reward(prompts=["q"] * 3, completions=plain, answer=["4"] * 3) == [1.0, 1.0, 0.0]


def test_length_mismatch_raises(checker):
    reward = MathCorrectnessReward(checker=checker)
    with pytest.raises(ValueError, match="length mismatch"):
        reward(prompts=["q"] * 2, completions=[r"\boxed{1}", r"\boxed{2}"], answer=["1"])
    with pytest.raises(ValueError, match="answer"):
        reward(prompts=["q"], completions=["x"])  # no reference column at all


def test_completion_texts_joins_multi_message_completions():
    texts = completion_texts(
        [
            [
                {"role": "assistant", "content": "a"},
                {"role": "tool", "content": "t"},
                {"role": "assistant", "content": [{"type": "text", "text": "b"}]},
            ]
        ]
    )
    assert texts == ["a\nb"]


def test_group_slices_cut_repeated_prompts():
    p = [[{"role": "user", "content": "x"}]] * 4 + [[{"role": "user", "content": "y"}]] * 2
    assert group_slices(p, 2) == [slice(0, 2), slice(2, 4), slice(4, 6)]
    assert group_slices(p) == [slice(0, 4), slice(4, 6)]


@pytest.mark.slow  # imports trl
def test_reward_config_and_build(checker):
    funcs, weights = build_reward_funcs(
        RewardConfig(type="mixed", weights=[1.0, 0.5]), lambda: None, checker=checker
    )
    assert [f.__name__ for f in funcs] == ["math_correctness", "verifier_dense"] and weights == [
        1.0,
        0.5,
    ]
    funcs, _ = build_reward_funcs(
        RewardConfig(type="sparse"),
        lambda: None,
        tracker=RewardQualityTracker(None),
        checker=checker,
    )
    assert [f.__name__ for f in funcs] == ["math_correctness", "verifier_monitor"]
    funcs, _ = build_reward_funcs(
        RewardConfig(type="group", use_async=True), lambda: None, checker=checker
    )
    from trl.trainer.utils import get_callable_name, is_async_callable

    assert get_callable_name(funcs[0]) == "verifier_group" and is_async_callable(funcs[0])
    with pytest.raises(ValueError, match="reward.weights does not apply to reward.type=dense"):
        RewardConfig(type="dense", weights=[1.0, 1.0])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"reference_prompt": "fuzzy"}, "reference_prompt='fuzzy'; use anchored | answer_match"),
        (
            {"reference_guided": True, "reference_prompt": "answer_match", "guard_prompt": True},
            "guard_prompt needs the response",
        ),
        ({"injection_penalty": -0.1}, r"injection_penalty must be in \[0, 1\]"),
        ({"verifier_input": "thinking"}, "use final_answer | full"),
        ({"group_method": "swiss"}, "group_method='swiss'; use ppt | round_robin"),
        ({"pivots": 0}, "pivots must be >= 1"),
    ],
)
def test_one_validation_for_config_and_reward_classes(kwargs, match):
    """RewardConfig (YAML) and the reward classes built directly reject the same options with the
    same check; the config's message names the YAML field (reward.*)."""
    from densereward.errors import ConfigError
    from densereward.rewards import GroupVerifierReward, VerifierReward

    with pytest.raises(ConfigError, match="reward." + match):
        RewardConfig(**kwargs)
    cls_kwargs = dict(kwargs)
    if "group_method" in cls_kwargs:
        cls_kwargs["method"] = cls_kwargs.pop("group_method")
        match = match.replace("group_method", "method")
    cls = GroupVerifierReward if {"method", "pivots"} & set(cls_kwargs) else VerifierReward
    with pytest.raises(ConfigError, match=match):
        cls(lambda: None, **cls_kwargs)


# ---- reward-quality tracking ---------------------------------------------------------------


def test_reward_quality_metrics_values():
    scores = [0.9, 0.8, 0.3, 0.1, 0.6, 0.6, None, 0.2]
    correct = [1, 1, 0, 0, 0, 0, 1, 1]
    levels = [1, 1, 2, 2, 1, 1, 2, 2]
    m = reward_quality_metrics(
        scores,
        correct,
        groups=[slice(0, 4), slice(4, 8)],
        levels=levels,
        masses=[0.5] * 6 + [None, 0.7],
        min_per_class=1,  # the formulas; MIN_PER_CLASS has its own test
    )
    # valid: idx 0..5,7 -> positives 0,1,7 (accepted 0,1) ; negatives 2,3,4,5 (rejected 2,3)
    assert m["tpr"] == pytest.approx(2 / 3) and m["tnr"] == pytest.approx(0.5)
    assert m["precision"] == pytest.approx(0.5)
    assert m["pass_rate"] == pytest.approx(0.5) and m["verifier_gain"] == pytest.approx(0.5 - 3 / 7)
    assert m["n_abstained"] == 1.0 and m["mean_mass"] == pytest.approx((0.5 * 6 + 0.7) / 7)
    assert m["frac_zero_spread_sparse"] == 0.0 and m["frac_zero_spread_dense"] == 0.0
    assert m["tie_rate"] == pytest.approx(1 / (6 + 3))  # 6 pairs in group 1, 3 in group 2 (one tie)
    assert m["tpr/level_1"] == 1.0 and m["tnr/level_1"] == 0.0 and m["tnr/level_2"] == 1.0
    # AUROC: positives 0.9, 0.8, 0.2 against negatives 0.3, 0.1, 0.6, 0.6 win 4 + 4 + 1 of 12 pairs
    assert m["auroc"] == pytest.approx(9 / 12)


def test_tracker_logs_records_and_plots(tmp_path):
    tracker = RewardQualityTracker(tmp_path, threshold=0.5, min_per_class=1)
    metrics: dict[str, list] = {}
    extra: dict[str, list] = {}

    class State:
        global_step = 0

    for step in range(3):
        State.global_step = step
        tracker.update(
            prompts=["a", "a", "b", "b"],
            scores=[0.9, 0.1, 0.7, None],
            correct=[1, 0, 1, 1],
            levels=[3, 3, 5, 5],
            masses=[0.4, 0.5, 0.6, None],
            num_generations=2,
            trainer_state=State,
            log_metric=lambda k, v: metrics.setdefault(k, []).append(v),
            log_extra=lambda k, v: extra.setdefault(k, []).extend(v),
        )
    rows = [
        json.loads(line) for line in (tmp_path / "reward_quality.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[0]["verifier/tpr"] == 1.0 and rows[0]["verifier/tnr"] == 1.0
    assert (
        rows[0]["verifier/tnr/level_5"] is None
    )  # no negatives at level 5 -> undefined (NaN -> null)
    assert "verifier/tnr/level_5" not in metrics  # undefined metrics are not sent to log_metric
    assert len(metrics["verifier/balanced_accuracy"]) == 3
    assert math.isnan(extra["verifier_score"][3]) and extra["ground_truth"][:2] == [1.0, 0.0]
    png = tracker.plot()
    assert png is not None and png.stat().st_size > 5000


def test_tracker_auto_threshold_is_chosen_on_earlier_batches_and_windows_roll(tmp_path):
    import numpy as np

    from densereward.metrics import best_threshold

    tracker = RewardQualityTracker(tmp_path, window=6, min_per_class=1)  # threshold: auto
    batches = [  # (scores, correct): the verifier ranks well but scores everything below 0.5
        ([0.30, 0.10, 0.20, 0.15], [1, 0, 0, 0]),
        ([0.35, 0.12, 0.28, 0.05], [1, 0, 1, 0]),
        ([0.40, 0.33, 0.08, 0.22], [1, 1, 0, 0]),
    ]
    for step, (s, c) in enumerate(batches):
        tracker.update(
            prompts=["p", "p", "q", "q"],
            scores=s,
            correct=c,
            num_generations=2,
            trainer_state=type("S", (), {"global_step": step}),
        )
    rows = [
        json.loads(line) for line in (tmp_path / "reward_quality.jsonl").read_text().splitlines()
    ]
    # batch 1: no earlier batch -> chosen on the batch itself (flagged)
    assert rows[0]["verifier/threshold_in_sample"] == 1.0 and rows[0]["verifier/threshold"] == 0.30
    # batch 3: Youden's J on batches 1-2 only, applied out of sample
    past_s, past_y = batches[0][0] + batches[1][0], batches[0][1] + batches[1][1]
    t3 = best_threshold(past_s, past_y)["threshold"]
    assert (
        rows[2]["verifier/threshold"] == pytest.approx(t3)
        and rows[2]["verifier/threshold_in_sample"] == 0.0
    )
    assert rows[2]["verifier/tpr"] == pytest.approx(np.mean(np.array([0.40, 0.33]) >= t3))
    assert rows[2]["threshold_source"].startswith("auto")
    # the window holds the last 6 labelled completions (batch 2's last two and batch 3)
    assert rows[2]["verifier/window/n_read"] == 6.0 and rows[0]["verifier/window/n_read"] == 4.0
    w_s = np.array(batches[1][0][2:] + batches[2][0])
    w_y = np.array(batches[1][1][2:] + batches[2][1])
    assert rows[2]["verifier/window/read_pass_rate"] == pytest.approx(w_y.mean())
    assert rows[2]["verifier/window/score_gap"] == pytest.approx(
        w_s[w_y == 1].mean() - w_s[w_y == 0].mean()
    )
    # a fixed threshold of 0.5 accepts nothing here: TNR 1, TPR 0 -- the degenerate report auto avoids
    fixed = RewardQualityTracker(None, threshold=0.5, min_per_class=1)
    m = fixed.update(prompts=["p"] * 4, scores=batches[1][0], correct=batches[1][1])
    assert m["verifier/tpr"] == 0.0 and m["verifier/threshold"] == 0.5
    # one class only so far: auto has nothing to calibrate on -> rates undefined, not 0 or 1
    m = RewardQualityTracker(None).update(prompts=["p"] * 2, scores=[0.2, 0.3], correct=[0, 0])
    assert math.isnan(m["verifier/tnr"]) and math.isnan(m["verifier/threshold"])
    assert tracker.plot().stat().st_size > 5000


def test_tracker_state_survives_a_resume_through_json(tmp_path):
    """Issue 28 item 14: a tracker restored from its state (what the TRL callback writes into
    each checkpoint) logs what the uninterrupted tracker logs: window, auto threshold, alarm."""
    from densereward.errors import DataError
    from densereward.io import atomic_write_json
    from densereward.rewards.hacking import HackingAlarm

    batches = [
        ([0.30, 0.10, 0.20, 0.15], [1, 0, 0, 0]),
        ([0.35, 0.12, 0.28, 0.05], [1, 0, 1, 0]),
        ([0.40, 0.33, 0.08, 0.22], [1, 1, 0, 0]),
    ]

    def tracker():
        return RewardQualityTracker(None, window=6, alarm=HackingAlarm(window=2, min_negatives=1))

    def update(t, step):
        s, c = batches[step]
        return t.update(
            prompts=["p", "p", "q", "q"],
            scores=s,
            correct=c,
            num_generations=2,
            trainer_state=type("S", (), {"global_step": step}),
        )

    straight = tracker()
    expected = [update(straight, k) for k in range(3)][-1]
    first = tracker()
    for k in range(2):
        update(first, k)
    atomic_write_json(tmp_path / "state.json", first.state_dict())  # NaN thresholds -> null
    resumed = tracker()
    resumed.load_state_dict(json.loads((tmp_path / "state.json").read_text()))
    got = update(resumed, 2)
    assert got["verifier/window/n_read"] == 6.0 and got["verifier/hacking/window_n"] == 8.0
    assert got.keys() == expected.keys()
    for k in expected:
        assert got[k] == pytest.approx(expected[k], nan_ok=True), k
    with pytest.raises(DataError, match="not a reward-quality tracker state"):
        resumed.load_state_dict({"version": 0})
    # rerun 9 F5: time_s went back to 0 after --resume; it continues from the saved state now
    state = first.state_dict()
    later = tracker()
    later.load_state_dict({**state, "time_s": 200.0})
    update(later, 2)
    assert 200.0 <= later.records[-1]["time_s"] < 260.0


_CHILD: dict = {}  # the rollout child's objects (spawned children import this module)


def _hold(tracker) -> None:
    """The child's initializer: its copy of the tracker, unpickled once, as TRL's child gets it."""
    _CHILD["tracker"] = tracker


def _child_update(**batch) -> dict:
    return _CHILD["tracker"].update(**batch)


@pytest.mark.slow
def test_async_grpo_checkpoints_the_tracker_its_rollout_child_updates(tmp_path):
    """Issue 42 item 5: ``trl.experimental.async_grpo`` pickles the reward functions, and the
    tracker they share, into a spawned rollout child, which updates its copy; the parent's
    :class:`RewardQualityCallback` checkpoints the parent's copy (it was saved empty: the child's
    window and auto threshold were lost on a resume). A resumed run's state reaches a child
    spawned before the checkpoint is loaded (TRL starts the worker in ``on_train_begin``, the
    Trainer loads the step after it). Real spawned children; the trainer itself needs a GPU
    vLLM server."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    from types import SimpleNamespace

    from densereward.rewards import RewardQualityCallback
    from densereward.rewards.trl_callback import STATE_FILE

    batch = {"prompts": ["p", "p", "q", "q"], "num_generations": 2}
    args = SimpleNamespace(output_dir=str(tmp_path))
    tracker = RewardQualityTracker(tmp_path, window=8)
    callback = RewardQualityCallback(tracker)
    spawn = mp.get_context("spawn")
    # the rollout worker's child, with its own copy of the tracker
    with ProcessPoolExecutor(1, spawn, initializer=_hold, initargs=(tracker,)) as child:
        for s, c in (([0.9, 0.2, 0.8, 0.1], [1, 0, 1, 0]), ([0.7, 0.3, 0.6, 0.4], [1, 0, 0, 1])):
            child.submit(_child_update, scores=s, correct=c, **batch).result(timeout=120)
    (tmp_path / "checkpoint-2").mkdir()
    callback.on_save(args, SimpleNamespace(global_step=2, is_world_process_zero=True), None)
    saved = json.loads((tmp_path / "checkpoint-2" / STATE_FILE).read_text())
    assert saved["seen"] == [[0.9, 0.2, 0.8, 0.1, 0.7, 0.3, 0.6, 0.4], [1, 0, 1, 0, 1, 0, 0, 1]]
    assert len(saved["recent"]) == 8 and saved["threshold"] is not None

    # resume: the child is spawned (with the fresh tracker) before the step is known
    resumed = RewardQualityTracker(tmp_path, window=8)
    callback = RewardQualityCallback(resumed)
    with ProcessPoolExecutor(1, spawn, initializer=_hold, initargs=(resumed,)) as child:
        child.submit(len, "started").result(timeout=120)  # the copy is in the child now
        callback.on_step_begin(args, SimpleNamespace(global_step=2), None)
        got = child.submit(
            _child_update, scores=[0.5, 0.1], correct=[1, 0], prompts=["r", "r"], num_generations=2
        ).result(timeout=120)
    assert got["verifier/window/n_read"] == 8.0  # the two new and six of the checkpoint's
    (tmp_path / "checkpoint-3").mkdir()
    callback.on_save(args, SimpleNamespace(global_step=3, is_world_process_zero=True), None)
    saved = json.loads((tmp_path / "checkpoint-3" / STATE_FILE).read_text())
    assert saved["seen"][0] == [0.9, 0.2, 0.8, 0.1, 0.7, 0.3, 0.6, 0.4, 0.5, 0.1]


def test_tracker_threshold_from_eval_verifier_metrics_json(tmp_path):
    from densereward.errors import ConfigError

    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"threshold_calibration": {"threshold": 0.37}}))
    tracker = RewardQualityTracker(None, threshold=str(path))
    assert tracker.threshold == 0.37 and str(path) in tracker.threshold_source
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ConfigError, match="calibrated threshold"):
        RewardQualityTracker(None, threshold=str(tmp_path / "bad.json"))
    with pytest.raises(ConfigError, match="window"):
        RewardQualityTracker(None, window=0)


# ---- data ----------------------------------------------------------------------------------


def test_load_tasks_math_gsm8k_and_reasoning_gym(data_dir: Path):
    from densereward.data import load_tasks

    ds = load_tasks(
        {"path": str(data_dir / "math500" / "test.jsonl"), "limit": 5, "levels": [1, 2, 3]}
    )
    row = ds[0]
    assert row["prompt"][0]["role"] == "system" and "\\boxed" in row["prompt"][0]["content"]
    assert (
        row["prompt"][-1]["content"] == row["problem"]
        and row["level"] in (1, 2, 3)
        and row["answer"]
    )
    gsm = load_tasks({"path": str(data_dir / "gsm8k" / "test.jsonl"), "limit": 2})
    assert gsm[0]["answer"] == "18" and gsm[0]["level"] is None
    rg = load_tasks({"source": "reasoning_gym", "task": "basic_arithmetic", "size": 4})
    assert len(rg) == 4 and rg[0]["answer"]
    easy = load_tasks(
        {
            "source": "reasoning_gym",
            "task": "basic_arithmetic",
            "size": 8,
            "task_config": {
                "min_terms": 2,
                "max_terms": 2,
                "max_digits": 1,
                "operators": ["+"],
                "allow_negation": False,
            },
        }
    )
    for row in easy:  # "Calculate 5 + -4." -> "1": the difficulty knobs reached the generator
        expr = row["problem"].removeprefix("Calculate ").rstrip(".")
        assert set(expr) <= set("0123456789+-() ") and "*" not in expr
        assert all(len(n) == 1 for n in re.findall(r"\d+", expr))  # max_digits=1
        assert len(re.findall(r"\d+", expr)) == 2  # min_terms = max_terms = 2
        assert int(row["answer"]) == eval(expr)  # noqa: S307 -- digits, +, -, parentheses only
    with pytest.raises(DataError, match="could not be created.*bogus"):
        load_tasks(
            {"source": "reasoning_gym", "task": "basic_arithmetic", "task_config": {"bogus": 1}}
        )


def test_hub_offline_error_names_the_fix(monkeypatch):
    from densereward.data import load_tasks

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataError, match="data.path=") as e:
        load_tasks({"source": "DigitalLearningGmbH/MATH-lighteval"})
    assert "reasoning_gym" in str(e.value)
    with pytest.raises(ValueError, match="unknown key"):
        load_tasks({"sourec": "x"})


# ---- dense / group verifier rewards with the real engine -----------------------------------

GSM8K_GENERATORS = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")


def _gsm8k_groups(data_dir: Path, rows: tuple[int, ...]) -> list[tuple[str, str, str, str]]:
    """``(problem, reference, correct, wrong)`` for GSM8K dev rows: the first correct and the
    first wrong of the four generators' solutions (in ``GSM8K_GENERATORS`` order)."""
    with open(data_dir / "gsm8k" / "model_solutions_dev.jsonl") as f:
        data = [json.loads(line) for line in f]
    out = []
    for i in rows:
        r = data[i]
        ok = next(r[g]["solution"] for g in GSM8K_GENERATORS if r[g]["is_correct"])
        bad = next(r[g]["solution"] for g in GSM8K_GENERATORS if not r[g]["is_correct"])
        out.append((r["question"], r["ground_truth"].split("A:")[-1].strip(), ok, bad))
    return out


def _columns(groups: list[tuple[str, str, list[str]]]) -> dict[str, list]:
    """TRL's keyword arguments for groups of ``(problem, reference, completions)``."""
    cols: dict[str, list] = {"prompts": [], "completions": [], "problem": [], "answer": []}
    for problem, reference, completions in groups:
        for c in completions:
            cols["prompts"].append([{"role": "user", "content": problem}])
            cols["completions"].append(_conv(c))
            cols["problem"].append(problem)
            cols["answer"].append(reference)
    return cols


@pytest.fixture(scope="module")
def verifier(default_model_dir):
    from densereward.config import VerifierConfig
    from densereward.verifier import Verifier

    # n_repeats=2: pairwise repeats alternate the A/B slots (with one read the 135M model
    # prefers whichever response sits in slot A); pointwise repeats are identical, read once
    v = Verifier(
        VerifierConfig(
            granularity=10, n_repeats=2, backend_options={"device": "cpu", "dtype": "float32"}
        )
    )
    yield v
    v.close()


@pytest.fixture(scope="module")
def abstaining_verifier(default_model_dir):
    """The embedded model read with ``min_mass=0.999``: every read abstains (low score-token mass),
    as every read of a verifier that does not answer in the score format does."""
    import dataclasses

    from densereward.config import VerifierConfig
    from densereward.verifier import Verifier

    fields = {f.name for f in dataclasses.fields(VerifierConfig)}
    # the start-up calibration read refuses such a verifier (its job); these tests need one that runs
    skip_calibration = {"calibrate": False} if "calibrate" in fields else {}
    v = Verifier(
        VerifierConfig(
            granularity=5,
            min_mass=0.999,
            **skip_calibration,
            backend_options={"device": "cpu", "dtype": "float32"},
        )
    )
    yield v
    v.close()


@pytest.mark.slow
def test_dense_reward_warns_once_when_most_reads_abstain(abstaining_verifier, caplog):
    """Issue 26 item 2: when at least half of a GRPO step's dense reads abstain, one warning says
    so with the reasons counted and the fix (it used to log ``rewards/verifier_dense/mean: None``
    and nothing else); called as TRL calls it, sync and async, said once per reward function."""
    from densereward.rewards import AsyncVerifierReward, VerifierReward

    class State:  # what TRL passes: the optimizer steps done so far
        global_step = 2

    problems = ["What is 7+5?", "What is 2+2?"] * 2
    answers = [r"\boxed{12}", r"\boxed{5}", r"\boxed{13}", r"\boxed{4}"]
    cols = {
        "prompts": [[{"role": "user", "content": p}] for p in problems],
        "completions": [[{"role": "assistant", "content": c}] for c in answers],
        "completion_ids": [[1], [2], [3], [4]],
        "problem": problems,
        "answer": ["12", "4", "12", "4"],
        "trainer_state": State(),
        "log_metric": lambda k, v: None,
        "log_extra": lambda k, v: None,
    }

    def said() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name == "densereward.rewards.verifier" and "abstained" in r.getMessage()
        ]

    reward = VerifierReward(abstaining_verifier, reference_guided=True)
    with caplog.at_level("WARNING", logger="densereward.rewards.verifier"):
        assert reward(**cols) == [None] * 4
        assert reward(**cols) == [None] * 4
    (message,) = said()  # once, not once per step
    assert message.startswith(
        "verifier_dense at step 3: 4 of 4 dense verifier reads abstained: low score-token mass 4"
    ), message
    # the fix names min_mass and a check of one read; the read position follows the verifier's
    # own tokenizer (verifier/boundary.py), so no "upgrade" advice is left to give
    assert "fix: " in message and "verifier.min_mass" in message and "densereward score" in message
    assert "upgrade" not in message
    caplog.clear()
    with caplog.at_level("WARNING", logger="densereward.rewards.verifier"):
        areward = AsyncVerifierReward(abstaining_verifier, reference_guided=True)
        assert asyncio.run(areward(**cols)) == [None] * 4
    assert len(said()) == 1 and said()[0].startswith("verifier_dense at step 3: 4 of 4")


@pytest.mark.slow
def test_grpo_step_leaves_a_completion_every_reward_abstained_on_out_of_its_group(
    abstaining_verifier, default_model_dir, tmp_path, monkeypatch, caplog
):
    """Issue 28 item 5, through one real ``GRPOTrainer`` step with the gated reward: the
    completion whose Math-Verify check timed out and whose dense read abstained is left out of
    its group's mean and std (advantage 0), never counted as a reward of 0; under a TRL older than
    1.6, which would count it, the rewards refuse to run. Also issue 26 item 2: the step's dense
    reads all abstained, and the run says so once."""
    import trl
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from densereward.rewards import RewardConfig, build_reward_funcs

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL
    # a group of 4: Math-Verify times out on the first (a tower of powers), the second is right
    completions = [r"\boxed{9^{9^{9^{9}}}}", r"\boxed{4}", r"\boxed{5}", r"\boxed{3}"]

    def rollout(prompts, trainer):  # the scripted completions instead of sampling
        tok = trainer.processing_class
        text = [
            tok.apply_chat_template(p, add_generation_prompt=True, tokenize=False) for p in prompts
        ]
        ids = [
            tok(c, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for c in completions
        ]
        return {
            "prompt_ids": [tok(t, add_special_tokens=False)["input_ids"] for t in text],
            "completion_ids": ids[: len(prompts)],
            "logprobs": None,
        }

    advantages: list[list[float]] = []

    class Trainer(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            advantages.append(out["advantages"].tolist())
            return out

    checker = MathChecker(timeout_s=1.0)
    try:
        funcs, weights = build_reward_funcs(
            RewardConfig(type="gated", track=False),
            abstaining_verifier,
            checker=checker,
            num_generations=4,
        )
        dataset = Dataset.from_list(
            [{"prompt": [{"role": "user", "content": "What is 2+2?"}], "answer": "4"}] * 4
        )
        args = GRPOConfig(
            output_dir=str(tmp_path),
            use_cpu=True,
            bf16=False,
            max_steps=1,
            per_device_train_batch_size=4,
            num_generations=4,
            report_to=[],
            max_completion_length=16,
            save_strategy="no",
            logging_steps=1,
            reward_weights=weights,
        )
        trainer = Trainer(
            model=str(default_model_dir),
            reward_funcs=funcs,
            args=args,
            train_dataset=dataset,
            rollout_func=rollout,
        )
        with caplog.at_level("WARNING", logger="densereward.rewards.verifier"):
            trainer.train()
        # gated: the verdict, plus nothing from a judge that abstained everywhere; the first
        # completion (verdict and judge both abstained) is unscorable -> [excluded, 1, 0, 0]
        rest = [1.0, 0.0, 0.0]
        mean, std = sum(rest) / 3, (sum((r - 1 / 3) ** 2 for r in rest) / 2) ** 0.5
        expected = [0.0, *((r - mean) / (std + 1e-4) for r in rest)]
        assert advantages == [pytest.approx(expected, abs=1e-4)], advantages
        logged = trainer.state.log_history[0]
        assert logged["reward"] == pytest.approx(1 / 3)  # the mean over the 3 scored, not 1/4
        assert logged["rewards/verifier_gated/mean"] == pytest.approx(1 / 3)
        said = [r.getMessage() for r in caplog.records if "dense verifier reads" in r.getMessage()]
        assert len(said) == 1 and "4 of 4 dense verifier reads abstained" in said[0], said

        monkeypatch.setattr(trl, "__version__", "1.5.0")
        for func in funcs:
            with pytest.raises(ImportError, match=r"trl>=1\.6 \(installed: 1\.5\.0\)"):
                func(
                    prompts=["What is 2+2?"],
                    completions=[r"\boxed{4}"],
                    answer=["4"],
                    trainer_state=trainer.state,
                )
    finally:
        checker.close()


@pytest.mark.slow
def test_dense_reward_with_default_model(verifier, checker, tmp_path, data_dir):
    """Reference-guided dense reward (answer_match) on GSM8K dev solutions: in each group the
    correct solution outscores the wrong one and the empty completion ranks last."""
    from densereward.rewards import AsyncVerifierReward, VerifierReward

    tracker = RewardQualityTracker(tmp_path)
    reward = VerifierReward(
        verifier, tracker=tracker, checker=checker, num_generations=3, reference_guided=True
    )
    # Rows 3 (540 vs 60) and 6 (260 vs 15): the two clearest of the first 16 rows that have a
    # correct and a wrong solution, excluding references that appear in the prompt's examples.
    # Measured (G=10, fp32): 0.442 vs 0.414 and 0.466 vs 0.447. Over all 16 the correct one
    # scores higher in 12, by 0.015 on average: the 135M verifier's signal is weak.
    cols = _columns(
        [(q, ref, [ok, bad, ""]) for q, ref, ok, bad in _gsm8k_groups(data_dir, (3, 6))]
    )
    logged: dict[str, float] = {}
    out = reward(**cols, level=[1] * 6, log_metric=logged.__setitem__, log_extra=lambda k, v: None)
    assert len(out) == 6 and all(v is not None and 0.0 <= v <= 1.0 for v in out), out
    for correct, wrong, empty in zip(out[0::3], out[1::3], out[2::3], strict=True):
        assert empty == 0.0 < wrong  # empty: 0 without a model call, below any read score
        assert correct > wrong + 0.01, out
    assert logged["verifier/pass_rate"] == pytest.approx(2 / 6) and "verifier/mean_mass" in logged
    aout = asyncio.run(AsyncVerifierReward(verifier, reference_guided=True)(**cols))
    assert aout == pytest.approx(out, abs=1e-6)
    with pytest.raises(ValueError, match="length mismatch"):
        reward(
            prompts=cols["prompts"][:1],
            completions=cols["completions"][:2],
            problem=cols["problem"][:2],
            answer=cols["answer"][:2],
        )


@pytest.mark.slow
def test_group_reward_with_default_model(verifier, data_dir):
    """Reference-guided group reward (round robin, slots alternated): the empty completion loses
    every comparison; the correct solution beats the wrong one, in either order of the group."""
    from densereward.rewards import GroupVerifierReward

    reward = GroupVerifierReward(
        verifier, num_generations=3, method="round_robin", reference_guided=True
    )
    # Row 24 (26 vs 5): the clearest of the first 16 rows with a correct and a wrong solution;
    # measured (G=10, fp32, n_repeats=2) 0.767 vs 0.733. Over all 16 the correct one wins 14,
    # mostly by < 0.005.
    ((q, ref, ok, bad),) = _gsm8k_groups(data_dir, (24,))
    out = reward(**_columns([(q, ref, [ok, bad, ""])]))
    swapped = reward(**_columns([(q, ref, [bad, ok, ""])]))
    assert out[2] == swapped[2] == 0.0  # the empty completion loses without a model call
    assert swapped[:2] == pytest.approx([out[1], out[0]], abs=1e-4)  # order does not matter
    assert out[0] > out[1] + 0.015, (out, swapped)


@pytest.mark.parametrize(
    "prompts", [["a"] * 2 + ["b"] * 4, ["a"] * 6 + ["b"] * 2], ids=["short_run", "split_run"]
)
def test_group_reward_refuses_a_partial_group(prompts, server):
    """Issue 28 item 4: a run of identical prompts that is not whole groups of num_generations
    (a group split across processes) is refused, naming the settings, before any comparison;
    whole groups (a prompt drawn twice: a run of 2 x num_generations) are ranked."""
    from servers import scripted_verifier

    from densereward.rewards import AsyncGroupVerifierReward, GroupVerifierReward

    def no_verifier():
        raise AssertionError("a partial group must be refused before the verifier is used")

    match = (
        r"num_generations=4.*per_device_train_batch_size \* steps_per_generation a "
        r"multiple of num_generations \(4\)"
    )
    completions = [f"\\boxed{{{i}}}" for i in range(len(prompts))]
    with pytest.raises(DataError, match=match):
        GroupVerifierReward(no_verifier, num_generations=4, reference_guided=False)(
            prompts=prompts, completions=completions
        )
    with pytest.raises(DataError, match=match):
        asyncio.run(
            AsyncGroupVerifierReward(no_verifier, num_generations=4, reference_guided=False)(
                prompts=prompts, completions=completions
            )
        )
    v = scripted_verifier(server.base_url, granularity=5)
    try:
        whole = GroupVerifierReward(
            v, num_generations=2, method="round_robin", reference_guided=False
        )
        out = whole(prompts=["a"] * 4 + ["b"] * 2, completions=completions[:6])
        assert len(out) == 6 and len(server.requests) >= 3  # three groups, each compared
    finally:
        v.close()


# --------------------------------------------------------------------------------------------
# Tracking never silently does nothing
# --------------------------------------------------------------------------------------------


def test_track_without_a_tracker_creates_one_and_logs_its_metrics(server, caplog):
    """``RewardConfig(track=True)`` with no tracker used to log no ``verifier/*`` metric and
    say nothing; now a tracker is made in memory (metrics reach TRL's log) and a warning says
    how to get the files too."""
    from servers import scripted_verifier

    from densereward.rewards import RewardConfig, build_reward_funcs

    v = scripted_verifier(server.base_url, granularity=5)
    with caplog.at_level("WARNING"):
        funcs, _ = build_reward_funcs(
            RewardConfig(type="dense", track=True),
            v,
            checker=MathChecker(executor="inline"),
            num_generations=2,
        )
    assert "RewardQualityCallback(tracker)" in caplog.text
    logged: dict[str, float] = {}
    funcs[0](
        prompts=["What is 7+5?"] * 2,
        completions=["\\boxed{12}", "\\boxed{13}"],
        problem=["What is 7+5?"] * 2,
        answer=["12", "12"],
        log_metric=logged.__setitem__,
    )
    assert logged["verifier/pass_rate"] == 0.5 and "verifier/n" in logged
    v.close()


def test_an_undefined_metric_is_explained_once_in_the_log_and_on_the_plot(tmp_path, caplog):
    from densereward.rewards.quality import undefined_reasons
    from densereward.rewards.tracking_plot import _undefined_note

    tracker = RewardQualityTracker(tmp_path, threshold=0.5, min_per_class=1)
    with caplog.at_level("WARNING", logger="densereward.rewards.tracking"):
        for _ in range(3):  # a weak policy: every completion wrong
            tracker.update(prompts=["p", "p"], scores=[0.2, 0.7], correct=[0, 0], levels=[1, 2])
    said = [r.getMessage() for r in caplog.records if "undefined at step" in r.getMessage()]
    # one line for the step, not one per metric (issue 41: five near-identical lines at step 1),
    # and not again at steps 2 and 3
    assert len(said) == 1 and said[0].startswith("undefined at step 1"), said
    assert "\n  verifier/window/tpr: no correct completion (Math-Verify) in the window" in said[0]
    assert "verifier/window/auroc, " in said[0] and "window/balanced_accuracy" in said[0]
    # the batch's own, not logged either, are named too (F4)
    assert "\n  verifier/tpr: no correct completion (Math-Verify) in the batch" in said[0]
    assert "verifier/tnr" not in said[0] and "window/tnr" not in said[0]  # defined (0.5)
    # the per-level rates and the hacking alarm's, null in the records, are named too
    assert (
        "\n  verifier/tpr/level_1, verifier/tpr/level_2: no correct read completion of that "
        "level in the batch" in said[0]
    )
    assert (
        "\n  verifier/hacking_alarm, verifier/hacking/dense_rise, verifier/hacking/dense_rise_t, "
        "verifier/hacking/pass_rate_change, verifier/hacking/tnr_change: the reward-hacking "
        "alarm compares the older and newer halves of its last 8 batches; it has 1 so far"
        in said[0]
    )
    reasons = undefined_reasons(tracker.records[-1])
    assert any(k.endswith("tpr") for k in reasons)
    note = _undefined_note(tracker.records, "verifier/")
    assert "tpr undefined at 3 of 3 steps" in note and "no correct completion" in note
    assert tracker.plot().stat().st_size > 5000


def test_one_reason_shared_by_many_undefined_metrics_is_said_once_in_the_log_and_on_the_plot(
    tmp_path, caplog
):
    """F9: with no completion read at step 1, the once-only message repeated one ~150-character
    reason for each of 8 metrics (~1,500 characters on one line), and the plot's footer did the
    same on 8 lines. One line per distinct reason now, naming the metrics it covers."""
    import matplotlib.pyplot as plt

    from densereward.rewards.tracking_plot import _reward_quality_figure, _undefined_note

    unread = (
        "no completion in the window was read by the verifier (2 of 2 in this batch were "
        "scored 0 without a read: no final answer)"
    )
    unread_batch = unread.replace("in the window", "in the batch")
    tracker = RewardQualityTracker(tmp_path, threshold=0.5)
    with caplog.at_level("WARNING", logger="densereward.rewards.tracking"):
        tracker.update(prompts=["p", "p"], scores=[0.0, 0.0], correct=[0, 0], read=[False] * 2)
    said = [r.getMessage() for r in caplog.records if "undefined at step" in r.getMessage()]
    assert len(said) == 1 and said[0].count(unread) == 1, said
    lines = said[0].splitlines()
    assert lines[0] == "undefined at step 1, not logged while undefined (each said once):"
    assert lines[1:] == [
        "  verifier/window/tpr, verifier/window/tnr, verifier/window/auroc, "
        "verifier/window/pairwise_accuracy, verifier/window/score_gap, "
        "verifier/window/precision, verifier/window/balanced_accuracy, "
        f"verifier/window/verifier_gain: {unread}",
        # F4: the batch's own metrics, not logged either, on one line of their own
        "  verifier/tpr, verifier/tnr, verifier/auroc, verifier/pairwise_accuracy, "
        "verifier/score_gap, verifier/precision, verifier/balanced_accuracy, "
        f"verifier/verifier_gain, verifier/tie_rate, verifier/mean_mass: {unread_batch}",
        "  verifier/hacking_alarm, verifier/hacking/dense_rise, verifier/hacking/dense_rise_t, "
        "verifier/hacking/pass_rate_change, verifier/hacking/tnr_change: the reward-hacking "
        "alarm compares the older and newer halves of its last 8 batches; it has 1 so far",
    ], lines
    note = _undefined_note(tracker.records, "verifier/")
    assert note == (
        "window/tpr, window/tnr, window/auroc, window/pairwise_accuracy, window/score_gap, "
        "window/precision, window/balanced_accuracy, window/verifier_gain undefined at 1 of 1 "
        f"steps (no point drawn); at step 1: {unread}\n"
        "tie_rate, mean_mass undefined at 1 of 1 steps (no point drawn); at step 1: "
        f"{unread_batch}"
    ), note
    tracker.update(prompts=["p", "p"], scores=[0.9, 0.1], correct=[1, 0])  # 1 of each class
    note = _undefined_note(tracker.records, "verifier/").splitlines()
    assert note == [  # three reasons at step 2: three lines, not eight
        "window/tpr, window/auroc, window/pairwise_accuracy, window/score_gap, "
        "window/balanced_accuracy undefined at 2 of 2 steps (no point drawn); at step 2: "
        "fewer than 5 correct read completions in the window (1)",
        "window/tnr undefined at 2 of 2 steps (no point drawn); at step 2: "
        "fewer than 5 incorrect read completions in the window (1)",
        "window/precision, window/verifier_gain undefined at 2 of 2 steps (no point drawn); "
        "at step 2: fewer than 5 accepted read completions in the window (1)",
        f"tie_rate undefined at 1 of 2 steps (no point drawn); at step 1: {unread_batch}",
        "mean_mass undefined at 2 of 2 steps (no point drawn); at step 2: no score-token "
        "probability mass was given for the batch",
    ], note
    fig = _reward_quality_figure(tracker.records, "verifier/")
    try:  # the footer drawn under the panels is that note
        footer = [t.get_text() for t in fig.texts if t is not fig._suptitle]
        assert footer == ["\n".join(note)]
    finally:
        plt.close(fig)
    assert tracker.plot().stat().st_size > 5000


def test_the_undefined_notice_names_the_per_batch_metrics_too(tmp_path, caplog):
    """F4 (fresh user's trial): at a step with no read, ``verifier/tpr`` and ``verifier/auroc``
    were NaN in the records and missing from TRL's logs, but the "undefined at step 1" notice
    named only ``verifier/window/*``. Every per-batch quality metric that is NaN (so not logged)
    is named too, with its reason, once per run."""
    tracker = RewardQualityTracker(tmp_path, threshold=0.5)
    logged: list[dict[str, float]] = []
    with caplog.at_level("WARNING", logger="densereward.rewards.tracking"):
        for scores, correct, read in (
            ([0.0] * 4, [0, 0, 0, 0], [False] * 4),  # nothing read
            ([0.2, 0.3, 0.1, 0.4], [0, 0, 0, 0], None),  # read, all wrong
        ):
            logged.append({})
            tracker.update(
                prompts=["p", "p", "q", "q"],
                scores=scores,
                correct=correct,
                read=read,
                log_metric=logged[-1].__setitem__,
            )
    said = [r.getMessage() for r in caplog.records if "undefined at step" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("undefined at step 1"), said
    lines = said[0].splitlines()
    batch = [line for line in lines if "no completion in the batch was read" in line]
    assert len(batch) == 1, lines
    for key in ("tpr", "tnr", "auroc", "pairwise_accuracy", "score_gap", "precision"):
        assert f"verifier/{key}," in batch[0] or f"verifier/{key}:" in batch[0], batch
    # every per-batch quality metric missing from the logged dict is named, with its reason
    rec = tracker.records[0]
    nan_keys = [
        k
        for k, v in rec.items()
        if k.startswith("verifier/")
        and isinstance(v, float)
        and math.isnan(v)
        and not k.startswith("verifier/window/")
        and not k.startswith("verifier/hacking")
        and "/level_" not in k
    ]
    assert nan_keys and all(k not in logged[0] for k in nan_keys)
    for k in nan_keys:
        assert re.search(rf"[ ,]{re.escape(k)}[,:]", said[0]), (k, said[0])
    assert "verifier/tpr" not in logged[1]  # undefined again at step 2, not said again


def _plotted(records: list[dict]) -> tuple[dict, str]:
    """``({legend label: its line}, title)`` of the reward-quality figure of ``records``."""
    import matplotlib.pyplot as plt

    from densereward.rewards.tracking_plot import _reward_quality_figure

    fig = _reward_quality_figure(records, "verifier/")
    try:
        return {
            label: line
            for ax in fig.axes
            for line, label in zip(*ax.get_legend_handles_labels(), strict=True)
        }, fig._suptitle.get_text()
    finally:
        plt.close(fig)


def test_the_tie_rate_of_a_batch_with_no_read_is_not_drawn_as_measured(tmp_path):
    """F5 (fresh user's trial): with 0 of 4 completions read, the plot drew
    ``tie_rate (each batch)`` at 1.0 beside panels that said "no data": the ties were between
    the 0s given without a read. The record now holds null (NaN) with the reason, the point is
    left out and the legend says "no data at steps ...: no completion read by the verifier";
    ``frac_zero_spread_sparse`` (Math-Verify's labels) and ``frac_zero_spread_dense`` (the
    reward the policy got: every group's rewards equal) are real measurements and stay."""

    from densereward.rewards.quality import undefined_reasons

    tracker = RewardQualityTracker(tmp_path, threshold=0.5)
    for _ in range(2):
        tracker.update(
            prompts=["p", "p", "q", "q"], scores=[0.0] * 4, correct=[0] * 4, read=[False] * 4
        )
    tracker.update(
        prompts=["p", "p", "q", "q"],
        scores=[0.2, 0.2, 0.1, 0.9],
        correct=[0] * 4,
        masses=[0.9] * 4,
    )
    rec = tracker.records
    assert math.isnan(rec[0]["verifier/tie_rate"]) and rec[2]["verifier/tie_rate"] == 0.5
    assert undefined_reasons(rec[0])["tie_rate"].startswith(
        "no completion in the batch was read by the verifier"
    )
    rows = [json.loads(x) for x in (tmp_path / "reward_quality.jsonl").read_text().splitlines()]
    assert rows[0]["verifier/tie_rate"] is None
    assert rows[0]["verifier/frac_zero_spread_sparse"] == 1.0
    assert rows[0]["verifier/frac_zero_spread_dense"] == 1.0
    # records written before this change hold tie_rate 1.0 at a step with no read: not drawn
    old = [{**r, "verifier/tie_rate": 1.0} if r["verifier/n_read"] == 0 else r for r in rows]
    for records in (rows, old):
        lines, _ = _plotted(records)
        tie = [k for k in lines if k.startswith("tie_rate")]
        assert tie == [
            "tie_rate (each batch); no data at steps 1, 2: no completion read by the verifier"
        ], list(lines)
        y = list(lines[tie[0]].get_ydata())
        assert math.isnan(y[0]) and math.isnan(y[1]) and y[2] == 0.5
        assert list(lines["frac_zero_spread_sparse (each batch)"].get_ydata()) == [1.0] * 3
        mass = [k for k in lines if k.startswith("mean_mass")]
        assert mass == [
            "mean_mass (each batch); no data at steps 1, 2: no completion read by the verifier"
        ]
    # the user's run: no step read anything; the panel still draws the spreads and says why
    # tie_rate has no line
    labels = list(_plotted(old[:2])[0])
    assert "tie_rate: no data at steps 1, 2: no completion read by the verifier" in labels
    assert not any(label.startswith("tie_rate (each batch)") for label in labels), labels
    assert "frac_zero_spread_dense (each batch)" in labels
    assert tracker.plot().stat().st_size > 5000


def test_reward_quality_callback_sets_the_run_dir_and_plots_at_train_end(tmp_path):
    """The TRL callback (real ``TrainingArguments`` / ``TrainerState``): a tracker made
    without a directory gets ``output_dir`` and the plot is written when training ends."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from densereward.rewards import RewardQualityCallback

    tracker = RewardQualityTracker(threshold=0.5)
    cb = RewardQualityCallback(tracker)
    args, state = TrainingArguments(output_dir=str(tmp_path), report_to=[]), TrainerState()
    cb.on_train_begin(args, state, TrainerControl())
    assert tracker.run_dir == tmp_path
    tracker.update(prompts=["p", "p"], scores=[0.9, 0.2], correct=[1, 0])
    assert not (tmp_path / "reward_quality.png").exists()
    cb.on_train_end(args, state, TrainerControl())
    assert cb.plot_path == tmp_path / "reward_quality.png" and cb.plot_path.stat().st_size > 5000
    with pytest.raises(TypeError, match="RewardQualityTracker"):
        RewardQualityCallback(tmp_path)


def test_a_panel_with_no_point_says_no_data_and_why(tmp_path):
    """Issue 41 item 4: a panel whose metrics are undefined at every step (a weak policy: no
    correct completion, so no AUROC, pairwise accuracy or score gap) got an x axis of
    -0.04..0.04 and a legend of lines that are not there; it now says "no data" and why, and
    spans the run's steps like the others."""
    import matplotlib.pyplot as plt

    from densereward.rewards.tracking_plot import _reward_quality_figure

    tracker = RewardQualityTracker(tmp_path, threshold=0.5, min_per_class=1)
    for _ in range(3):  # every completion wrong: the threshold-free panel has no point
        tracker.update(prompts=["p", "p"], scores=[0.2, 0.7], correct=[0, 0])
    fig = _reward_quality_figure(tracker.records, "verifier/")
    try:
        first, rates, passes = fig.axes[:3]
        texts = [" ".join(t.get_text().split()) for t in first.texts]  # wrapped in the panel
        assert texts == [
            "no data: auroc, pairwise_accuracy, score_gap "
            "it needs both correct and incorrect completions in the window"
        ], texts
        assert first.get_legend() is None and not first.get_lines()
        assert all(ax.get_xlim() == (0.5, 3.5) for ax in fig.axes)  # steps 1..3, not +-0.04
        # a panel with points draws them and no "no data" (the rates panel holds the window's
        # counts); tpr is undefined, so not in the legend
        assert not passes.texts and not rates.texts
        assert [t.get_text() for t in rates.get_legend().get_texts()] == [
            "tnr",
            "precision",
            "threshold",
            "step 3 window: 0 correct / 6 incorrect",
        ]
    finally:
        plt.close(fig)
    assert tracker.plot().stat().st_size > 5000


def test_a_panel_with_no_reads_keeps_its_texts_clear_and_a_probability_axis(tmp_path):
    """F11: with no completion read (0 of 4), the TPR / TNR panel drew its "no data" text over
    the threshold line and the window's count box, and the pass-rate panel (and the empty AUROC
    panel) ran from -1 to 1. Now an empty panel draws no threshold line, its texts do not
    overlap, and only a panel that draws the verifier gain or the score gap goes below 0;
    checked on the figure of real tracker records and, for the gain, the demo's records."""
    import matplotlib.pyplot as plt

    from densereward.io import read_jsonl
    from densereward.rewards.tracking_plot import _reward_quality_figure

    tracker = RewardQualityTracker(tmp_path, threshold=0.5)
    for _ in range(2):  # no final answer anywhere: nothing is read
        tracker.update(prompts=["p"] * 4, scores=[0.5] * 4, correct=[1, 0, 0, 0], read=[False] * 4)
    fig = _reward_quality_figure(tracker.records, "verifier/")
    try:
        first, rates, passes = fig.axes[:3]
        assert not rates.get_lines() and rates.get_legend() is None  # no threshold over "no data"
        fig.canvas.draw()
        boxes = [t.get_window_extent() for t in rates.texts]
        assert len(boxes) == 2 and not boxes[0].overlaps(boxes[1]), boxes
        assert first.get_ylim() == passes.get_ylim() == rates.get_ylim() == (-0.05, 1.05)
    finally:
        plt.close(fig)
    figures = Path(__file__).resolve().parents[1] / "docs" / "figures"
    fig = _reward_quality_figure(
        list(read_jsonl(figures / "grpo_demo.reward_quality.jsonl")), "verifier/"
    )
    try:  # the demo's gain and score gap are drawn: their panels keep [-1, 1]
        assert fig.axes[0].get_ylim() == fig.axes[2].get_ylim() == (-1.05, 1.05)
        assert "threshold" in fig.axes[1].get_legend_handles_labels()[1]
    finally:
        plt.close(fig)


def test_the_plot_title_says_what_the_last_window_rests_on():
    """Issue 41 item 4: the demo's plot showed window AUROC/TPR/TNR 1.00 at step 5 with no word
    that they rest on 4 correct completions (another machine: 2, AUROC 0.75). The title now
    gives the last window's counts by class and the step one completion moves TPR and TNR by;
    checked on the measured demo run's own records."""
    import matplotlib.pyplot as plt

    from densereward.io import read_jsonl
    from densereward.rewards.tracking_plot import _reward_quality_figure

    figures = Path(__file__).resolve().parents[1] / "docs" / "figures"
    records = list(read_jsonl(figures / "grpo_demo.reward_quality.jsonl"))
    fig = _reward_quality_figure(records, "verifier/")
    try:
        title = fig._suptitle.get_text()
    finally:
        plt.close(fig)
    assert title.endswith(
        "\nwindow at step 5: 70 read completions, 28 correct / 42 incorrect "
        "(one moves TPR by 0.04, TNR by 0.02)"
    ), title


def test_the_plot_marks_in_sample_thresholds_and_puts_the_counts_on_the_rates_panel():
    """Issue 41 rerun item 6: the demo's figure showed TPR / TNR from 4 positives at an auto
    threshold chosen, at step 2, on the batch it then scored, with no word of it on the panel.
    Checked on the measured demo run's own records (step 2 carries threshold_in_sample = 1)."""
    import matplotlib.pyplot as plt

    from densereward.io import read_jsonl
    from densereward.rewards.tracking_plot import _reward_quality_figure

    figures = Path(__file__).resolve().parents[1] / "docs" / "figures"
    records = list(read_jsonl(figures / "grpo_demo.reward_quality.jsonl"))

    def texts(recs):
        fig = _reward_quality_figure(recs, "verifier/")
        try:
            rates = next(ax for ax in fig.axes if "tpr" in ax.get_legend_handles_labels()[1])
            legend = [t.get_text() for t in rates.get_legend().get_texts()]
            return fig._suptitle.get_text(), [t.get_text() for t in rates.texts] + legend
        finally:
            plt.close(fig)

    title, panel = texts(records)
    assert "; in-sample at step 1 (chosen on the batch it then scored" in title, title
    assert "in-sample threshold" in panel and "step 5 window: 28 correct / 42 incorrect" in panel
    out_of_sample = [{**r, "verifier/threshold_in_sample": 0.0} for r in records]
    title, panel = texts(out_of_sample)
    assert "in-sample" not in title and not any("in-sample" in t for t in panel)


def test_window_rates_from_too_few_completions_of_a_class_are_null_with_the_count(tmp_path):
    """Issue 41 rerun: GRPO logged window TPR / AUROC 1.0 from one correct completion. Below
    MIN_PER_CLASS read completions of a class the metrics that need it are null, the counts are
    logged beside them, and the reason names the count; the window's pass rate over *read*
    completions is ``window/read_pass_rate``, apart from the batch's ``pass_rate`` (all)."""
    from densereward.rewards.quality import MIN_PER_CLASS
    from densereward.rewards.tracking_plot import _undefined_note, _window_classes

    assert MIN_PER_CLASS == 5
    tracker = RewardQualityTracker(tmp_path, threshold=0.5)
    logged: dict[str, float] = {}
    tracker.update(  # 1 correct read, 7 incorrect; the 9th has no read
        prompts=["p"] * 9,
        scores=[0.9] + [0.1] * 7 + [0.0],
        correct=[1] + [0] * 8,
        read=[True] * 8 + [False],
        log_metric=logged.__setitem__,
    )
    row = json.loads((tmp_path / "reward_quality.jsonl").read_text().splitlines()[0])
    for key in ("tpr", "auroc", "balanced_accuracy", "pairwise_accuracy", "score_gap"):
        assert row[f"verifier/window/{key}"] is None and row[f"verifier/{key}"] is None, key
        assert f"verifier/window/{key}" not in logged
    assert row["verifier/window/tnr"] == 1.0  # 7 incorrect reads: enough
    assert row["verifier/window/n_read_correct"] == 1.0
    assert row["verifier/window/n_read_incorrect"] == 7.0
    assert row["verifier/n_read_correct"] == 1.0 and logged["verifier/n_read_incorrect"] == 7.0
    assert row["verifier/window/read_pass_rate"] == pytest.approx(1 / 8)
    assert row["verifier/pass_rate"] == pytest.approx(1 / 9)
    assert "verifier/window/pass_rate" not in row and row["min_per_class"] == 5
    assert _window_classes(row) == (1, 7)
    note = _undefined_note(tracker.records, "verifier/")
    assert (
        "window/tpr, window/auroc, window/pairwise_accuracy, window/score_gap, "
        "window/balanced_accuracy undefined at 1 of 1 steps (no point drawn); at step 1: "
        "fewer than 5 correct read completions in the window (1)" in note.splitlines()
    ), note
    for _ in range(4):  # 5 correct reads in the window: the rates are back
        tracker.update(prompts=["p"] * 2, scores=[0.8, 0.3], correct=[1, 0])
    last = tracker.records[-1]
    assert last["verifier/window/n_read_correct"] == 5.0
    assert last["verifier/window/tpr"] == 1.0 and last["verifier/window/auroc"] == 1.0
    assert math.isnan(last["verifier/tpr"])  # the batch's own: 1 correct read
    assert tracker.plot().stat().st_size > 5000


def test_precision_and_verifier_gain_from_too_few_accepted_completions_are_null_with_the_count(
    tmp_path,
):
    """Issue 41 (kind 4): the GRPO demo logged ``verifier/precision 1.0`` and
    ``verifier_gain 0.75`` from one accepted completion. Precision and the verifier gain rest on
    the accepted read completions (score >= threshold): below MIN_PER_CLASS of them they are
    null, ``n_accepted`` is logged in the batch and the window, and the reason names the count."""
    from densereward.rewards.quality import undefined_reasons
    from densereward.rewards.tracking_plot import _undefined_note

    tracker = RewardQualityTracker(tmp_path, threshold=0.5)
    logged: dict[str, float] = {}
    tracker.update(  # 7 correct reads (1 accepted, 6 scored 0.4), 6 incorrect reads
        prompts=["p"] * 13,
        scores=[0.9] + [0.4] * 6 + [0.1] * 6,
        correct=[1] * 7 + [0] * 6,
        log_metric=logged.__setitem__,
    )
    row = json.loads((tmp_path / "reward_quality.jsonl").read_text().splitlines()[0])
    assert row["verifier/n_accepted"] == 1.0 and logged["verifier/window/n_accepted"] == 1.0
    assert row["verifier/window/tpr"] == pytest.approx(1 / 7)  # 7 correct: enough
    for key in ("precision", "verifier_gain"):
        assert row[f"verifier/window/{key}"] is None and row[f"verifier/{key}"] is None, key
        assert f"verifier/window/{key}" not in logged and f"verifier/{key}" not in logged
    assert undefined_reasons(tracker.records[-1])["window/precision"] == (
        "fewer than 5 accepted read completions in the window (1)"
    )
    assert "fewer than 5 accepted read completions in the window (1)" in _undefined_note(
        tracker.records, "verifier/"
    )
    tracker.update(  # 4 more accepted, 3 of them correct: 5 accepted in the window
        prompts=["p"] * 4, scores=[0.8] * 4, correct=[1, 1, 1, 0]
    )
    last = tracker.records[-1]
    assert last["verifier/window/n_accepted"] == 5.0
    assert last["verifier/window/precision"] == pytest.approx(4 / 5)
    assert last["verifier/window/verifier_gain"] == pytest.approx(4 / 5 - 10 / 17)
    assert math.isnan(last["verifier/precision"])  # the batch's own: 4 accepted


def test_the_reward_quality_plot_keeps_three_panels_a_row(tmp_path):
    """Third rerun (cosmetic): the demo's five panels stood in one row, 2750 x 418 px, unreadable
    at page width. At most three panels a row now; the undefined-metrics note stays below them."""
    import json

    from PIL import Image

    from densereward.rewards.tracking_plot import plot_reward_quality

    demo = (
        Path(__file__).resolve().parents[1] / "docs" / "figures" / "grpo_demo.reward_quality.jsonl"
    )
    records = [json.loads(line) for line in demo.read_text().splitlines() if line.strip()]
    width, height = Image.open(plot_reward_quality(records, tmp_path / "rq.png")).size
    assert width <= 1700 and width / height < 2.5, (width, height)


@pytest.fixture(scope="module")
def timeout_checker():
    """A checker with a 1 s deadline, shared: the hanging answer times out once in the module."""
    c = MathChecker(timeout_s=1.0)
    yield c
    c.close()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gated", "mixed", "seed_recipe"])
@pytest.mark.parametrize("grouped", [True, False], ids=["groups", "per_sample"])
def test_every_reward_built_on_correctness_abstains_where_the_check_times_out(
    kind, grouped, server, timeout_checker
):
    """F1: under reward.type=gated (the default) an answer whose Math-Verify check timed out
    (``\\boxed{9^{9^{9^{9}}}}`` past reward.math_timeout_s) got the judge's score in the wrong
    answers' band, while the sparse reward abstained; mixed and seed_recipe likewise kept their
    judge (and format) terms, so TRL's nansum made it an ordinary wrong answer. Now every reward
    function of these kinds returns None on it: TRL leaves a row every function abstained on out
    of its group's mean and std (advantage 0), and ``serve`` flags it abstained. A wrong answer
    and an item without a reference (the reference-free judge) are still scored."""
    from servers import scripted_verifier

    checker = timeout_checker
    v = scripted_verifier(server.base_url, granularity=20, calibrate=False)
    try:
        funcs, _ = build_reward_funcs(
            RewardConfig(type=kind, track=False, audit=False, group_method="round_robin"),
            v,
            checker=checker,
            num_generations=2 if grouped else None,
        )
        for f in funcs:
            if hasattr(f, "per_sample"):
                f.per_sample = not grouped
        prompts = ["What is 2+3?"] * 2 + ["What is 1+1?"] * 2 + ["What is 4+4?"] * 2
        completions = [HANGING[0], r"\boxed{7}", r"\boxed{2}", r"\boxed{3}", "8", r"\boxed{9}"]
        answers = ["5", "5", "2", "2", "", ""]  # the last group has no reference
        rows = [f(prompts=prompts, completions=completions, answer=answers) for f in funcs]
    finally:
        v.close()
    by_row = list(zip(*rows, strict=True))
    assert all(r is None for r in by_row[0]), (kind, by_row)  # every function abstains
    for row in by_row[1:]:
        assert any(r is not None for r in row), (kind, by_row)  # the others are scored
    assert checker.n_timeouts == 1  # checked once, whichever function asked first


def test_the_plot_says_which_lines_are_the_window_and_which_each_batch():
    """F3 (fresh user's trial): the demo's title said "lines: the last W = 128 labelled
    completions; dots: each batch" while its pass_rate line was the per-batch
    ``verifier/pass_rate`` (0.125, 0.125, 0.5, ...), not the window's read pass rate. A line of
    a metric with no window value is labelled "(each batch)", and the title says so; checked on
    the measured demo run's own records."""

    from densereward.io import read_jsonl

    figures = Path(__file__).resolve().parents[1] / "docs" / "figures"
    records = list(read_jsonl(figures / "grpo_demo.reward_quality.jsonl"))
    labels, title = _plotted(records)
    batch = [r["verifier/pass_rate"] for r in records]
    assert list(labels["pass_rate (each batch)"].get_ydata()) == pytest.approx(batch)
    assert "pass_rate" not in labels and "tie_rate (each batch)" in labels
    assert "auroc" in labels and "auroc (each batch)" not in labels  # a window line
    assert 'lines marked "(each batch)": the batch' in title.splitlines()[0], title


def test_undefined_metrics_are_nan_in_records_and_null_in_the_jsonl_as_documented(tmp_path):
    """F5 (fresh user's trial): ``print(tracker.records[-1])`` showed ``"verifier/tpr": NaN``
    where ``reward_quality.jsonl`` holds ``null``, and neither the README, which reads
    ``tracker.records``, nor the attribute's docstring said so. Both representations are checked
    on a real tracker (all-wrong batch: TPR undefined) and the docs are checked to say them."""
    import json
    import math

    from densereward.rewards.tracking import RewardQualityTracker

    tracker = RewardQualityTracker(tmp_path, threshold=0.5)
    tracker.update(prompts=["p"] * 4, scores=[0.2, 0.3, 0.7, 0.1], correct=[0, 0, 0, 0])
    assert math.isnan(tracker.records[-1]["verifier/tpr"])
    row = json.loads((tmp_path / "reward_quality.jsonl").read_text().splitlines()[-1])
    assert row["verifier/tpr"] is None
    repo = Path(__file__).resolve().parents[1]
    readme = " ".join((repo / "README.md").read_text(encoding="utf-8").split())
    grpo = " ".join((repo / "docs" / "grpo.md").read_text(encoding="utf-8").split())
    source = (repo / "src/densereward/rewards/tracking.py").read_text(encoding="utf-8")
    for text in (readme, grpo, " ".join(source.split())):
        assert "NaN in `tracker.records`" in text.replace("``", "`"), "undocumented"
        assert "`null` in `reward_quality.jsonl`" in text.replace("``", "`"), "undocumented"


def test_no_legend_or_text_box_covers_a_plotted_point():
    """Session 13 left alone: in the demo's figure the window's count box covered the end of
    the TPR and threshold lines, and the tie_rate legend the frac_zero_spread_dense points.
    Legends and the count go below each panel now; checked on every panel of the measured demo
    run's figure and of a small real tracker's: no point of a line lies under a legend or a
    boxed text."""
    import matplotlib.pyplot as plt
    import numpy as np

    from densereward.io import read_jsonl
    from densereward.rewards.tracking_plot import _reward_quality_figure

    figures = Path(__file__).resolve().parents[1] / "docs" / "figures"
    for name in ("grpo_demo", "grpo_dynamics_cpu", "grpo_dynamics_qwen05b"):
        records = list(read_jsonl(figures / f"{name}.reward_quality.jsonl"))
        fig = _reward_quality_figure(records, "verifier/")
        try:
            fig.canvas.draw()
            renderer = fig.canvas.get_renderer()
            for ax in fig.axes:
                boxes = [t.get_window_extent(renderer) for t in ax.texts if t.get_bbox_patch()]
                if ax.get_legend() is not None:
                    boxes.append(ax.get_legend().get_window_extent(renderer))
                points = [
                    xy
                    for line in ax.get_lines()
                    for xy in ax.transData.transform(line.get_xydata())
                    if np.isfinite(xy).all()
                ]
                covered = [
                    (round(x), round(y)) for x, y in points for b in boxes if b.contains(x, y)
                ]
                assert not covered, (name, ax.get_legend_handles_labels()[1], covered)
        finally:
            plt.close(fig)
