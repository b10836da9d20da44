"""One answer-extraction policy and the score-token mass floor (issues 13, 22 and 14 item 1).

The sparse reward is the ground truth of every verifier metric, so its agreement with real
labels is a regression table here (GSM8K model solutions, MATH-500, reasoning-gym's own
scorer). The mass floor is tested through the real HTTP backend against a scripted loopback
server that answers at the score position the way a thinking model answers in prose.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from pathlib import Path

import pytest

from densereward.answers import extract_answer, extract_boxed, final_answer_part
from densereward.errors import ConfigError
from densereward.rewards import MathChecker, MathCorrectnessReward, RewardConfig, reference_answer


@pytest.fixture(scope="module")
def checker():
    c = MathChecker(timeout_s=10.0)
    yield c
    c.close()


# ---- the policy: rows of issues 13, 14 and 22 --------------------------------------------------

SPARSE_CASES = [
    # issue 13 row 1: the last box is unfinished -> no final answer, never an earlier box
    (r"First guess \boxed{12}. Rechecking, the answer is \boxed{", "12", 0.0, "no_answer"),
    # issue 13 row 2: \fbox reads like \boxed
    (r"so the result is \fbox{42}", "42", 1.0, None),
    # an empty last box is no answer either
    (r"\boxed{12} and finally \boxed{}", "12", 0.0, "no_answer"),
    # issue 14: thinking never closed (cut by max_completion_length) -> no final answer
    (
        "<think>\nI get \\boxed{7} but let me keep checking the cases one by one",
        "7",
        0.0,
        "unclosed_thinking",
    ),
    ("<think>\nmaybe \\boxed{5}? no.\n</think>\nThe answer is \\boxed{7}.", "7", 1.0, None),
    # a template that opens <think> in the prompt: the completion holds only </think>
    ("maybe 5\n</think>\n\nFinal answer: 7", "7", 1.0, None),
    # issue 22: explicit final-answer lines
    ("She makes 9 * 2 = $18 every day\nA: 18", "18", 1.0, None),
    ("So the answer is $18.", "18", 1.0, None),
    ("**Answer:** 42", "42", 1.0, None),
    ("**Final Answer**: $\\frac{1}{2}$", "0.5", 1.0, None),
    ("Final answer: 12 apples", "12", 1.0, None),
    ("work...\n#### 1,018", "1018", 1.0, None),
    # issue 40 item 7: verl's GSM8K scorer takes "#### N" anywhere in the last 300 characters
    ("23 + 45 = 68. #### 68", "68", 1.0, None),
    ("She pays 5 + 3 = 8 dollars. #### 8 dollars", "8", 1.0, None),
    ("It is 5. #### 5" + " and some more words" * 16, "5", 0.0, "no_answer"),
    ("The final answer is 7. I hope it is correct.", "7", 1.0, None),
    # a number merely mentioned in prose is not an answer
    ("I think it is 5 or maybe 7", "7", 0.0, "no_answer"),
    ("7 + 5 = 12", "12", 0.0, "no_answer"),
    # issue 13 regressions (they passed before; they must keep passing)
    (r"\boxed{\frac{9}{7}}", r"\dfrac{9}{7}", 1.0, None),
    (r"\boxed{\frac{64}{400}}", r"\frac{63}{400}", 0.0, None),
    (r"\boxed{115000}", "115,000", 1.0, None),
    (r"\boxed{528}", "52_8", 0.0, None),
]


@pytest.mark.parametrize(("completion", "reference", "reward", "reason"), SPARSE_CASES)
def test_sparse_reward_follows_the_policy(checker, completion, reference, reward, reason):
    r = checker.check(reference, completion)
    assert (r.reward, r.reason) == (reward, reason), r


def test_reward_function_plain_and_conversational(checker):
    reward = MathCorrectnessReward(checker=checker)
    unclosed = "<think>\nI get \\boxed{7} but let me keep checking"
    closed = "<think>\nmaybe \\boxed{5}\n</think>\n\\boxed{7}"
    plain = reward(completions=[unclosed, closed], answer=["7", "7"])
    conv = reward(
        completions=[[{"role": "assistant", "content": t}] for t in (unclosed, closed)],
        answer=["7", "7"],
    )
    assert plain == conv == [0.0, 1.0]


def test_answer_formats():
    text = "reasoning\nFinal answer: 12"
    assert extract_answer(text, "auto").answer == "12"
    assert extract_answer(text, "final_line").answer == "12"
    assert extract_answer(text, "boxed").reason == "no_answer"
    boxed = r"so \boxed{3}"
    assert extract_answer(boxed, "boxed").answer == "3"
    assert extract_answer(boxed, "final_line").reason == "no_answer"
    assert MathChecker(executor="inline", answer_format="boxed").check("12", text).reward == 0.0
    with pytest.raises(ConfigError, match="answer_format"):
        MathChecker(answer_format="last_number")
    with pytest.raises(ConfigError, match="answer_format"):
        RewardConfig(answer_format="boxd")
    with pytest.raises(ValueError, match="auto, boxed, final_line"):
        extract_answer("x", "any")


def test_one_extractor_everywhere():
    """The verifier's reference-guided prompt, eval-verifier and the reward read one policy."""
    from densereward import prompts

    for text in (r"First \boxed{12}, then \boxed{", "<think>\n\\boxed{7} still", "it is 5 or 7"):
        assert prompts.extract_final_answer(text) is None
        assert extract_answer(text).answer is None
    assert prompts.extract_final_answer(r"so \fbox{42}") == extract_boxed(r"so \fbox{42}") == "42"
    assert reference_answer("9 * 2 = 18\nA: 18") == "18"  # eval-verifier reads references with it
    assert reference_answer(None) is None and reference_answer("  ") is None
    assert final_answer_part("no thinking here") == "no thinking here"
    assert final_answer_part("<think>a</think>\n\nb") == "b"


