"""`densereward eval-verifier` end to end: GSM8K adapter, score reuse, outputs, real verifier."""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from densereward import eval_verifier as E
from densereward import metrics as M
from densereward.errors import ConfigError, DataError
from densereward.eval_verifier.data import _keys as row_keys


@pytest.fixture(scope="module")
def gsm8k(data_dir):
    return data_dir / "gsm8k" / "model_solutions_dev.jsonl"


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="densereward eval-verifier")
    E.add_arguments(parser)
    return E.main(parser.parse_args(list(argv)))


def synthetic_scores(rows, path, *, seed=0, abstain_every=7):
    """A scores.jsonl like the command writes, with scores that separate the classes imperfectly."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for i, (key, row) in enumerate(zip(row_keys(rows), rows, strict=True)):
            score = float(np.clip(0.55 * row["is_correct"] + 0.2 + rng.normal(0, 0.2), 0, 1))
            if abstain_every and i % abstain_every == 3:
                score = None
            f.write(
                json.dumps(
                    {
                        "problem_id": key[0],
                        "generator": key[1],
                        "response_index": key[2],
                        "is_correct": row["is_correct"],
                        "score": score,
                    }
                )
                + "\n"
            )


def test_gsm8k_adapter(gsm8k):
    rows = E.load_responses(gsm8k, limit=10)
    assert len(rows) == 40
    assert {r["generator"] for r in rows} == set(E.GSM8K_GENERATORS)
    assert {r["family"] for r in rows} == {"6b", "175b"}
    first = json.loads(gsm8k.read_text().splitlines()[0])
    r0 = rows[0]
    assert r0["problem_id"] == "gsm8k-dev-0" and r0["problem"] == first["question"]
    assert r0["response"] == first[r0["generator"]]["solution"]
    assert r0["is_correct"] is first[r0["generator"]]["is_correct"]
    assert r0["reference"].endswith("A: 18")
    assert len(E.load_gsm8k_model_solutions(gsm8k)) == 4 * 660


def test_generic_jsonl_loader_and_errors(tmp_path):
    p = tmp_path / "r.jsonl"
    rows = [
        {"problem": f"q{i % 3}", "response": f"r{i}", "is_correct": i % 2 == 0, "generator": "g"}
        for i in range(9)
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = E.load_responses(p, limit=2)
    assert len(got) == 6 and len({r["problem_id"] for r in got}) == 2
    p.write_text(json.dumps({"problem": "q", "response": "r", "generator": "g"}) + "\n")
    with pytest.raises(DataError, match="is_correct"):
        E.load_responses(p)
    p.write_text(
        json.dumps({"problem": "q", "response": "r", "generator": "g", "is_correct": "maybe"})
        + "\n"
    )
    with pytest.raises(DataError):
        E.load_responses(p)
    with pytest.raises(DataError):
        E.load_responses(tmp_path / "missing.jsonl")


def _generic_lines(n=4):
    return [
        json.dumps(
            {"problem": f"q{i}", "response": f"r{i}", "is_correct": i % 2 == 0, "generator": "g"}
        )
        for i in range(n)
    ]


def _cli(*argv: str) -> int:
    from densereward.cli import main

    return main(["eval-verifier", *argv])


def test_a_broken_line_is_an_error_naming_file_and_line_and_no_row_vanishes(tmp_path, capsys):
    """Issue 41 item 5: a malformed middle line was `internal error: JSONDecodeError` (exit 1, no
    file, no line) and a cut-off last line was dropped without a word; both are now a DataError
    naming file:line, exit 2, and nothing is written."""
    lines = _generic_lines()
    mid = tmp_path / "mid.jsonl"
    mid.write_text("\n".join([lines[0], lines[1][:-5], *lines[2:]]) + "\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(mid))}:2: not valid JSON \("):
        E.load_responses(mid)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join([*lines[:3], lines[3][:-7]]))  # a copy that stopped mid-line
    with pytest.raises(DataError, match=rf"^{re.escape(str(cut))}:4: not valid JSON .*cut off"):
        E.load_responses(cut)
    not_a_row = tmp_path / "list.jsonl"
    not_a_row.write_text(lines[0] + "\n[1, 2]\n")
    with pytest.raises(DataError, match=r"list\.jsonl:2: a row must be a JSON object"):
        E.load_responses(not_a_row)
    scores = tmp_path / "scores.jsonl"
    scores.write_text(
        '{"problem_id": "p", "generator": "g", "score": 0.5}\n{"problem_id": "p", "ge'
    )
    with pytest.raises(DataError, match=r"scores\.jsonl:2: not valid JSON .*cut off"):
        E.load_scores(scores)
    # the command: one line, exit 2, no output directory
    for path, line in ((mid, 2), (cut, 4)):
        out = tmp_path / f"out-{path.stem}"
        assert _cli("--responses", str(path), "--out", str(out), "--scores", str(scores)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"densereward: error: {path}:{line}: not valid")
        assert not out.exists()


def test_rows_of_another_shape_name_the_missing_fields_and_the_accepted_shapes(tmp_path):
    """Issue 41 item 5: rows with other field names (a 'question' among them) got a message
    about GSM8K generator objects; now the missing fields, the row's fields and both accepted
    shapes are named."""
    p = tmp_path / "other.jsonl"
    p.write_text(json.dumps({"question": "1+1?", "answer": "2", "correct": True}) + "\n")
    with pytest.raises(DataError) as err:
        E.load_responses(p)
    msg = str(err.value)
    assert msg.startswith(
        f"{p}:1: missing field(s) ['problem', 'response', 'generator', 'is_correct'] "
        "(the row has ['answer', 'correct', 'question']); a row is either "
        "{problem, response, is_correct, generator}"
    )
    assert "GSM8K model-solutions line {question, <generator>: {solution, is_correct}" in msg
    assert "generator object" not in msg and "--label-with-sparse" not in msg
    # only is_correct missing: the sparse reward's way out is named
    p.write_text(json.dumps({"problem": "q", "response": "r", "generator": "g"}) + "\n")
    with pytest.raises(
        DataError, match=r"missing field\(s\) \['is_correct'\].*--label-with-sparse"
    ):
        E.load_responses(p)


def test_a_fractional_granularity_is_refused_by_the_command(tmp_path, capsys):
    """Issue 41 item 5: verifier.granularity=10.5 became 10 silently; now exit 2 naming the key."""
    p = tmp_path / "r.jsonl"
    p.write_text("\n".join(_generic_lines()) + "\n")
    out = tmp_path / "out"
    assert _cli("--responses", str(p), "--out", str(out), "verifier.granularity=10.5") == 2
    assert capsys.readouterr().err.strip() == (
        "densereward: error: verifier.granularity: expected int, got 10.5"
    )
    assert not out.exists()


def test_build_config_from_yaml_and_overrides(tmp_path):
    y = tmp_path / "v.yaml"
    y.write_text("verifier:\n  granularity: 5\n  threshold: 0.6\n")
    c = E.build_config(str(y), ["verifier.granularity=10"])
    assert c.granularity == 10 and c.threshold == 0.6
    with pytest.raises(ConfigError):
        E.build_config(None, ["verifier.granularty=10"])
    with pytest.raises(ConfigError):
        E.build_config(None, ["training.max_steps=3"])


@pytest.mark.slow
def test_cli_with_precomputed_scores_end_to_end(gsm8k, tmp_path):
    rows = E.load_responses(gsm8k, limit=30)
    scores_in = tmp_path / "in.jsonl"
    synthetic_scores(rows, scores_in)
    out = tmp_path / "out"
    rc = run_cli(
        "--responses",
        str(gsm8k),
        "--scores",
        str(scores_in),
        "--limit",
        "30",
        "--out",
        str(out),
        "--bootstrap",
        "200",
        "--set",
        "verifier.threshold=0.5",
    )
    assert rc == 0
    for name in (
        "metrics.json",
        "report.md",
        "scores.jsonl",
        "tpr_tnr_by_difficulty.png",
        "tpr_tnr_by_generator.png",
        "reliability.png",
    ):
        assert (out / name).is_file(), name
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    m = json.loads((out / "metrics.json").read_text())
    recs = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert len(recs) == 120
    assert set(recs[0]) >= {"problem_id", "generator", "is_correct", "score", "mass", "abstained"}

    # Recompute TPR/TNR independently from scores.jsonl, overall and per generator.
    def rates(rs):
        kept = [r for r in rs if not r["abstained"]]
        pos = [r["score"] >= 0.5 for r in kept if r["is_correct"]]
        neg = [r["score"] < 0.5 for r in kept if not r["is_correct"]]
        return sum(pos) / len(pos), sum(neg) / len(neg)

    n_abst = sum(r["abstained"] for r in recs)
    assert (
        n_abst > 0
        and m["counts"]["n_abstained"] == n_abst
        and m["counts"]["n_scored"] == 120 - n_abst
    )
    assert (m["overall"]["tpr"], m["overall"]["tnr"]) == pytest.approx(rates(recs))
    for g in E.GSM8K_GENERATORS:
        pg = m["per_generator"][g]
        assert (pg["tpr"], pg["tnr"]) == pytest.approx(
            rates([r for r in recs if r["generator"] == g])
        )
        assert pg["n_abstained"] == sum(r["abstained"] for r in recs if r["generator"] == g)
        assert "tpr" in m["per_generator_balanced"][g]
    # difficulty bins cover every scored response; edges are sorted; per-generator cells exist
    q = m["difficulty"]["quartiles"]
    assert sum(b["n"] or 0 for b in q["bins"]) == m["counts"]["n_scored"]
    assert q["edges"] == sorted(q["edges"]) and len(q["bins"]) == 4
    assert set(q["bins"][1]["per_generator"]) == set(E.GSM8K_GENERATORS)
    assert len(m["difficulty"]["equal_width"]["bins"]) == 4
    ci = m["confidence_intervals"]["tpr"]
    assert ci["low"] <= m["overall"]["tpr"] <= ci["high"]
    assert m["tts"]["by_family"]["weak"] == "6b" and "gap_closed" in m["tts"]["by_family"]
    report = (out / "report.md").read_text()
    assert "## Per generator" in report and "175b_verification" in report and "quartiles" in report
    assert f"{n_abst} abstained" in report
    why = f"not recorded (no metrics.json beside {scores_in})"
    assert f"- prompt: `{why}`" in report and f"- verifier: `{why}`" in report
    cal = m["threshold_calibration"]
    kept = [r for r in recs if not r["abstained"]]
    best = M.best_threshold([r["score"] for r in kept], [r["is_correct"] for r in kept])
    assert cal["threshold"] == pytest.approx(best["threshold"])
    assert cal["cross_validated"]["n_splits"] == 5
    assert (
        "## Accept threshold" in report and f"verifier.threshold={cal['threshold']:.4f}" in report
    )

    # The written scores file is itself reusable and reproduces the metrics exactly.
    out2 = tmp_path / "out2"
    assert (
        run_cli(
            "--responses",
            str(gsm8k),
            "--scores",
            str(out / "scores.jsonl"),
            "--limit",
            "30",
            "--out",
            str(out2),
            "--bootstrap",
            "200",
            "--no-plots",
            "verifier.threshold=0.5",  # the first run's threshold (the default is auto)
        )
        == 0
    )
    m2 = json.loads((out2 / "metrics.json").read_text())
    assert m2["overall"] == m["overall"] and m2["per_generator"] == m["per_generator"]
    assert not (out2 / "reliability.png").exists()


def test_score_reuse_detects_mismatch(gsm8k, tmp_path):
    rows = E.load_responses(gsm8k, limit=3)
    recs = [{"score": 0.5, "mass": 1.0} for _ in rows]
    metrics = E.evaluate(rows, [0.9 if r["is_correct"] else 0.1 for r in rows], n_bootstrap=0)
    E.write_outputs(tmp_path, rows, recs, metrics, plots=False)
    stored = E.load_scores(tmp_path / "scores.jsonl")
    assert [r["score"] for r in E.align_scores(rows, stored)] == [0.5] * 12
    # fewer problems than stored: extra records are ignored
    assert len(E.align_scores(rows[:4], stored)) == 4
    other = E.load_responses(gsm8k, limit=4)
    with pytest.raises(DataError, match="no score"):
        E.align_scores(other, stored)
    changed = [dict(r) for r in rows]
    changed[0]["response"] += " (edited)"
    with pytest.raises(
        DataError,
        match=r"model_solutions_dev.jsonl:1: this response .* is not the one scored at .*scores.jsonl:1 ",
    ):
        E.align_scores(changed, stored)


def _scored_file(tmp_path: Path) -> tuple[Path, list, Path, Path]:
    """Six labelled rows and an eval-verifier output scored from them: (responses file, rows,
    output directory, its scores.jsonl)."""
    good = tmp_path / "labelled.jsonl"
    good.write_text("\n".join(_generic_lines(6)) + "\n")
    rows = E.load_responses(good)
    scored = tmp_path / "ev1"
    metrics = E.evaluate(rows, [0.9 if r["is_correct"] else 0.1 for r in rows], n_bootstrap=0)
    recs = [{"score": 0.5, "mass": 1.0} for _ in rows]
    E.write_outputs(scored, rows, recs, metrics, plots=False, meta={"responses": str(good)})
    scores = scored / "scores.jsonl"
    return good, rows, scored, scores


def test_a_changed_response_under_scores_names_both_lines_the_key_and_the_fix(tmp_path, capsys):
    """F7: a response changed since scoring was "scores file was computed for a different
    response at ('4de387bf04d0', 'genA', 0); re-score": no file, no line, no flag. It now names
    the responses file:line, the scores file:line, the key and the fix (the responses file the
    scores were made from, when metrics.json records it)."""
    good, rows, scored, scores = _scored_file(tmp_path)
    lines = good.read_text().splitlines()
    edited = json.loads(lines[2])
    edited["response"] += " (edited)"
    changed = tmp_path / "changed.jsonl"
    changed.write_text("\n".join([*lines[:2], json.dumps(edited), *lines[3:]]) + "\n")
    key = f"problem_id={rows[2]['problem_id']!r} generator='g' #0"
    out = tmp_path / "out"
    args = ["--responses", str(changed), "--scores", str(scores), "--out", str(out)]
    assert _cli(*args) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"densereward: error: {changed}:3: this response ({key}) is not the one scored at "
        f"{scores}:3 (its response_sha1 differs): the scores were made from {good} "
        f"({scored / 'metrics.json'} meta.responses); pass that file as --responses, or score "
        "this one again without --scores"
    ]
    assert not out.exists()
    # the file edited in place after scoring: score it again
    good.write_text(changed.read_text())
    assert _cli("--responses", str(good), "--scores", str(scores), "--out", str(out)) == 2
    head = (
        f"densereward: error: {good}:3: this response ({key}) is not the one scored at {scores}:3"
    )
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{head} (its response_sha1 differs): {good} changed after the scores were made from it "
        f"({scored / 'metrics.json'} meta.responses); score it again without --scores"
    ]
    # no metrics.json to say which file: both fixes; a blank line counts in the line number
    (scored / "metrics.json").unlink()
    scores.write_text("\n" + scores.read_text())
    assert _cli("--responses", str(good), "--scores", str(scores), "--out", str(out)) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{head[:-2]}:4 (its response_sha1 differs): score it again without --scores, or pass the "
        "responses file the scores were made from"
    ]
    assert not out.exists()


def test_evaluate_auto_threshold_is_youden_and_reported(gsm8k, tmp_path):
    rows = E.load_responses(gsm8k, limit=40)
    rng = np.random.default_rng(0)
    # a verifier that ranks correct responses higher but scores everything below 0.5
    scores = [float(0.1 + 0.2 * r["is_correct"] + 0.15 * rng.random()) for r in rows]
    at_half = E.evaluate(rows, scores, threshold=0.5, n_bootstrap=0)
    assert at_half["overall"]["tpr"] == 0.0 and at_half["overall"]["tnr"] == 1.0  # degenerate
    m = E.evaluate(rows, scores, n_bootstrap=50)  # default: auto
    y = [r["is_correct"] for r in rows]
    assert m["threshold"] == pytest.approx(M.best_threshold(scores, y)["threshold"])
    assert m["overall"]["tpr"] > 0.0 and m["overall"]["tnr"] > 0.0
    assert m["threshold_source"].startswith("auto") and "auto" in E.render_report(m)
    assert m["overall"]["score_gap"] == pytest.approx(M.mean_score_gap(scores, y))
    # a number from an earlier metrics.json
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(m))
    m2 = E.evaluate(rows, scores, threshold=str(path), n_bootstrap=0)
    assert (
        m2["threshold"] == m["threshold_calibration"]["threshold"]
        and str(path) in m2["threshold_source"]
    )


def test_evaluate_edge_cases(gsm8k):
    rows = E.load_responses(gsm8k, limit=5)
    with pytest.raises(DataError, match="abstained"):
        E.evaluate(rows, [None] * len(rows))
    with pytest.raises(DataError):
        E.evaluate(rows, [1.5] * len(rows))
    with pytest.raises(DataError):
        E.evaluate(rows, [0.5])
    # a verifier that rejects everything: TPR 0, TNR 1, precision undefined, eq. 5 falls back
    m = E.evaluate(rows, [0.0] * len(rows), threshold=0.5, n_bootstrap=50)
    o = m["overall"]
    assert (
        o["tpr"] == 0.0
        and o["tnr"] == 1.0
        and o["precision"] is None
        and o["verifier_gain"] is None
    )
    assert (
        o["tts_pass_rate"] == pytest.approx(o["mean_problem_pass_rate"])
        and o["tts_verification_gain"] == 0.0
    )
    assert not math.isnan(m["tts"]["pooled"]["mean_problem_pass_rate"])
    text = E.render_report(m)
    assert "n/a" in text


def test_pooled_and_per_problem_pass_rates_are_named_apart(gsm8k):
    """``pass_rate`` = pooled fraction correct; ``mean_problem_pass_rate`` = mean of per-problem rates."""
    rows = E.load_responses(gsm8k, limit=20)
    # unequal responses per problem: keep all of the even problems, one response of the odd ones
    pids = list(dict.fromkeys(r["problem_id"] for r in rows))
    seen: set[str] = set()
    kept = []
    for r in rows:
        odd = pids.index(r["problem_id"]) % 2 == 1
        if not odd or r["problem_id"] not in seen:
            kept.append(r)
            seen.add(r["problem_id"])
    y = [float(r["is_correct"]) for r in kept]
    per_problem = [
        np.mean([float(r["is_correct"]) for r in kept if r["problem_id"] == p]) for p in pids
    ]
    pooled, mean_problem = float(np.mean(y)), float(np.mean(per_problem))
    assert abs(pooled - mean_problem) > 0.01  # the data tell the two apart
    m = E.evaluate(kept, [0.5] * len(kept), threshold=0.5, n_bootstrap=0)
    o, tts = m["overall"], m["tts"]
    assert o["pass_rate"] == pytest.approx(pooled)
    assert o["mean_problem_pass_rate"] == pytest.approx(mean_problem)
    assert tts["pooled"]["mean_problem_pass_rate"] == pytest.approx(mean_problem)
    assert "pass_rate" not in tts["pooled"] and "plain_pass_rate" not in o
    for g in tts["by_family"]["groups"].values():
        assert set(g) >= {"mean_problem_pass_rate", "tts_pass_rate"} and "pass_rate" not in g
    assert f"mean problem pass rate {mean_problem:.3f}" in E.render_report(m)


@pytest.mark.slow
def test_cli_with_real_default_verifier(gsm8k, tmp_path, default_model_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "real"
    assert (
        run_cli("--responses", str(gsm8k), "--limit", "10", "--out", str(out), "--bootstrap", "100")
        == 0
    )
    m = json.loads((out / "metrics.json").read_text())
    recs = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert len(recs) == 40 and m["counts"]["n_responses"] == 40
    kept = [r for r in recs if not r["abstained"]]
    assert kept and all(0.0 <= r["score"] <= 1.0 for r in kept)
    assert len({round(r["score"], 6) for r in kept}) > 5  # dense scores, not a handful of levels
    t = m["threshold"]  # the default `auto` threshold chosen on the file
    assert 0.0 <= t <= 1.0
    pos = [r["score"] >= t for r in kept if r["is_correct"]]
    neg = [r["score"] < t for r in kept if not r["is_correct"]]
    assert m["overall"]["tpr"] == pytest.approx(sum(pos) / len(pos))
    assert m["overall"]["tnr"] == pytest.approx(sum(neg) / len(neg))
    assert set(m["per_generator"]) == set(E.GSM8K_GENERATORS)
    assert m["meta"]["verifier_stats"]["n_scored"] >= 40
    assert (out / "report.md").is_file() and (out / "reliability.png").is_file()
    assert m["meta"]["reference_guided"] is False
    assert (
        "- prompt: `reference-free (the default criterion), style direct`"
        in (out / "report.md").read_text()
    )


def _rows(spec):
    """Rows from ``[(problem_id, generator, is_correct), ...]``."""
    return [
        {
            "problem_id": p,
            "problem": f"question {p}",
            "response": f"{g} answers {p}",
            "is_correct": ok,
            "generator": g,
            "family": None,
            "reference": None,
        }
        for p, g, ok in spec
    ]


def test_abstained_responses_are_rejects_in_test_time_scaling():
    """Issue 28 item 17: an abstained response stays in its problem's base pass rate and pool and
    is never accepted, as in deployment (it used to be dropped before both)."""
    spec = [
        ("p1", "g1", True),
        ("p1", "g2", False),
        ("p1", "g3", False),
        ("p2", "g1", True),
        ("p2", "g2", False),
        ("p2", "g3", True),
        ("p3", "g1", False),
        ("p3", "g2", True),
        ("p3", "g3", False),
    ]
    scores = [0.3, None, None, None, 0.2, 0.8, 0.7, 0.6, None]
    m = E.evaluate(_rows(spec), scores, threshold=0.5, n_bootstrap=20)
    base = (1 / 3 + 2 / 3 + 1 / 3) / 3  # every response counts: 4/9 (2/3 without the abstained)
    # p1: nothing accepted -> its plain pass rate 1/3 (not 1 from its one scored response);
    # p2: the accepted 0.8 is correct -> 1; p3: 0.7 wrong and 0.6 right accepted -> 1/2
    verified = (1 / 3 + 1 + 1 / 2) / 3
    pooled = m["tts"]["pooled"]
    assert pooled["mean_problem_pass_rate"] == pytest.approx(base)
    assert pooled["tts_pass_rate"] == pytest.approx(verified)
    assert pooled["k_mean"] == 3.0
    assert m["overall"]["mean_problem_pass_rate"] == pytest.approx(base)
    assert m["overall"]["tts_pass_rate"] == pytest.approx(verified)
    ci = m["confidence_intervals"]["tts_verification_gain"]
    assert ci["value"] == pytest.approx(verified - base)
    rs = m["rejection_sampling"]["pooled"]
    assert rs["base_accuracy"] == pytest.approx(base)
    assert rs["expected_gain_infinite_m"] == pytest.approx(verified - base)
    # pooled eq. 1: precision of the 3 accepted (2 correct) minus the pass rate of all 9 (4 correct)
    assert rs["verifier_gain"] == pytest.approx(2 / 3 - 4 / 9)
    assert rs["acceptance_rate"] < 2 / 3 + 1e-9  # p1's runs never end on an accepted draw
    # the classification metrics still leave the abstained out
    assert m["overall"]["n"] == 5 and m["overall"]["pass_rate"] == pytest.approx(3 / 5)
    assert M.tts_pass_rate(scores, [ok for *_, ok in spec], [p for p, *_ in spec], 0.5) == (
        pytest.approx(verified)
    )


def _abstaining_file(tmp_path, n_scored: int):
    """5 problems x 4 generators, and a scores.jsonl in which all but ``n_scored`` abstained."""
    gens = ["g1", "g2", "g3", "g4"]
    responses = tmp_path / "responses.jsonl"
    rows = [
        {
            "problem_id": f"p{p}",
            "problem": f"What is {p}+{p}?",
            "response": f"{g}: {2 * p}",
            "is_correct": (p + k) % 2 == 0,
            "generator": g,
        }
        for p in range(5)
        for k, g in enumerate(gens)
    ]
    responses.write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = E.load_responses(responses)
    scores = tmp_path / "scores.jsonl"
    with open(scores, "w") as f:
        for i, (key, row) in enumerate(zip(row_keys(loaded), loaded, strict=True)):
            scored = i < n_scored
            reason = (
                None
                if scored
                else (
                    "backend error: TimeoutError"
                    if i % 10 == 9
                    else f"low score-token mass: 0.{i:02d} < min_mass 0.5"
                )
            )
            f.write(
                json.dumps(
                    {
                        "problem_id": key[0],
                        "generator": key[1],
                        "response_index": key[2],
                        "is_correct": row["is_correct"],
                        "score": 0.7 if scored else None,
                        "reason": reason,
                    }
                )
                + "\n"
            )
    return responses, scores


@pytest.mark.parametrize("n_scored", [1, 0], ids=["19_of_20", "all_20"])
def test_most_reads_abstained_leads_the_report_and_exits_3(tmp_path, capsys, n_scored):
    """Issue 28 item 11: 19 of 20 reads abstained used to exit 0 with "generators: 1" (the file
    has 4) and advice `verifier.threshold=n/a`; now the report and plots lead with the
    abstentions and their reasons counted, and the command exits 3 (documented in --help)."""
    responses, scores = _abstaining_file(tmp_path, n_scored)
    out = tmp_path / "out"
    rc = run_cli(
        "--responses",
        str(responses),
        "--scores",
        str(scores),
        "--out",
        str(out),
        "--bootstrap",
        "20",
    )
    assert rc == 3 == E.cli.EXIT_MOST_ABSTAINED
    n_abst = 20 - n_scored
    n_backend = 2  # rows 9 and 19
    headline = (
        f"{n_abst} of 20 reads abstained (low score-token mass {n_abst - n_backend}, "
        f"backend error {n_backend})"
    )
    assert headline in capsys.readouterr().err
    report = (out / "report.md").read_text()
    assert report.startswith(f"# Verifier evaluation\n\n## {headline}\n")
    assert "Fix: the verifier model puts less than verifier.min_mass" in report
    assert "generators: 4" in report and "generators: 1" not in report
    assert "=n/a" not in report
    m = json.loads((out / "metrics.json").read_text())
    assert m["abstentions"]["reasons"] == {
        "low score-token mass": n_abst - n_backend,
        "backend error": n_backend,
    }
    assert m["counts"]["n_generators"] == 4 and m["abstentions"]["most"] is True
    assert (out / "abstentions.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if n_scored:
        assert set(m["per_generator"]) == {"g1", "g2", "g3", "g4"}
        assert "None is advised: most reads abstained" in report
        assert (out / "reliability.png").is_file()
    else:
        assert "no metric can be computed" in report and "overall" not in m
    parser = argparse.ArgumentParser(formatter_class=argparse.RawDescriptionHelpFormatter)
    E.add_arguments(parser)
    assert "3  most reads abstained" in parser.format_help()


def test_threshold_advice_never_says_n_a(gsm8k):
    """With one class among the scored responses no threshold is advised (it said
    `verifier.threshold=n/a`)."""
    rows = [r for r in E.load_responses(gsm8k, limit=10) if r["is_correct"]]
    m = E.evaluate(rows, [0.8] * len(rows), n_bootstrap=0)
    text = E.render_report(m)
    assert "=n/a" not in text and "No threshold can be calibrated on these data" in text


@pytest.mark.slow
def test_most_reads_abstained_with_a_real_verifier(gsm8k, tmp_path, default_model_dir, capsys):
    """Item 11 through the engine: the embedded model read at min_mass 0.999 abstains on every
    read of one GSM8K problem (4 generators); the reasons counted are its reads' own."""
    import dataclasses

    from densereward.config import VerifierConfig

    # the start-up calibration read refuses such a verifier (its job); this test needs one that runs
    fields = {f.name for f in dataclasses.fields(VerifierConfig)}
    extra = ["verifier.calibrate=false"] if "calibrate" in fields else []
    out = tmp_path / "real"
    rc = run_cli(
        "--responses",
        str(gsm8k),
        "--limit",
        "1",
        "--out",
        str(out),
        "--no-plots",
        "--bootstrap",
        "0",
        "verifier.granularity=5",
        "verifier.min_mass=0.999",
        *extra,
    )
    assert rc == 3
    assert "4 of 4 reads abstained (low score-token mass 4)" in capsys.readouterr().err
    m = json.loads((out / "metrics.json").read_text())
    assert m["abstentions"]["reasons"] == {"low score-token mass": 4} and "overall" not in m
    recs = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert all(r["reason"].startswith("low score-token mass: ") for r in recs)


