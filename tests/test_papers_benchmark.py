"""``benchmarks/papers.py`` (issue 19) runs end to end on real GSM8K dev solutions with the
embedded 135M verifier and writes its JSON, markdown and figure (tiny sizes: 2 problems; ~1 min
on 2 quiet cores, ~2.5 min on loaded ones, most of it the 8 sampled reasoning-style reads)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VERDICTS = (
    "reproduced",
    "direction only",
    "not reproduced",
    "not measurable",
    "reached",
    "not reached",
)


def _benchmark():
    spec = importlib.util.spec_from_file_location("papers_bench", REPO / "benchmarks/papers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_papers_benchmark_runs_end_to_end(tmp_path, data_dir, default_model_dir):
    out = tmp_path / "figs"
    argv = [
        "--data",
        str(data_dir / "gsm8k" / "model_solutions_dev.jsonl"),
        "--problems",
        "2",
        "--long-problems",
        "1",
        "--repeat-problems",
        "1",
        "--granularities",
        "2,20",
        "--repeats",
        "2",
        "--max-reasoning-tokens",
        "8",
        "--bootstrap",
        "20",
        "--out",
        str(out),
    ]
    assert _benchmark().main(argv) == 0
    res = json.loads((out / "papers.json").read_text())
    md = (out / "papers.md").read_text()
    png = (out / "papers.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    # Every finding has a verdict from the fixed vocabulary and appears in the markdown table.
    assert len(res["findings"]) >= 9
    for f in res["findings"]:
        assert f["verdict"].startswith(VERDICTS), f
        assert f["claim"] in md
    b = res["b_kwok_axes"]
    assert set(b["granularity"]) == {"2", "20"} and set(b["repeats"]) == {"K=1", "K=2"}
    # Greedy direct repeats of one prompt are identical reads (8 responses, 2 problems).
    assert b["direct_repeats_identical"].startswith("8/8 responses got 2 identical")
    for r in b["granularity"].values():
        assert r["n"] == 8 and 0.0 <= r["auroc"]["value"] <= 1.0
    assert res["e_tuning"]["n_tune_problems"] == 1 and res["e_tuning"]["n_test_problems"] == 1
    assert res["timings"]["reference-free pointwise"]["n_responses"] == 4


def test_papers_render_only_and_compare_side_by_side(tmp_path):
    """``--render-only`` re-renders a committed run under its own stem (no scoring), and
    ``--compare`` puts several runs' findings side by side, one verdict column per verifier
    (issue 27 item 4: the README table shows the 135M and the Qwen 0.5B)."""
    bench = _benchmark()
    src = REPO / "docs" / "figures" / "papers.json"
    res = json.loads(src.read_text())
    other = dict(res, model="qwen2.5-coder-0.5b", verifier="qwen2.5-coder-0.5b verifier")
    (tmp_path / "papers_other.json").write_text(json.dumps(other))
    assert (
        bench.main(["--render-only", str(tmp_path / "papers_other.json"), "--out", str(tmp_path)])
        == 0
    )
    md = (tmp_path / "papers_other.md").read_text()
    assert md.startswith(
        "# Verification papers' findings on GSM8K dev model solutions (qwen2.5-coder-0.5b verifier)"
    )
    assert (tmp_path / "papers_other.png").read_bytes()[:4] == b"\x89PNG"
    assert (
        bench.main(
            ["--compare", str(src), str(tmp_path / "papers_other.json"), "--out", str(tmp_path)]
        )
        == 0
    )
    table = (tmp_path / "papers_compare.md").read_text().splitlines()
    assert table[0] == (
        "| paper | finding | verdict: embedded 135M verifier (bfloat16) "
        "| verdict: qwen2.5-coder-0.5b verifier (bfloat16) |"
    )
    assert len(table) == 2 + 1 + len(res["findings"])  # header, rule, sizes, one row per finding
    assert "30 problems x 4 generators" in table[2]
    # Every verdict cell starts with a bold verdict, and the numbers carry their CIs.
    for line in table[3:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert all(c.startswith("**") for c in cells[2:]), line
    assert "AUROC 0.699 [0.591, 0.814]" in "\n".join(table)
    assert (
        bench._slug("qwen2.5-coder-0.5b") == "qwen2.5-coder-0.5b"
        and bench._slug("/m/Qwen-0.5B/") == "Qwen-0.5B"
    )