# ---- when two answers are equal: numbers, mixed numbers, bare answers (issue 28 items 1-3) ----

TOLERANCE_CASES = [
    # Math-Verify alone rounds to 6 decimal places: every number below 5e-7 equals 0 (MV#21)
    (r"\boxed{0.0000002}", "0.0000001", 0.0),
    (r"\boxed{0.0000001}", "0", 0.0),
    # ... and chops differences below 1e-15 (MV#14)
    (r"\boxed{\frac{1}{2^{98}}}", r"\frac{1}{2^{99}}", 0.0),
    (r"\boxed{\frac{x}{2^{98}}}", r"\frac{x}{2^{99}}", 0.0),
    # the rule holds inside tuples, intervals, matrices and equations too
    (r"\boxed{(0.0000002, 1)}", "(0.0000001, 1)", 0.0),
    (r"\boxed{[0.0000002, 1]}", "[0.0000001, 1]", 0.0),
    (r"\boxed{x = 0.0000002}", "0.0000001", 0.0),
    (
        r"\boxed{\begin{pmatrix}0.0000002\\\\1\end{pmatrix}}",
        r"\begin{pmatrix}0.0000001\\\\1\end{pmatrix}",
        0.0,
    ),
    # huge exact numbers compare exactly
    (r"\boxed{1000001}", "1000000", 0.0),
    (r"\boxed{2^{98} + 1}", "2^{98}", 0.0),
    # equal to one part in a million: still equal (Math-Verify's 1/3 == 0.333333 kept)
    (r"\boxed{0.3333333}", r"\frac{1}{3}", 1.0),
    (r"\boxed{0.333333}", r"\frac{1}{3}", 1.0),
    (r"\boxed{1.4142136}", r"\sqrt{2}", 1.0),
    (r"\boxed{1.41}", r"\sqrt{2}", 0.0),
    (r"\boxed{2.5}", r"\frac{5}{2}", 1.0),
    (r"\boxed{9\%}", "9", 1.0),
    (r"\boxed{9\%}", "0.09", 1.0),
    (r"\boxed{0.50000001}", "0.5", 1.0),
]