@pytest.mark.parametrize(
    ("prompt", "expect"),
    [
        ("reference_free", (None, "pointwise", None)),
        ("answer_match", (None, "answer_match", ["18"])),
        ("anchored", ("criteria", "pointwise", ["18"])),
    ],
)
def test_eval_verifier_reads_each_prompt_a_reward_can_read(prompt, expect, monkeypatch):
    """Issue 36 item 4: --prompt measures the read a GRPO verifier reward of that kind makes
    (the request is built by VerifierReward itself)."""
    import densereward.verifier as V
    from densereward.config import VerifierConfig
    from densereward.eval_verifier.scoring import score_responses
    from densereward.results import ScoreResult

    seen = []

    class Recording:
        def __init__(self, config):
            self.config = config
            self.stats = type("S", (), {"as_dict": staticmethod(dict)})()

        def score_batch(self, problems, responses, criteria=None, references=None, prompt=None):
            seen.append((criteria, prompt, references))
            return [ScoreResult(value=0.5, mass=1.0) for _ in responses]

        def close(self):
            pass

    monkeypatch.setattr(V, "Verifier", Recording)
    rows = [{"problem": "q", "response": "2 + 16 = 18\nA: 18", "reference": "2 + 16 = 18\nA: 18"}]
    records, _ = score_responses(rows, VerifierConfig(), prompt=prompt)
    criteria, kind, refs = seen[0]
    assert (("criteria" if criteria else None), kind, refs) == expect
    assert records[0]["score"] == 0.5
    with pytest.raises(ConfigError, match="--prompt"):
        score_responses(rows, VerifierConfig(), prompt="fuzzy")


