"""The path-scoring pieces of issue 37: the programmatic process reward (oracle), the shuffled-judge
control and the judge's ``process`` prompt, through the reward kinds."""

from __future__ import annotations

import pickle

import pytest

from densereward.errors import ConfigError
from densereward.results import ScoreResult
from densereward.rewards import RewardConfig, build_reward_funcs
from densereward.rewards.math import MathChecker
from densereward.rewards.process import (
    PROCESS_CRITERION,
    ProcessOracle,
    ShuffledJudge,
    chain_terms,
    process_score,
)

P = "State the final answer to the following arithmetic problem: 4 + 3 - 2 + 6 ="


def test_process_score_is_the_share_of_correct_running_totals():
    assert chain_terms(P) == [4, 3, -2, 6]
    assert process_score(P, "4+3=7; 7-2=5; 5+6=11; The answer is 11.") == 1.0
    assert process_score(P, "4+3=7; 7-2=6; 6+6=12; The answer is 12.") == pytest.approx(1 / 3)
    assert process_score(P, "4+3=8; 8-2=6; 6+6=12; The answer is 12.") == 0.0
    assert process_score(P, "4 + 3 = 7, then 7 - 2 = 5, then 5 + 6 = 11") == 1.0  # spacing
    assert process_score(P, "The answer is 11.") == 0.0  # no steps shown: no progress shown
    assert process_score("What is 2+2?", "2+2=4") is None  # not chain_sum: no oracle
    assert process_score(P, None) is None


def test_the_oracle_judges_inside_the_gated_reward():
    """judge=process_oracle: the same composition, the programmatic score in place of the judge.
    In an all-wrong group (judge_only_steps=keep) more correct steps rank higher."""
    funcs, _ = build_reward_funcs(
        RewardConfig(type="gated", judge="process_oracle", judge_only_steps="keep", track=False),
        lambda: pytest.fail("the oracle reads no model"),
        checker=MathChecker(executor="inline"),
        num_generations=4,
    )
    comps = [
        "4+3=7; 7-2=5; 5+6=12; The answer is 12.",
        "4+3=8; 8-2=6; 6+6=12; The answer is 12.",
        "4+3=7; 7-2=6; 6+6=12; The answer is 12.",
        "The answer is 3.",
    ]
    r = funcs[0](prompts=[P] * 4, completions=comps, answer=["11"] * 4, problem=[P] * 4)
    assert r[0] > r[2] > r[1] and r[3] == pytest.approx(r[1])  # 2/3, 1/3, 0, 0 correct steps
    assert max(r) == pytest.approx(0.05) and min(r) == pytest.approx(-0.05)
    oracle = ProcessOracle()
    out = oracle.score_batch(problems=["What is 2+2?"], responses=["4"])
    assert out[0].value is None and out[0].reason == "not a chain_sum problem"


def _two_groups(funcs, completions):
    """One call of the gated reward on two groups of ``P`` (4 completions each, answer 11)."""
    funcs[0](
        prompts=[P] * 4 + [P + " "] * 4,
        completions=completions * 2,
        answer=["11"] * 8,
        problem=[P] * 8,
    )


def test_a_judge_that_ties_everywhere_is_said_once(caplog):
    """A judge whose scores never span the spread floor ranks nothing: the run must be told."""
    cfg = RewardConfig(type="gated", judge="process_oracle", judge_only_steps="keep", track=False)
    funcs, _ = build_reward_funcs(
        cfg, None, checker=MathChecker(executor="inline"), num_generations=4
    )
    wrong = ["The answer is 3.", "The answer is 4.", "The answer is 5.", "The answer is 6."]
    with caplog.at_level("WARNING", logger="densereward.rewards.gated"):
        for _ in range(3):  # 2 all-wrong groups per call, process score 0 everywhere: 6 ties
            _two_groups(funcs, wrong)
        assert "spread_floor" not in caplog.text  # fewer than TIE_WARN_MIN_STRATA strata yet
        for _ in range(3):
            _two_groups(funcs, wrong)
    assert caplog.text.count("spanned less than reward.spread_floor=0.02") == 1
    assert "in 8 of the 8 correctness strata" in caplog.text
    caplog.clear()
    funcs, _ = build_reward_funcs(
        cfg, None, checker=MathChecker(executor="inline"), num_generations=4
    )
    ranked = [
        "4+3=7; 7-2=5; 5+6=12; The answer is 12.",
        "4+3=8; The answer is 3.",
        "4+3=7; 7-2=6; The answer is 6.",
        "The answer is 3.",
    ]
    with caplog.at_level("WARNING", logger="densereward.rewards.gated"):
        for _ in range(5):
            _two_groups(funcs, ranked)
    assert "spread_floor" not in caplog.text  # the oracle ranks these: no warning


class _Fixed:
    """A judge returning fixed scores in order, recording the criteria it was asked."""

    def __init__(self):
        self.config = None
        self.criteria = []

    def score_batch(self, problems, responses, criteria=None, references=None, prompt=None):
        self.criteria.append((criteria, prompt, references))
        return [ScoreResult(value=0.1 * (i + 1), mass=1.0) for i in range(len(responses))]


def test_shuffled_judge_permutes_within_groups_only():
    problems = ["a"] * 4 + ["b"] * 4
    judge = ShuffledJudge(_Fixed(), seed=3)
    seen = set()
    for _ in range(5):
        got = [r.value for r in judge.score_batch(problems=problems, responses=["x"] * 8)]
        assert sorted(got[:4]) == pytest.approx([0.1, 0.2, 0.3, 0.4])  # a's scores stay in a
        assert sorted(got[4:]) == pytest.approx([0.5, 0.6, 0.7, 0.8])
        seen.add(tuple(got))
    assert len(seen) > 1  # the permutation changes from call to call
    again = ShuffledJudge(_Fixed(), seed=3)
    first = ShuffledJudge(_Fixed(), seed=3).score_batch(problems=problems, responses=["x"] * 8)
    assert [r.value for r in again.score_batch(problems=problems, responses=["x"] * 8)] == [
        r.value for r in first
    ]  # seeded
    copy = pickle.loads(pickle.dumps(judge))
    assert copy.seed == 3
    cfg = RewardConfig(type="dense", judge="shuffled", track=False)
    (reward,), _ = build_reward_funcs(cfg, _Fixed(), num_generations=4)
    assert isinstance(reward.verifier, ShuffledJudge)


def test_the_process_prompt_asks_the_process_criterion_with_the_reference():
    judge = _Fixed()
    (reward,), _ = build_reward_funcs(
        RewardConfig(type="dense", reference_prompt="process", track=False), judge
    )
    reward(prompts=[P], completions=["4+3=7; 7-2=5; 5+6=11; The answer is 11."], answer=["11"])
    criteria, prompt, refs = judge.criteria[-1]
    assert criteria == {"process": PROCESS_CRITERION} and prompt == "pointwise" and refs == ["11"]
    with pytest.raises(ConfigError, match="verifier | process_oracle | shuffled"):
        RewardConfig(judge="oracle")
    with pytest.raises(ConfigError, match="answer_match | process"):
        RewardConfig(reference_prompt="steps")