@pytest.mark.parametrize(("completion", "reference", "reward"), TOLERANCE_CASES)
def test_numbers_are_equal_to_a_relative_tolerance(checker, completion, reference, reward):
    assert checker.check(reference, completion).reward == reward


def test_numbers_equal_rule():
    from fractions import Fraction

    from densereward.answers import REL_TOL, numbers_equal

    assert REL_TOL == 1e-6
    assert not numbers_equal("0.0000002", "0.0000001") and not numbers_equal(2**-98, 2**-99)
    assert not numbers_equal(10**20 + 1, 10**20)  # exact values compare exactly, any size
    assert numbers_equal("1e20", "1.0000005e20") and not numbers_equal("1e20", "1.000002e20")
    assert numbers_equal(Fraction(1, 3), "0.333333") and not numbers_equal(
        Fraction(1, 3), "0.33333"
    )
    assert numbers_equal("0", "0.0") and not numbers_equal("0", "1e-300")


MIXED_CASES = [
    # plain text and LaTeX mixed numbers mean the same sum (the policy of answers.mixed_number)
    ("Final answer: 1 1/4", "5/4", 1.0),
    ("Final answer: 1 1/4", "1.25", 1.0),
    (r"\boxed{1 \frac{1}{4}}", "5/4", 1.0),
    (r"\boxed{2\frac{1}{2}}", "2.5", 1.0),
    ("The answer is -1 1/4.", "-1.25", 1.0),
    (r"\boxed{-2\dfrac{1}{2}}", r"-\frac{5}{2}", 1.0),
    (r"\boxed{\frac{5}{4}}", "1 1/4", 1.0),  # a reference written as a mixed number
    ("Final answer: 1 1/4", "1/4", 0.0),  # not the fraction alone, not a product
    ("Final answer: 1 1/4", "1", 0.0),
    ("Final answer: 1 3/4", "5/4", 0.0),
]


@pytest.mark.parametrize(("completion", "reference", "reward"), MIXED_CASES)
def test_mixed_numbers_are_their_sum(checker, completion, reference, reward):
    assert checker.check(reference, completion).reward == reward


def test_mixed_number_rewrite():
    from densereward.answers import mixed_number

    assert mixed_number("1 1/4") == mixed_number(r"1\frac{1}{4}") == r"\frac{5}{4}"
    assert mixed_number(" -3 2/5 ") == r"-\frac{17}{5}"
    for unchanged in ("2 3/2", "1/4", "1 1/4 cups", "x 1/4", "12"):
        assert mixed_number(unchanged) == unchanged


BARE_CASES = [
    # a completion that is nothing but a number or a math expression is its own final answer
    ("12", "12", 1.0, None),
    ("  12\n", "12", 1.0, None),
    ("12.", "12", 1.0, None),
    ("13", "12", 0.0, None),
    ("$\\frac{1}{2}$", "0.5", 1.0, None),
    ("\\frac{1}{2}", "0.5", 1.0, None),
    ("1 1/4", "5/4", 1.0, None),
    ("-3.5", "-7/2", 1.0, None),
    ("$1,018", "1018", 1.0, None),
    ("<think>\n7 + 5\n</think>\n12", "12", 1.0, None),
    # prose, a relation (work shown, no answer stated) or a second line is still no answer
    ("12 is my guess", "12", 0.0, "no_answer"),
    ("maybe 12", "12", 0.0, "no_answer"),
    ("12 apples", "12", 0.0, "no_answer"),
    ("7 + 5 = 12", "12", 0.0, "no_answer"),
    ("x > 3", "12", 0.0, "no_answer"),
    ("7 + 5\n12", "12", 0.0, "no_answer"),
    ("?", "12", 0.0, "no_answer"),
]