def _hand_made_file(tmp_path):
    """A hand-made labelled file as a new user writes one (issue 41): 6 problems, 1-3 responses
    each from one generator and one from another, and a scores.jsonl as the command writes it,
    in which 3 responses were scored 0 without a read (2 with no final answer, 1 empty) and one
    read abstained. Problems 0-3 are all correct or all wrong (tied d(x))."""
    spec = [  # (problem, generator, is_correct, score, reason)
        (0, "small", True, 0.9, None),
        (0, "small", True, 0.8, None),
        (0, "big", True, 0.7, None),
        (1, "small", False, 0.0, "no final answer"),
        (1, "big", False, 0.6, None),
        (2, "small", True, 0.4, None),
        (2, "small", True, 0.65, None),
        (2, "small", True, 0.75, None),
        (2, "big", True, 0.55, None),
        (3, "small", False, 0.0, "empty response"),
        (3, "big", False, 0.5, None),
        (4, "small", True, 0.0, "no final answer"),
        (4, "big", False, 0.3, None),
        (5, "small", False, 0.35, None),
        (5, "big", True, None, "backend error: TimeoutError"),
    ]
    rows = [
        {
            "problem_id": f"p{p}",
            "problem": f"What is {p}+1?",
            "generator": g,
            "response": "" if why == "empty response" else f"{g} #{i}: wait, let me check: {p + 1}",
            "is_correct": ok,
        }
        for i, (p, g, ok, _, why) in enumerate(spec)
    ]
    responses = tmp_path / "mine.jsonl"
    responses.write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = E.load_responses(responses)
    scores = tmp_path / "scores.jsonl"
    _write_scores(scores, loaded, [(s, why) for *_, s, why in spec])
    return responses, scores