@pytest.mark.parametrize(("completion", "reference", "reward", "reason"), BARE_CASES)
def test_a_bare_answer_is_its_own_final_answer(checker, completion, reference, reward, reason):
    from densereward import prompts

    r = checker.check(reference, completion)
    assert (r.reward, r.reason) == (reward, reason), r
    extracted = extract_answer(completion)
    assert (extracted.source == "bare") == (reason is None)
    # the verifier's reference-guided prompt reads the same answer
    assert prompts.extract_final_answer(completion) == extracted.answer
    # only answer_format auto reads bare answers (boxed / final_line are strict)
    assert extract_answer(completion, "boxed").answer is None
    assert extract_answer(completion, "final_line").answer is None


# ---- agreement with real labels (issue 22, item 2) --------------------------------------------

# Rows where the sparse reward and the file's is_correct disagree, with the reason
# (label noise or extraction). Measured: none on the 2,640 dev solutions.
KNOWN_GSM8K_DISAGREEMENTS: dict[tuple[int, str], str] = {}


def test_gsm8k_agreement_with_labels_per_generator(data_dir: Path, checker):
    from densereward.eval_verifier import load_responses
    from densereward.rewards.agreement import sparse_agreement

    rows = load_responses(data_dir / "gsm8k" / "model_solutions_dev.jsonl")
    assert len(rows) == 2640
    result = sparse_agreement(rows, checker, max_listed=10_000)
    assert result["n_abstained"] == 0
    for gen, summary in result["per_generator"].items():
        assert summary["n"] == 660
        assert summary["agreement"] >= 0.98, (gen, summary)
    assert result["overall"]["n_positive_labels"] == 1008
    unexplained = [
        d
        for d in result["disagreements"]
        if (int(d["problem_id"].rsplit("-", 1)[1]), d["generator"]) not in KNOWN_GSM8K_DISAGREEMENTS
    ]
    assert not unexplained, unexplained[:5]


def test_math500_boxed_solutions_unchanged(data_dir: Path, checker):
    """MATH-style boxed completions: every reference solution still earns 1.0."""
    rows = [json.loads(x) for x in (data_dir / "math500" / "test.jsonl").read_text().splitlines()]
    checks = checker.check_batch([r["answer"] for r in rows], [r["solution"] for r in rows])
    assert Counter(c.reward for c in checks) == Counter({1.0: 500})


@pytest.mark.parametrize("task", ["chain_sum", "basic_arithmetic"])
def test_reasoning_gym_agreement_with_the_task_scorer(task, checker):
    """Our reward on boxed / answer-line / wrong / prose completions vs the task's own scorer."""
    import reasoning_gym

    ds = reasoning_gym.create_dataset(task, size=40, seed=3)
    agree = total = 0
    for entry in ds:
        gold = str(entry["answer"])
        wrong = str(int(float(gold)) + 1) if gold.lstrip("-").isdigit() else gold + "1"
        for completion in (
            f"Adding up: \\boxed{{{gold}}}",
            f"Let me compute.\nThe answer is {gold}.",
            f"\\boxed{{{wrong}}}",
            f"Answer: {wrong}",
            f"It is {gold} or so",  # prose: no answer for both
        ):
            ours = checker.check(gold, completion).reward
            extracted = extract_answer(completion).answer
            theirs = 0.0 if extracted is None else float(ds.score_answer(extracted, entry) >= 1.0)
            agree += ours == theirs
            total += 1
    assert agree / total >= 0.98, f"{agree}/{total}"


# ---- the tracker and eval-verifier see the policy (issue 22, items 3-4) -----------------------


def test_tracker_logs_frac_no_answer_sparse_and_warns_once(caplog, tmp_path):
    from servers import MisbehavingServer, scripted_verifier

    from densereward.rewards import RewardQualityTracker, VerifierReward

    with MisbehavingServer() as srv:
        v = scripted_verifier(srv.base_url, granularity=20)
        tracker = RewardQualityTracker(tmp_path)
        reward = VerifierReward(
            v,
            reference_guided=False,
            injection_penalty=None,
            tracker=tracker,
            checker=MathChecker(executor="inline"),
        )
        comps = [
            "<think>\nthe answer is surely 4 but",
            "I believe it is 4",
            "4, I guess",
            "\\boxed{4}",
        ]
        logged: dict[str, float] = {}
        kwargs = {"problem": ["2+2?"] * 4, "answer": ["4"] * 4}
        with caplog.at_level(logging.WARNING, logger="densereward.rewards.tracking"):
            out = reward(
                prompts=["2+2?"] * 4, completions=comps, log_metric=logged.__setitem__, **kwargs
            )
            reward(prompts=["2+2?"] * 4, completions=comps, **kwargs)
        v.close()
        # the unclosed-thinking completion was shown as empty: 0 with no request for it
        assert out[0] == 0.0 and len(srv.chat_requests()) == 2 * 3
        shown = [json.dumps(r["body"]["messages"]) for r in srv.chat_requests()]
        assert not any("surely" in s for s in shown)
    assert logged["verifier/frac_no_answer_sparse"] == pytest.approx(0.75)
    assert logged["verifier/frac_unclosed_thinking_sparse"] == pytest.approx(0.25)
    warnings = [r for r in caplog.records if "no extractable final answer" in r.getMessage()]
    assert len(warnings) == 1 and "format" in warnings[0].getMessage()
    rec = json.loads((tmp_path / "reward_quality.jsonl").read_text().splitlines()[0])
    assert rec["verifier/frac_no_answer_sparse"] == pytest.approx(0.75)


@pytest.mark.parametrize(("reference_guided", "unread"), [(False, 0), (True, 2)])
def test_no_answer_counts_have_names_that_say_what_they_count(tmp_path, reference_guided, unread):
    """Issue 41 item 4: one record held ``verifier/frac_no_answer: 1`` beside
    ``verifier/n_no_answer: 0`` -- the sparse check's share of this batch without a final answer,
    and the verifier's running count of answer_match candidates it scored 0 unread (0 under the
    reference-free prompt). Each name now says which: ``frac_no_answer_sparse`` and
    ``n_unread_no_answer``; neither old name is logged."""
    from servers import MisbehavingServer, scripted_verifier

    from densereward.rewards import RewardQualityTracker, VerifierReward

    comps = ["I believe it is 4", "4, I guess", "\\boxed{4}", "The answer is 5."]
    with MisbehavingServer() as srv:
        v = scripted_verifier(srv.base_url, granularity=5)
        reward = VerifierReward(
            v,
            reference_guided=reference_guided,
            injection_penalty=None,
            tracker=RewardQualityTracker(tmp_path),
            checker=MathChecker(executor="inline"),
        )
        logged: dict[str, float] = {}
        reward(
            prompts=["2+2?"] * 4,
            completions=comps,
            problem=["2+2?"] * 4,
            answer=["4"] * 4,
            log_metric=logged.__setitem__,
        )
        assert v.stats.n_unread_no_answer == unread
        v.close()
    rec = json.loads((tmp_path / "reward_quality.jsonl").read_text().splitlines()[0])
    for got in (logged, rec):
        assert got["verifier/frac_no_answer_sparse"] == pytest.approx(0.5)  # 2 of 4, either prompt
        assert got["verifier/total/n_unread_no_answer"] == unread
        assert "verifier/frac_no_answer" not in got and "verifier/n_no_answer" not in got