def _write_scores(path: Path, loaded: list, values: list) -> None:
    """A scores.jsonl for the loaded rows: ``values[i]`` is row i's score, or its
    ``(score, reason)``."""
    path.write_text(
        "".join(
            json.dumps(
                {
                    "problem_id": key[0],
                    "generator": key[1],
                    "response_index": key[2],
                    "is_correct": row["is_correct"],
                    "score": v[0] if isinstance(v, tuple) else v,
                    **({"reason": v[1]} if isinstance(v, tuple) else {}),
                }
            )
            + "\n"
            for key, row, v in zip(row_keys(loaded), loaded, values, strict=True)
        )
    )


def test_the_report_counts_unread_zeros_and_shows_no_filler(tmp_path, capsys):
    """Issue 41 item 4: responses scored 0 without a read (no final answer, empty) were
    counted as "15 scored, 1 abstained" and fed to AUROC unsaid; the threshold table repeated
    the auto threshold's row; empty quartiles were rows of n/a; K was 2.5; a column was headed
    "self-verif. kw" with no word on what it counts."""
    responses, scores = _hand_made_file(tmp_path)
    out = tmp_path / "out"
    assert (
        run_cli(
            "--responses",
            str(responses),
            "--scores",
            str(scores),
            "--out",
            str(out),
            "--bootstrap",
            "20",
            "--no-plots",
        )
        == 0
    )
    printed = capsys.readouterr().out
    m = json.loads((out / "metrics.json").read_text())
    assert m["counts"]["n_scored"] == 14 and m["counts"]["n_scored_unread"] == 3
    assert m["unread"] == {
        "n": 3,
        "reasons": {"no final answer": 2, "empty response": 1},
        "n_correct": 1,
        "n_incorrect": 2,
    }
    read = [(s, ok) for *_, ok, s, why in _spec_of(scores) if s is not None and why is None]
    assert m["overall"]["auroc_read_only"] == pytest.approx(
        M.auroc([s for s, _ in read], [ok for _, ok in read])
    )
    assert m["overall"]["auroc_read_only"] != pytest.approx(m["overall"]["auroc"])
    report = (out / "report.md").read_text()
    assert (
        "responses: 15 (14 scored: 11 read by the verifier, 3 scored 0 without a read "
        "(no final answer 2, empty response 1); 1 abstained"
    ) in report
    assert "over the 11 read response(s) alone AUROC is " in report
    n_read_ok = sum(ok for _, ok in read)
    read_counts = f"({n_read_ok} correct / {len(read) - n_read_ok} incorrect)"
    assert (
        f"(3 of them 0 without a read; AUROC {m['overall']['auroc_read_only']:.3f} {read_counts} over the read ones)"
        in printed
    )
    assert (
        f"over the 11 read response(s) alone AUROC is {m['overall']['auroc_read_only']:.3f} {read_counts}."
        in report
    )
    # the accept threshold: auto chose the in-sample best, so one row says both
    table = report[report.index("## Accept threshold") : report.index("## Per generator")]
    assert table.count(f"| {m['threshold_text']} |") == 1
    assert (
        "best on these data (in-sample, optimistic); the accept threshold of this report" in table
    )
    # no empty bin as a row of n/a, and said which were left out
    difficulty = report[report.index("## By difficulty") : report.index("## Verification at test")]
    assert not re.search(r"\| 0 \| n/a \|", difficulty)
    assert "Left out, no problem in them: " in difficulty
    # K: whole numbers or a range with its mean, never a bare fraction
    tts = report[report.index("## Verification at test") :]
    assert "K = 2-4 (mean 2.5)" in tts and not re.search(r"K = \d+\.\d+ candidates", tts)
    assert "| small | 6 | 1-3 (mean 1.5) |" in tts and "| big | 6 | 1 |" in tts  # problems, K
    assert "self-verif. kw" not in report and "| self-verification rate |" in report
    assert "Self-verification rate: the share of the generator's scored responses" in report


def _spec_of(scores):
    """(problem_id, generator, is_correct, score, reason) of a scores.jsonl."""
    return [
        (r["problem_id"], r["generator"], r["is_correct"], r["score"], r["reason"])
        for r in map(json.loads, scores.read_text().splitlines())
    ]


def _labelled(tmp_path, spec, name="f"):
    """A responses file and its scores.jsonl from ``[(problem, generator, is_correct, score)]``."""
    rows = [
        {
            "problem_id": f"p{p}",
            "problem": f"What is {p}+1?",
            "generator": g,
            "response": f"{g} #{i}: {p + 1}",
            "is_correct": ok,
        }
        for i, (p, g, ok, _) in enumerate(spec)
    ]
    responses = tmp_path / f"{name}.jsonl"
    responses.write_text("".join(json.dumps(r) + "\n" for r in rows))
    scores = tmp_path / f"{name}_scores.jsonl"
    scores.write_text(
        "".join(
            json.dumps(
                {
                    "problem_id": k[0],
                    "generator": k[1],
                    "response_index": k[2],
                    "is_correct": ok,
                    "score": s,
                    "reason": None,
                }
            )
            + "\n"
            for k, (_, _, ok, s) in zip(row_keys(E.load_responses(responses)), spec, strict=True)
        )
    )
    return responses, scores