def test_unread_completions_are_counted_apart_per_batch_and_in_total(tmp_path, caplog):
    """Issue 41 items 2 and 3 of the rerun. A batch whose completions all lack a final answer
    (the answer_match prompt gives them 0 without a read) drew ``verifier/tnr`` = 1.0 from zeros
    nobody read, and the warning said the verifier scored them. Now the quality metrics rest on
    reads only (``n_read``; none: TNR undefined, the reason says why), ``n_unread`` counts the
    batch, and the engine's running count is ``total/``: 4 then 2 per batch, 4 then 6 in total."""
    from servers import Fault, MisbehavingServer, scripted_verifier

    from densereward.rewards import RewardQualityTracker, VerifierReward
    from densereward.rewards.tracking_plot import _empty_panel_reason

    batches = [
        ["I believe it is 4", "4, I guess"] * 2,
        ["I believe it is 4", "4, I guess", "\\boxed{4}", "The answer is 5."],
    ]
    tracker = RewardQualityTracker(tmp_path, threshold=0.5, min_per_class=1)
    logged: list[dict[str, float]] = []
    with MisbehavingServer() as srv, caplog.at_level(logging.WARNING):
        srv.default = Fault("ok", top_logprobs=(("E", -0.05), ("A", -3.0)), text="E")  # reads ~1
        v = scripted_verifier(srv.base_url, granularity=5)
        reward = VerifierReward(
            v, injection_penalty=None, tracker=tracker, checker=MathChecker(executor="inline")
        )
        for comps in batches:
            logged.append({})
            reward(
                prompts=["2+2?"] * 4,
                completions=comps,
                problem=["2+2?"] * 4,
                answer=["4"] * 4,
                log_metric=logged[-1].__setitem__,
            )
        v.close()
    rows = [json.loads(x) for x in (tmp_path / "reward_quality.jsonl").read_text().splitlines()]
    for got in (logged, rows):
        assert [r["verifier/n_unread"] for r in got] == [4.0, 2.0]  # this batch's
        assert [r["verifier/n_read"] for r in got] == [0.0, 2.0]
        assert [r["verifier/total/n_unread_no_answer"] for r in got] == [4.0, 6.0]  # the sum
        assert [r["verifier/n_abstained"] for r in got] == [0.0, 0.0]
        assert "verifier/n_unread_no_answer" not in got[0]  # a running count is named total/
    assert "verifier/tnr" not in logged[0] and rows[0]["verifier/tnr"] is None
    assert rows[0]["verifier/window/n_read"] == 0.0 and rows[1]["verifier/window/n_read"] == 2.0
    # on the 2 reads, both accepted (with the 2 unread zeros TNR was 2/3)
    assert rows[1]["verifier/tpr"] == 1.0 and rows[1]["verifier/tnr"] == 0.0
    reason = _empty_panel_reason(rows[:1], ("tpr", "tnr"), "verifier/")
    assert reason.startswith("no completion in the window was read by the verifier (4 of 4 in")
    text = " ".join(r.getMessage() for r in caplog.records)
    assert (
        "4 of 4 completions had no final answer and were not read; they get the reward of an "
        "answer the sparse check marks wrong, without a verifier read"
        in text
        and "raise the completion length limit (training.max_completion_length in a densereward "
        "config, GRPOConfig(max_completion_length=...) in your own script)"
        in text
    )
    assert "the verifier scores them" not in text


def test_eval_verifier_reports_agreement_and_labels_unlabelled(data_dir: Path, tmp_path, capsys):
    from densereward.cli import main as cli_main

    src = [json.loads(x) for x in (data_dir / "gsm8k" / "model_solutions_dev.jsonl").open()][:6]
    path = tmp_path / "unlabelled.jsonl"
    with path.open("w") as f:
        for i, rec in enumerate(src):
            for gen in ("6b_finetuning", "175b_verification"):
                row = {
                    "problem_id": f"p{i}",
                    "problem": rec["question"],
                    "generator": gen,
                    "response": rec[gen]["solution"],
                    "reference": rec["ground_truth"],
                }
                if i < 3:  # half the file is labelled
                    row["is_correct"] = rec[gen]["is_correct"]
                f.write(json.dumps(row) + "\n")
    scores = tmp_path / "scores.jsonl"
    with scores.open("w") as f:
        for i in range(6):
            for gen in ("6b_finetuning", "175b_verification"):
                f.write(json.dumps({"problem_id": f"p{i}", "generator": gen, "score": 0.5}) + "\n")
    out = tmp_path / "out"
    args = [
        "eval-verifier",
        "--responses",
        str(path),
        "--scores",
        str(scores),
        "--out",
        str(out),
        "--bootstrap",
        "0",
        "--no-plots",
    ]
    assert cli_main(args) != 0
    err = capsys.readouterr().err
    assert "is_correct" in err and "--label-with-sparse" in err
    assert cli_main([*args, "--label-with-sparse"]) == 0
    meta = json.loads((out / "metrics.json").read_text())["meta"]
    assert meta["n_labelled_by_sparse_reward"] == 6
    assert meta["sparse_agreement"]["overall"] == {
        "agreement": 1.0,
        "n": 6,
        "n_positive_labels": sum(
            src[i][g]["is_correct"]
            for i in range(3)
            for g in ("6b_finetuning", "175b_verification")
        ),
        "n_positive_rewards": meta["sparse_agreement"]["overall"]["n_positive_rewards"],
    }
    assert "sparse reward vs labels" in (out / "report.md").read_text()


# ---- the score-token mass floor (issue 13 row 3) ----------------------------------------------

PROSE_AT_SCORE = (("So", math.log(0.562)), ("Got", math.log(0.438)), ("T", math.log(2e-6)))


def test_low_mass_read_abstains_through_http(server):
    from servers import Fault, scripted_verifier

    server.default = Fault("ok", top_logprobs=PROSE_AT_SCORE, text="So")
    v = scripted_verifier(server.base_url, granularity=20)
    r = v.score(problem="What is 7+5?", response="12")
    assert r.value is None and r.mass == pytest.approx(2e-6)
    assert "2e-06" in r.reason and "min_mass 0.5" in r.reason
    assert v.stats.n_low_mass == 1 and v.stats.n_abstained == 1
    # pairwise: a pair with an abstained read has no preference
    assert v.compare(problem="p", a="x", b="y").preference is None
    # progress scoring floors the same way
    assert v.progress_batch(tasks=["t"], trajectories=["s"])[0].value is None
    v.close()
    # without the floor the same read was a confident top score (the bug)
    v0 = scripted_verifier(server.base_url, granularity=20, min_mass=0.0)
    assert v0.score(problem="What is 7+5?", response="12").value == pytest.approx(1.0)
    v0.close()
    with pytest.raises(ConfigError, match="min_mass"):
        scripted_verifier(server.base_url, min_mass=1.0)


def test_low_mass_counted_in_grpo_and_sac_metrics(server):
    from servers import Fault, scripted_verifier

    from densereward.callbacks import VerifierDynamicsCallback
    from densereward.rewards import RewardQualityTracker, VerifierReward

    server.default = Fault("ok", top_logprobs=PROSE_AT_SCORE, text="So")
    v = scripted_verifier(server.base_url, granularity=20)
    logged: dict[str, float] = {}
    reward = VerifierReward(
        v,
        tracker=RewardQualityTracker(),
        checker=MathChecker(executor="inline"),
        reference_guided=False,
        injection_penalty=None,
    )
    out = reward(
        prompts=["q", "q"],
        completions=["\\boxed{1}", "\\boxed{2}"],
        answer=["1", "1"],
        log_metric=logged.__setitem__,
    )
    assert out == [None, None] and logged["verifier/total/n_low_mass"] == 2.0
    cb = VerifierDynamicsCallback(engine_stats=v.stats)
    assert cb.metrics()["verifier/total/n_low_mass"] == 2.0
    v.close()


def test_group_reward_ranks_unclosed_thinking_last(server):
    """Group reward: a completion whose thinking never closed loses every comparison."""
    from servers import scripted_verifier

    from densereward.rewards import GroupVerifierReward

    v = scripted_verifier(server.base_url, granularity=20)
    reward = GroupVerifierReward(
        v, reference_guided=False, injection_penalty=None, num_generations=3, method="round_robin"
    )
    comps = ["<think>\nit is 9, surely", "<think>\nok\n</think>\n\\boxed{9}", "\\boxed{9}"]
    out = reward(prompts=["3*3?"] * 3, completions=comps, problem=["3*3?"] * 3)
    v.close()
    assert out[0] == 0.0 and out[1] > 0.0 and out[2] > 0.0
    shown = [json.dumps(r["body"]["messages"]) for r in server.chat_requests()]
    assert shown and not any("surely" in s or "<think>" in s for s in shown)