def test_two_responses_print_their_counts_and_no_verdict(tmp_path, capsys):
    """Issue 41 rerun, finding A1/A2: two responses, a score gap of 0.0003, printed "AUROC 1.000"
    with no count; every rate now shows what it rests on, and "too few to rank" and the gap
    under the shown resolution are said (console and report), as are per-generator counts."""
    responses, scores = _labelled(tmp_path, [(1, "me", True, 0.5004), (1, "me", False, 0.5001)])
    out = tmp_path / "out"
    assert (
        run_cli(
            "--responses",
            str(responses),
            "--scores",
            str(scores),
            "--out",
            str(out),
            "--bootstrap",
            "0",
            "--no-plots",
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "AUROC 1.000 (1 correct / 1 incorrect)" in printed
    assert "TPR 1.000 (1 correct)" in printed and "TNR 1.000 (1 incorrect)" in printed
    assert (
        f"too few to rank: 1 correct and 1 incorrect scored response(s), under {E.MIN_PER_CLASS}"
        in printed
    )
    assert "mean scores differ by 0.0003, under 0.001" in printed
    m = json.loads((out / "metrics.json").read_text())
    assert m["evidence"]["too_few"] and m["evidence"]["gap_below_resolution"]
    report = (out / "report.md").read_text()
    assert (
        "**Too few to rank: " in report and "| auroc | 1.000 | 1 correct / 1 incorrect |" in report
    )
    per_gen = report[report.index("## Per generator") : report.index("## By difficulty")]
    assert "| me | 2 | 0 | 0.500 (2 scored) | 1.000 (1 correct) | 1.000 (1 incorrect) |" in per_gen
    quart = report[report.index("### TPR / TNR per generator") :]
    assert "1.000 (1 correct) / 1.000 (1 incorrect)" in quart


def test_enough_responses_are_no_warning(tmp_path, capsys):
    spec = [(p, "g", p % 2 == 0, 0.7 if p % 2 == 0 else 0.3) for p in range(2 * E.MIN_PER_CLASS)]
    responses, scores = _labelled(tmp_path, spec)
    assert (
        run_cli(
            "--responses",
            str(responses),
            "--scores",
            str(scores),
            "--out",
            str(tmp_path / "o"),
            "--bootstrap",
            "0",
            "--no-plots",
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "AUROC 1.000 (10 correct / 10 incorrect)" in printed
    assert "too few" not in printed and "differ by" not in printed


def test_one_class_says_why_once_and_figures_draw_only_bins_with_data(
    tmp_path, capsys, monkeypatch
):
    """Issue 41 rerun, findings A3/A4: a file of correct responses only printed a screen of n/a
    and a blank TNR panel; empty quartiles were empty slots. Now the reason is printed once,
    the empty panel says it, and only bins with data are drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = {}
    save = plt.Figure.savefig

    def record(fig, path, *a, **k):  # the texts and x tick labels of each saved figure
        texts = [t.get_text() for ax in fig.axes for t in ax.texts] + [
            t.get_text() for t in fig.texts
        ]
        ticks = [[t.get_text() for t in ax.get_xticklabels()] for ax in fig.axes]
        drawn[len(drawn)] = (texts, ticks, fig._suptitle.get_text() if fig._suptitle else "")
        return save(fig, path, *a, **k)

    monkeypatch.setattr(plt.Figure, "savefig", record)
    spec = [(p % 4, "g1" if p % 3 else "g2", True, 0.5 + 0.03 * p) for p in range(12)]
    responses, scores = _labelled(tmp_path, spec)
    out = tmp_path / "out"
    assert (
        run_cli(
            "--responses",
            str(responses),
            "--scores",
            str(scores),
            "--out",
            str(out),
            "--bootstrap",
            "0",
        )
        == 0
    )
    printed = capsys.readouterr().out
    why = (
        "all 12 responses are labelled correct: TNR, balanced accuracy, AUROC, AUPRC and the "
        "accept threshold need both classes"
    )
    assert printed.count(why) == 1 and "best accept threshold n/a" not in printed
    assert "TNR n/a (0 incorrect)" in printed
    # the TPR printed is read at the 0.5 fallback, and the console says so (second rerun)
    assert (
        "accept threshold: score >= 0.5000 (0.5 (auto could not calibrate: one class only))"
        in printed
    )
    texts, ticks, title = drawn[0]  # tpr_tnr_by_difficulty.png
    assert any(t.startswith("no data: " + why[:20]) for t in texts)  # the empty TNR panel
    assert ticks[0] == ["Q1 [1.00, 1.00]"]  # Q2-Q4 hold no problem: not drawn as empty slots
    assert any("no problem in Q2, Q3, Q4" in t for t in texts)
    assert "n=12" in texts and why[:40] in title.replace("\n", " ")
    by_gen_texts = drawn[1][0]  # tpr_tnr_by_generator.png: TNR slots marked, not blank
    assert by_gen_texts.count("no data") == 4 and {"n=4", "n=8"} <= set(by_gen_texts)
    assert f"**A{why[1:]}" in (out / "report.md").read_text()
    # AUPRC would be 1 whatever the scores without an incorrect response (issue 41 item 1d)
    m = json.loads((out / "metrics.json").read_text())
    assert m["overall"]["auprc"] is None and m["overall"]["auroc"] is None
    assert "| n/a | 0.000 | 1.000 | 1.000 | 1.000 | n/a | " in (out / "report.md").read_text()


@pytest.mark.parametrize("with_reference", [(), (0, 2)], ids=["none", "mixed"])
def test_reference_guided_refuses_rows_without_reference(tmp_path, with_reference, capsys):
    """Issue 41 rerun item 1: --reference-guided on rows without 'reference' would read them
    with the reference-free prompt, silently; a file where only some rows have one would be
    measured with two prompts. Both are refused before any model loads: how many rows lack it,
    the first file:line, and the fix."""
    path = tmp_path / "r.jsonl"
    rows = [
        {
            "problem": f"What is {i}+1?",
            "response": f"A: {i + 1}",
            "is_correct": True,
            "generator": "g",
            **({"reference": f"A: {i + 1}"} if i in with_reference else {}),
        }
        for i in range(4)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    n, first = (4, 1) if not with_reference else (2, 2)
    for flags in (["--reference-guided"], ["--prompt", "anchored"]):
        with pytest.raises(DataError) as e:
            run_cli("--responses", str(path), "--out", str(tmp_path / "out"), *flags)
        msg = str(e.value)
        assert f"{n} of 4 rows lack 'reference' (first: {path}:{first})" in msg
        assert "add 'reference' to each row, or drop --reference-guided" in msg
        assert "\n" not in msg
    assert not (tmp_path / "out").exists()


def test_equal_generators_and_flat_easiness_say_why_there_is_no_number(tmp_path, capsys):
    """Issue 41 item 1a-c: two generators passing the same share of problems were named weaker
    and stronger alike ("the weaker (genB) and the stronger (genB)"); the Spearman correlation
    with every d(x) 0.50 and the cross-validated balanced accuracy on one problem were a bare
    n/a on the console; tts_verification_gain had an empty "rests on" cell."""
    spec = [(1, "genA", True, 0.9), (1, "genA", False, 0.2), (1, "genB", True, 0.8)]
    spec += [(1, "genB", False, 0.3)]
    responses, scores = _labelled(tmp_path, spec)
    out = tmp_path / "out"
    argv = ["--responses", str(responses), "--scores", str(scores), "--out", str(out)]
    assert run_cli(*argv, "--bootstrap", "0", "--no-plots") == 0
    printed = capsys.readouterr().out
    assert "n/a cross-validated over problems (1 problem: folds are split by problem" in printed
    report = (out / "report.md").read_text()
    assert "Both groups pass 0.500 of problems (mean problem pass rate): no gap" in report
    assert "the weaker (genB) and the stronger (genB)" not in report
    assert "Share of the gap" not in report
    assert (
        "easiness d(x): n/a (every problem has easiness d(x) 0.500: no spread to rank against)."
        in report
    )
    assert "not estimable (1 problem: folds are split by problem" in report
    assert "| tts_verification_gain | 0.500 | 1 problems x 4 responses |" in report
    m = json.loads((out / "metrics.json").read_text())
    assert m["tts"]["by_family"]["equal_pass_rate"] == 0.5
    assert "gap_closed" not in m["tts"]["by_family"]


def test_the_second_overall_table_and_the_soft_line_say_what_they_rest_on(tmp_path):
    """The report's second table (fpr, fnr, f1, auprc, ece, brier, gap SNR, ...) and its "Soft
    variant" line had no counts, though every table says what its numbers rest on."""
    spec = [(1, "g", True, 0.9), (1, "g", False, 0.2), (2, "g", True, 0.7), (2, "g", False, 0.6)]
    spec.append((3, "g", True, 0.4))
    responses, scores = _labelled(tmp_path, spec)
    out = tmp_path / "out"
    args = ["--responses", str(responses), "--scores", str(scores), "--out", str(out)]
    assert run_cli(*args, "--bootstrap", "0", "--no-plots") == 0
    report = (out / "report.md").read_text()
    table = next(line for line in report.splitlines() if line.startswith("|  | fpr | fnr |"))
    lines = report.splitlines()
    rests = lines[lines.index(table) + 3]
    both = "3 correct / 2 incorrect"
    assert rests == (
        f"| rests on | 2 incorrect | 3 correct | 5 scored | 3 correct | {both} | {both} | "
        f"5 scored | 5 scored | 5 scored | {both} | {both} | {both} |"
    )
    soft = next(line for line in lines if line.startswith("Soft variant"))
    assert "(3 correct), TNR " in soft and "(2 incorrect), precision " in soft
    assert soft.endswith("(5 scored, each weighted by its score).")


@pytest.mark.parametrize("bad", [None, 12, ["a"]])
def test_a_null_or_non_string_response_is_refused_naming_file_line_and_field(tmp_path, capsys, bad):
    """Issue 41 third rerun F7: ``"response": null`` (a broken export) was scored 0.0 as an
    "empty response" and entered every metric; it is refused like a wrong-type is_correct (exit 2,
    file:line and the field). ``""`` stays an empty answer."""
    lines = _generic_lines()
    row = json.loads(lines[1])
    row["response"] = bad
    p = tmp_path / "r.jsonl"
    p.write_text("\n".join([lines[0], json.dumps(row), *lines[2:]]) + "\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(p))}:2: response must be a string"):
        E.load_responses(p)
    out = tmp_path / "out"
    assert _cli("--responses", str(p), "--out", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{p}:2: response must be a string" in err[0], err
    assert not out.exists()
    row["response"] = ""
    p.write_text("\n".join([lines[0], json.dumps(row), *lines[2:]]) + "\n")
    assert E.load_responses(p)[1]["response"] == ""
    # a GSM8K model-solutions line with a null solution, the same
    g = tmp_path / "g.jsonl"
    sol = {"solution": "x #### 1", "is_correct": True}
    g.write_text(json.dumps({"question": "q", "a": sol, "b": {**sol, "solution": bad}}) + "\n")
    with pytest.raises(DataError, match=r"g\.jsonl:1:b: solution must be a string"):
        E.load_responses(g)


@pytest.mark.parametrize("bad", [None, 7, ["a"], "", "  "])
def test_a_null_or_non_string_generator_is_refused_naming_file_line_and_field(
    tmp_path, capsys, bad
):
    """F2: ``"generator": null`` became a third generator named "None": the shared-protocol
    TPR/TNR then rested on 0 problems, and with ``--scores`` the error blamed --responses and
    --limit. It is refused like a null response (exit 2, file:line, the field, the fix), with
    or without --scores."""
    lines = _generic_lines()
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(lines) + "\n")
    scores = tmp_path / "scores.jsonl"
    synthetic_scores(E.load_responses(good), scores, abstain_every=0)
    row = json.loads(lines[1])
    row["generator"] = bad
    p = tmp_path / "r.jsonl"
    p.write_text("\n".join([lines[0], json.dumps(row), *lines[2:]]) + "\n")
    want = (
        f"{p}:2: generator must be a non-empty string (the name of the model that wrote the "
        f"response), got {json.dumps(bad)}: fix the export that wrote this row"
    )
    with pytest.raises(DataError) as err:
        E.load_responses(p)
    assert str(err.value) == want
    for extra in ([], ["--scores", str(scores)]):
        out = tmp_path / "out"
        assert _cli("--responses", str(p), *extra, "--out", str(out), "--no-progress") == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"densereward: error: {want}"]
        assert not out.exists()


def test_scores_from_a_file_carry_the_verifier_and_prompt_that_made_them(tmp_path, capsys):
    """Issue 41 third rerun F5: ``--scores ... verifier.granularity=5`` headed the report with
    G=5 (the unused override; the scores were read at G=20) and the prompt "unknown" although the
    scoring run recorded it. A verifier setting with --scores is refused (exit 2, one line);
    the report and metrics.json carry the verifier and prompt of the run that made the scores."""
    from densereward.config import VerifierConfig
    from densereward.io import to_jsonable

    responses = tmp_path / "r.jsonl"
    responses.write_text("\n".join(_generic_lines(6)) + "\n")
    rows = E.load_responses(responses)
    run = tmp_path / "scored"
    run.mkdir()
    synthetic_scores(rows, run / "scores.jsonl", abstain_every=0)
    made_by = to_jsonable(VerifierConfig(granularity=20))
    meta = {"meta": {"verifier": made_by, "prompt": "answer_match"}}
    (run / "metrics.json").write_text(json.dumps(meta))
    base = ["--responses", str(responses), "--scores", str(run / "scores.jsonl")]
    base += ["--bootstrap", "0", "--no-plots"]
    for extra in (["verifier.granularity=5"], ["--prompt", "anchored"]):
        out = tmp_path / "refused"
        assert _cli(*base, "--out", str(out), *extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "with --scores" in err[0] and extra[0].split("=")[0] in err[0]
        assert not out.exists()
    out = tmp_path / "again"
    assert _cli(*base, "--out", str(out), "verifier.threshold=0.5") == 0  # how scores are read
    report = (out / "report.md").read_text()
    assert "G=20, K=1 (recorded by the run that made the scores)" in report
    assert "- prompt: `reference-guided (answer_match" in report
    m = json.loads((out / "metrics.json").read_text())["meta"]
    assert m["verifier"] == made_by and m["prompt"] == "answer_match"
    # a recomputation of a recomputation still names the run that scored
    out3 = tmp_path / "again2"
    assert _cli(*base[:2], "--scores", str(out / "scores.jsonl"), "--out", str(out3)) == 0
    m3 = json.loads((out3 / "metrics.json").read_text())["meta"]
    assert m3["verifier"] == made_by and m3["prompt"] == "answer_match"


class _CountingBackend:
    """A verifier backend that reads every prompt as the candidates' first at mass 0.9, counts
    its prompts, and can be told to stop (as Ctrl-C) after some."""

    name = "evtest-count"
    model_id = "evtest-count-v1"
    prompts = 0
    stop_after: int | None = None

    def __init__(self, config):
        from densereward.backends.base import BackendUsage

        self.config = config
        self.usage = BackendUsage()

    def next_token_logprobs(self, prompts, candidates):
        from densereward.backends.base import TokenLogprobs

        cls = type(self)
        if cls.stop_after is not None and cls.prompts + len(prompts) > cls.stop_after:
            raise KeyboardInterrupt
        cls.prompts += len(prompts)
        self.usage.n_calls += 1
        return [TokenLogprobs({candidates[-1]: math.log(0.9)}) for _ in prompts]

    def tokenize(self, text):
        return [ord(c) for c in text]

    def generate(self, prompts, **kwargs):
        return ["" for _ in prompts]

    def close(self):
        pass


def test_scoring_reports_progress_and_a_restart_reuses_the_answers_kept_in_out(
    tmp_path, capsys, monkeypatch
):
    """Issue 41 third rerun F14: the README's run was silent for 8+ minutes after loading the
    model and an interrupted run kept nothing (a restart started over). Progress lines
    (done/total, rate, time left) go to stderr, about every 10 % (none with --no-progress); the
    verifier's answers are kept in --out/score-cache as they are made and an interrupted run's
    are reused by the next one, which says so in one line."""
    from densereward.backend_options import BACKENDS
    from densereward.backends.base import LocalAsyncMixin

    backend = type("CountingBackend", (LocalAsyncMixin, _CountingBackend), {})
    BACKENDS.register("evtest-count", backend)
    monkeypatch.setattr(backend, "prompts", 0)
    try:
        responses = tmp_path / "r.jsonl"
        responses.write_text("\n".join(_generic_lines(10)) + "\n")
        out = tmp_path / "out"
        argv = ["--responses", str(responses), "--out", str(out), "--bootstrap", "0"]
        argv += ["--no-plots", "verifier.backend=evtest-count"]
        assert _cli(*argv[:3], str(tmp_path / "full"), *argv[4:]) in (0, 3)
        capsys.readouterr()
        full = backend.prompts  # the reads one whole run makes
        monkeypatch.setattr(backend, "prompts", 0)
        monkeypatch.setattr(backend, "stop_after", full // 2)
        assert _cli(*argv) == 130  # Ctrl-C midway
        first = capsys.readouterr()
        lines = [x for x in first.err.splitlines() if x.startswith("eval-verifier: scored")]
        assert (
            lines[0].startswith("eval-verifier: scored 1/10 responses (10%), ") and len(lines) < 10
        )
        assert "left" in lines[0] and "/s" in lines[0] and "scored" not in first.out
        assert (out / "score-cache").is_dir() and not (out / "metrics.json").exists()
        kept = backend.prompts
        assert 0 < kept < full
        monkeypatch.setattr(backend, "stop_after", None)
        assert _cli(*argv) in (0, 3)
        second = capsys.readouterr().err
        reused = re.search(r"reusing (\d+) verifier answers an earlier run left in", second)
        assert reused and 0 < int(reused[1]) <= kept, second
        # the rest only: a restart does not start over
        assert backend.prompts - kept == full - int(reused[1])
        assert "scored 10/10 responses (100%)" in second and "done in" in second
        assert _cli(*argv, "--no-progress") in (0, 3)
        assert "eval-verifier: scored" not in capsys.readouterr().err
        recs = [json.loads(x) for x in (out / "scores.jsonl").read_text().splitlines()]
        assert len(recs) == 10
    finally:
        BACKENDS._entries.pop("evtest-count", None)


def test_test_time_and_calibration_tables_and_every_plot_carry_their_counts(tmp_path, monkeypatch):
    """Issue 41 third rerun F6: the test-time-scaling and rejection-sampling tables gave K but
    no number of problems, the ECE/Brier line and reliability.png no n and no "too few" banner
    (the other two plots had one), and the balanced-accuracy bars no n=. The docs promise
    counts in every table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = {}
    save = plt.Figure.savefig

    def record(fig, path, *a, **k):
        texts = [t.get_text() for ax in fig.axes for t in ax.texts]
        titles = [ax.get_title() for ax in fig.axes]
        sup = fig._suptitle.get_text() if fig._suptitle else ""
        drawn[str(path).split("/")[-1].split(".")[1]] = (texts, titles, sup)  # .<stem>.png.tmp
        return save(fig, path, *a, **k)

    monkeypatch.setattr(plt.Figure, "savefig", record)
    spec = [  # 4 problems, two groups: too few to rank
        (1, "you", True, 0.9),
        (1, "me", False, 0.2),
        (2, "you", False, 0.6),
        (2, "me", True, 0.7),
        (3, "me", True, 0.8),
        (4, "you", False, 0.3),
        (4, "me", False, 0.4),
    ]
    responses, scores = _labelled(tmp_path, spec)
    out = tmp_path / "out"
    argv = ["--responses", str(responses), "--scores", str(scores), "--out", str(out)]
    assert run_cli(*argv, "--bootstrap", "0") == 0
    report = (out / "report.md").read_text()
    tts = report[report.index("## Verification at test time") : report.index("## Calibration")]
    assert "4 problems, 7 responses" in tts
    assert "| group | problems | K (responses per problem) |" in tts
    assert "| me | 4 | 1 |" in tts and "| you | 3 | 1 |" in tts
    assert "| rejection sampling | problems | M |" in tts and "| pooled | 4 | " in tts
    assert "ECE " in report and "(n=7 scored: 3 correct, 4 incorrect)" in report
    m = json.loads((out / "metrics.json").read_text())
    assert m["tts"]["pooled"]["n_problems"] == 4 and m["tts"]["pooled"]["n_responses"] == 7
    texts, titles, sup = drawn["reliability"]
    assert "n=7 scored" in titles[0] and "too few to rank" in sup, (titles, sup)
    assert "too few to rank" in drawn["tpr_tnr_by_difficulty"][2]
    by_gen = drawn["tpr_tnr_by_generator"][0]  # TPR n, TNR n, balanced accuracy n (all scored)
    assert by_gen.count("n=4") >= 1 and "n=3" in by_gen, by_gen


# ---- issue 41 fourth rerun: --scores matching, duplicate rows, is_correct forms ------------


def _twelve(tmp_path, name="twelve.jsonl"):
    """12 generic rows: 6 problems x 2 generators, both classes."""
    p = tmp_path / name
    p.write_text(
        "".join(
            json.dumps(
                {
                    "problem_id": f"p{i // 2}",
                    "problem": f"q{i // 2}",
                    "response": f"r{i}",
                    "is_correct": i % 3 != 0,
                    "generator": f"g{i % 2}",
                }
            )
            + "\n"
            for i in range(12)
        )
    )
    return p


def _scored_run(tmp_path, responses, *limit):
    """A run that wrote scores.jsonl and metrics.json as the command does (a recompute of
    synthetic scores: its metrics.json records --responses and --limit like a scoring run)."""
    seed = tmp_path / "seed"
    seed.mkdir(exist_ok=True)
    synthetic_scores(E.load_responses(responses), seed / "scores.jsonl", abstain_every=0)
    run = tmp_path / f"run{'-'.join(limit)}"
    argv = ["--responses", str(responses), "--scores", str(seed / "scores.jsonl")]
    assert _cli(*argv, *limit, "--out", str(run), "--bootstrap", "0", "--no-plots") == 0
    return run / "scores.jsonl"


def test_score_rows_that_match_no_response_are_said_once_or_refused_when_none_match(
    tmp_path, capsys
):
    """F10: --scores with a responses file holding 6 of the 12 scored rows reported on 6 and
    said nothing of the other 6 score rows; a wrong responses file must be told. Some unmatched:
    one note with the count (exit 0, recorded in metrics.json and report.md); none matched:
    refused (exit 2) naming the file the scores were made from."""
    twelve = _twelve(tmp_path)
    scores = _scored_run(tmp_path, twelve)
    capsys.readouterr()
    six = tmp_path / "six.jsonl"
    six.write_text("".join(twelve.read_text().splitlines(keepends=True)[:6]))
    out = tmp_path / "re6"
    base = ["--scores", str(scores), "--bootstrap", "0", "--no-plots"]
    assert _cli("--responses", str(six), *base, "--out", str(out)) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "score rows" in line]
    assert len(err) == 1, err
    assert "6 of the 12 score rows" in err[0] and "match no response" in err[0]
    assert str(twelve) in err[0]  # the responses file the scores were made from
    meta = json.loads((out / "metrics.json").read_text())["meta"]
    assert meta["n_score_rows_unmatched"] == 6
    assert "6 of its 12 score rows match no response" in (out / "report.md").read_text()
    # the whole file: no note
    assert _cli("--responses", str(twelve), *base, "--out", str(tmp_path / "re12")) == 0
    assert "score rows" not in capsys.readouterr().err
    # a file none of whose rows were scored: refused, one line, nothing written
    other = tmp_path / "other.jsonl"
    other.write_text(twelve.read_text().replace('"problem_id": "p', '"problem_id": "x'))
    out = tmp_path / "refused"
    assert _cli("--responses", str(other), *base, "--out", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "none of the 12 score rows" in err[0], err
    assert str(twelve) in err[0] and not out.exists()


def test_scores_made_with_a_limit_name_it_when_it_explains_a_missing_score(tmp_path, capsys):
    """F7: after a --limit 2 scoring run, recomputing without --limit failed "no score for
    problem_id=... in the scores file" although metrics.json beside the scores records limit 2.
    The refusal names the recorded limit and the fix; --limit 2 works; a smaller --limit is a
    note on the score rows it leaves unused."""
    twelve = _twelve(tmp_path)
    scores = _scored_run(tmp_path, twelve, "--limit", "2")
    assert json.loads(scores.with_name("metrics.json").read_text())["meta"]["limit"] == 2
    capsys.readouterr()
    base = ["--responses", str(twelve), "--scores", str(scores), "--bootstrap", "0", "--no-plots"]
    for limit in ([], ["--limit", "3"]):
        out = tmp_path / f"refused{limit}"
        assert _cli(*base, *limit, "--out", str(out)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert "the scores were made with --limit 2" in err[0] and "add --limit 2" in err[0]
        assert not out.exists()
    assert _cli(*base, "--limit", "2", "--out", str(tmp_path / "ok")) == 0
    assert "score rows" not in capsys.readouterr().err
    assert _cli(*base, "--limit", "1", "--out", str(tmp_path / "one")) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "score rows" in line]
    assert len(err) == 1 and "2 of the 4 score rows" in err[0], err
    assert "--limit 1" in err[0] and "--limit 2" in err[0]


def test_an_exact_duplicate_row_or_a_conflicting_label_is_refused_naming_both_lines(
    tmp_path, capsys
):
    """F11: the 12 rows plus an exact copy of row 1 were counted as 13 responses. Refused (exit
    2) naming both file:lines; two samples that read alike stay two rows when a field tells them
    apart. Scores are matched by (problem_id, generator, occurrence), so a duplicate was not
    ambiguous there, only counted twice."""
    twelve = _twelve(tmp_path)
    lines = twelve.read_text().splitlines(keepends=True)
    dup = tmp_path / "dup_row.jsonl"
    dup.write_text("".join([*lines, lines[0]]))
    with pytest.raises(DataError, match=rf"^{re.escape(str(dup))}:13: .*{re.escape(str(dup))}:1\b"):
        E.load_responses(dup)
    out = tmp_path / "out"
    assert _cli("--responses", str(dup), "--out", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "counted twice" in err[0], err
    assert not out.exists()
    # a copy of a problem past --limit is not read: no refusal for rows the run does not use
    dup.write_text("".join([*lines, lines[-1]]))
    assert len(E.load_responses(dup, limit=5)) == 10
    samples = [json.loads(lines[0]) | {"sample": k} for k in range(2)]
    ok = tmp_path / "samples.jsonl"
    ok.write_text("".join(json.dumps(s) + "\n" for s in samples))
    assert len(E.load_responses(ok)) == 2
    # the same row but for its label: conflicting labels, refused naming both lines; true and
    # 1 are one label, so a copy that spells it 1 is a copy
    first = json.loads(lines[0])
    flipped = tmp_path / "flipped.jsonl"
    other = first | {"is_correct": not first["is_correct"]}
    flipped.write_text("".join([*lines, json.dumps(other) + "\n"]))
    with pytest.raises(DataError, match=r":13: .*:1 .*but labelled is_correct=.* cannot be both"):
        E.load_responses(flipped)
    out = tmp_path / "out_flipped"
    assert _cli("--responses", str(flipped), "--out", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be both" in err[0] and not out.exists(), err
    spelt = tmp_path / "spelt.jsonl"
    spelt.write_text(
        "".join([*lines, json.dumps(first | {"is_correct": int(first["is_correct"])}) + "\n"])
    )
    with pytest.raises(DataError, match="counted twice"):
        E.load_responses(spelt)
    # a bad label is named as such, not as a conflict
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join([*lines, json.dumps(first | {"is_correct": "maybe"}) + "\n"]))
    with pytest.raises(DataError, match='got the string "maybe"'):
        E.load_responses(bad)
    # a GSM8K model-solutions line given twice: the same
    g = tmp_path / "g.jsonl"
    line = json.dumps({"question": "q", "a": {"solution": "x #### 1", "is_correct": True}})
    g.write_text(f"{line}\n{line}\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(g))}:2: .*{re.escape(str(g))}:1\b"):
        E.load_responses(g)


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        (True, True),
        (False, False),
        (1, True),
        (0, False),
        ("false", None),
        ("true", None),
        ("maybe", None),
        (2, None),
        (None, None),
    ],
)
def test_is_correct_is_a_json_boolean_or_0_1_and_a_string_is_refused(
    tmp_path, capsys, value, accepted
):
    """F12: the docs said a non-boolean is_correct is refused, but "false" and "true" (strings)
    were read as labels. A quoted "false" is true to bool() in most pipelines, a classic source
    of flipped labels: strings are refused (exit 2, file:line, the value and the fix); JSON
    booleans and the integers 0/1 are labels, as docs/eval_verifier.md says."""
    p = tmp_path / "r.jsonl"
    row = {"problem": "q", "response": "r", "generator": "g", "is_correct": value}
    p.write_text(json.dumps(row) + "\n")
    if accepted is not None:
        assert E.load_responses(p)[0]["is_correct"] is accepted
        return
    with pytest.raises(DataError, match=rf"^{re.escape(str(p))}:1: is_correct must be"):
        E.load_responses(p)
    assert _cli("--responses", str(p), "--out", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and json.dumps(value) in err[0], err
    if isinstance(value, str):
        assert "a string" in err[0], err


@pytest.mark.parametrize(
    ("value", "advice"),
    [
        ("false", "write it as the JSON false, unquoted"),
        ("True", "write it as the JSON true, unquoted"),
        (" 1 ", "write it as the JSON 1, unquoted"),
        ("0", "write it as the JSON 0, unquoted"),
        ("maybe", "relabel the row with true/false or 0/1"),
        ("", "relabel the row with true/false or 0/1"),
        ("yes", "relabel the row with true/false or 0/1"),
    ],
)
def test_a_string_is_correct_gets_advice_that_fits_the_value(tmp_path, capsys, value, advice):
    """F10: for "is_correct": "maybe" the error advised "write it unquoted", which fits only
    a quoted boolean word or 0/1 (an unquoted maybe is not JSON). A boolean word or 0/1 is told
    the JSON to write; any other string is told to relabel the row."""
    p = tmp_path / "r.jsonl"
    row = {"problem": "q", "response": "r", "generator": "g", "is_correct": value}
    p.write_text(json.dumps(row) + "\n")
    assert _cli("--responses", str(p), "--out", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and advice in err[0], err
    assert ("unquoted" in err[0]) == advice.endswith("unquoted"), err


def test_an_invalid_score_names_the_scores_file_line_and_what_a_score_is(tmp_path, capsys):
    """An invalid score in a --scores file named only the key tuple ("invalid score 'high'
    at ('p1', 'g', 0)"): now the scores file:line, the key and what a score may be."""
    good, rows, scored, scores = _scored_file(tmp_path)
    lines = scores.read_text().splitlines()
    bad = json.loads(lines[3])
    bad["score"] = "high"
    scores.write_text("\n".join([*lines[:3], json.dumps(bad), *lines[4:]]) + "\n")
    out = tmp_path / "out"
    assert _cli("--responses", str(good), "--scores", str(scores), "--out", str(out)) == 2
    key = f"problem_id={rows[3]['problem_id']!r} generator='g' #0"
    assert capsys.readouterr().err.strip().splitlines() == [
        f"densereward: error: {scores}:4: invalid score 'high' for {key}: a score is a finite "
        "number, or null for an abstention"
    ]
    assert not out.exists()


def test_the_advised_threshold_reproduces_the_reports_rates(tmp_path, capsys):
    """Rerun 16 F1: the auto threshold was a score, 0.14998714, printed as `score >= 0.1500`,
    and the report advised `verifier.threshold=0.1500`, which rejects that score: the advised
    run had TPR 0.833 where the report had 1.000 under the same words. The threshold is now
    written with the decimals that accept the same scores (here 0.14998), in the console,
    the report and its advice, and the advised value reproduces the rates."""
    p = tmp_path / "labelled.jsonl"
    rows = [
        {"problem": f"q{i}", "response": f"r{i}", "is_correct": i < 6, "generator": "g"}
        for i in range(12)
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = E.load_responses(p)
    values = [0.14998714440278324, 0.3, 0.4, 0.5, 0.6, 0.7, 0.1, 0.12, 0.13, 0.14, 0.145, 0.1499]
    scores = tmp_path / "scores.jsonl"
    _write_scores(scores, loaded, [values[int(row["response"][1:])] for row in loaded])
    base = ["--responses", str(p), "--scores", str(scores), "--bootstrap", "0", "--no-plots"]
    assert _cli(*base, "--out", str(tmp_path / "auto")) == 0
    said = capsys.readouterr().out
    m = json.loads((tmp_path / "auto" / "metrics.json").read_text())
    assert m["threshold"] == 0.14998714440278324 and m["threshold_text"] == "0.14998"
    assert m["overall"]["tpr"] == 1.0 and m["overall"]["tnr"] == 1.0
    assert "accept threshold: score >= 0.14998 (auto: 0.14998, Youden's J" in said, said
    report = (tmp_path / "auto" / "report.md").read_text()
    assert "- accept threshold: score >= 0.14998 (auto: 0.14998" in report
    assert "To accept at it in training or evaluation: `verifier.threshold=0.14998`." in report
    assert "0.1500" not in report and "0.1500" not in said
    assert _cli(*base, "--out", str(tmp_path / "advised"), "verifier.threshold=0.14998") == 0
    advised = json.loads((tmp_path / "advised" / "metrics.json").read_text())
    assert advised["overall"]["tpr"] == 1.0 and advised["overall"]["tnr"] == 1.0
    assert "accept threshold: score >= 0.14998 (fixed 0.14998)" in capsys.readouterr().out


def test_two_score_rows_for_one_response_are_refused_naming_both_lines_and_scores(tmp_path, capsys):
    """Rerun 17 F1: a scores file holding each response's row twice (a run's scores.jsonl with
    another run's appended: 24 rows for 12 responses, other scores) was read with no word, the
    later row winning (AUROC 0.500 became 1.000 by file order), and 12 score rows vanished
    uncounted. Refused now (exit 2, one line, nothing written): naming the file, both lines,
    the response and the two scores, and the fix; an exact copy of a row is refused the same
    way, as the responses file refuses one."""
    twelve = _twelve(tmp_path)
    scores = _scored_run(tmp_path, twelve)
    lines = scores.read_text().splitlines(keepends=True)
    first = json.loads(lines[0])
    other = [json.loads(line) | {"score": 0.25} for line in lines]
    conf = tmp_path / "scores_conf.jsonl"
    conf.write_text("".join([*lines, *(json.dumps(r) + "\n" for r in other)]))
    capsys.readouterr()
    base = ["--responses", str(twelve), "--bootstrap", "0", "--no-plots"]
    out = tmp_path / "conf"
    assert _cli(*base, "--scores", str(conf), "--out", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    key = f"problem_id={first['problem_id']!r} generator={first['generator']!r} #0"
    assert f"{conf}:13: " in err[0] and f"{conf}:1 " in err[0] and key in err[0], err
    assert f"score {first['score']!r} there and 0.25 here" in err[0], err
    assert "one score row per response" in err[0], err
    assert not out.exists()
    # the same score but another reason: a conflict too
    reason = tmp_path / "scores_reason.jsonl"
    reason.write_text("".join([*lines, json.dumps(first | {"reason": "no final answer"}) + "\n"]))
    assert _cli(*base, "--scores", str(reason), "--out", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{reason}:13: " in err[0] and "reason" in err[0], err
    assert not out.exists()
    # an exact double: refused as the responses file refuses a copied row
    dup = tmp_path / "scores_dup.jsonl"
    dup.write_text("".join([*lines, *lines]))
    assert _cli(*base, "--scores", str(dup), "--out", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{dup}:13: the same score row as {dup}:1 " in err[0], err
    assert key in err[0] and "one score row per response" in err[0], err
    assert not out.exists()
    # the library refuses it too, not only the command
    with pytest.raises(DataError, match=r":13: .*one score row per response"):
        E.align_scores(E.load_responses(twelve), E.load_scores(conf))
