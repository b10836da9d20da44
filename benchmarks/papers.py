"""The three verification papers' findings, reproduced with this library on real labelled data.

One command on ``../shared/data/gsm8k/model_solutions_dev.jsonl`` (GSM8K dev problems, four
generators: GPT-3 6B / 175B, fine-tuned or verification-trained, Cobbe et al. 2021), scored by
the embedded 135M verifier in bfloat16, or by ``--model`` (an offline name such as
``qwen2.5-coder-0.5b``, a directory or a Hub id; dtype ``auto`` unless ``--dtype``):

    python benchmarks/papers.py [--problems 30] [--long-problems 6] [--repeat-problems 6]
    python benchmarks/papers.py --model qwen2.5-coder-0.5b   # -> <out>/papers_qwen2.5-coder-0.5b.*
    python benchmarks/papers.py --compare docs/figures/papers.json docs/figures/papers_qwen2.5-coder-0.5b.json

(a) Zhou et al. 2025 (Variation in Verification), RQ2: TPR and TNR against generator strength
    and against problem difficulty d(x), at a threshold calibrated on the tuning half, with
    problem-bootstrap CIs (and CIs of the differences the paper's claims are about).
(b) Kwok et al. 2026 (LLM-as-a-Verifier), scaling axes: tie rate, within-problem pairwise
    accuracy and AUROC against granularity G, repeats K and criteria C.
    Direct reads are greedy logprob reads: K identical prompts give identical reads (the engine
    deduplicates them), so K is varied through the reasoning style, whose analysis is
    *sampled* (temperature ``reasoning_temperature``, seed per repeat) before each read.
(c) Lu et al. 2025 (When Does Verification Pay Off?), Sec. 5.1: verifier gain (eq. 1) against
    the gain of rejection sampling simulated on the labelled responses, over cells of
    generator family x difficulty, with the correlation.
(d) Reference-guided against reference-free prompts.
(e) Tune G on the first half of the problems, report on the second half against the default.

Every finding is stated as reproduced / not reproduced / not measurable, with numbers, in
``<out>/papers.md`` and ``<out>/papers.json``; the figure is ``<out>/papers.png`` (the stem is
``papers_<model>`` with ``--model``, or ``--name``). ``--compare`` writes
``<out>/papers_compare.md``: the findings of several runs side by side, a verdict column each.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from densereward import metrics as M
from densereward.config import VerifierConfig
from densereward.eval_verifier import load_responses, score_responses
from densereward.io import atomic_write_json, atomic_write_text, to_jsonable
from densereward.metrics.format import format_number, markdown_table

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "gsm8k" / "model_solutions_dev.jsonl"
GENERATORS = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")
CRITERIA_3 = {
    "correctness": "Is the final answer of the response correct, and is the reasoning that leads to it valid?",
    "arithmetic": "Is every calculation in the response arithmetically correct?",
    "reference": "Does the final answer of the response equal the reference answer?",
}
"""C = 3 for the criteria axis; the first is the engine's default criterion, so C = 1 is the
first criterion's read of the same run."""

logger = logging.getLogger("papers")
NAN = float("nan")


# ----------------------------------------------------------------------------- helpers
def _ci(fns: dict[str, Callable[..., float]], *arrays, groups, n_boot: int, seed: int = 0):
    """Problem-bootstrap percentile CIs (:func:`densereward.metrics.bootstrap_many`)."""
    return M.bootstrap_many(fns, *arrays, groups=groups, n_resamples=n_boot, seed=seed)


def _kept(rows, scores):
    ix = [i for i, s in enumerate(scores) if s is not None]
    s = np.asarray([scores[i] for i in ix], dtype=np.float64)
    y = np.asarray([bool(rows[i]["is_correct"]) for i in ix], dtype=np.float64)
    g = np.asarray([rows[i]["problem_id"] for i in ix])
    return ix, s, y, g


def ranking(rows, scores, n_boot: int) -> dict[str, Any]:
    """AUROC, within-problem pairwise accuracy (ties = failures) and tie rate, with CIs."""
    ix, s, y, g = _kept(rows, scores)
    out: dict[str, Any] = {
        "n": len(rows),
        "n_abstained": len(rows) - len(ix),
        "n_problems": len({r["problem_id"] for r in rows}),
    }
    if len(ix) < 2 or y.min() == y.max():
        return out | {
            k: {"value": NAN, "low": NAN, "high": NAN}
            for k in ("auroc", "pairwise_accuracy", "tie_rate")
        }
    fns = {
        "auroc": M.auroc,
        "pairwise_accuracy": lambda a, b, c: M.pairwise_accuracy(a, b, c),
        "tie_rate": lambda a, b, c: M.tie_rate(a, b, c),
    }
    ci = M.bootstrap_many(
        fns,
        s,
        y,
        groups=g.tolist(),
        n_resamples=n_boot,
        seed=0,
        pass_groups=("pairwise_accuracy", "tie_rate"),
    )
    return out | ci


def _subset(rows, scores, keep: Callable[[dict], bool]):
    ix = [i for i, r in enumerate(rows) if keep(r)]
    return [rows[i] for i in ix], [scores[i] for i in ix]


def _score(rows, cfg: VerifierConfig, reference_guided: bool, name: str, timings: dict):
    t0 = time.perf_counter()
    recs, stats = score_responses(rows, cfg, reference_guided=reference_guided)
    dt = time.perf_counter() - t0
    timings[name] = {
        "seconds": dt,
        "n_responses": len(rows),
        "seconds_per_response": dt / max(1, len(rows)),
        "model_reads": stats.get("n_reads"),
        "reads_per_response": (stats.get("n_reads") or 0) / max(1, len(rows)),
        "n_low_mass": stats.get("n_low_mass"),
    }
    logger.info("%s: %d responses in %.0f s", name, len(rows), dt)
    return recs


def _verdict(diff: dict[str, float], expected_sign: int) -> str:
    """reproduced (CI of the difference excludes 0 in the paper's direction), direction only,
    not reproduced (CI excludes 0 the other way, or the point estimate goes the other way),
    or not measurable (undefined)."""
    v, lo, hi = diff.get("value", NAN), diff.get("low", NAN), diff.get("high", NAN)
    if v is None or not math.isfinite(v):
        return "not measurable"
    v, lo, hi = expected_sign * v, expected_sign * lo, expected_sign * hi
    lo, hi = min(lo, hi), max(lo, hi)
    if math.isfinite(lo) and lo > 0:
        return "reproduced"
    if math.isfinite(hi) and hi < 0:
        return "not reproduced (significantly opposite)"
    return "direction only, CI includes 0" if v > 0 else "not reproduced (CI includes 0)"


# ----------------------------------------------------------------------------- (a) Zhou RQ2
def zhou_rq2(rows, scores, threshold: float, n_boot: int) -> dict[str, Any]:
    ix, s, y, g = _kept(rows, scores)
    gens = np.asarray([rows[i]["generator"] for i in ix])
    all_y = np.asarray([bool(r["is_correct"]) for r in rows], dtype=np.float64)
    diff = M.problem_difficulty(
        all_y, [r["problem_id"] for r in rows], [r["generator"] for r in rows]
    )
    d = np.asarray([diff[p] for p in g])
    t = threshold
    rate = {"tpr": lambda a, b: M.tpr(a, b, t), "tnr": lambda a, b: M.tnr(a, b, t)}
    out: dict[str, Any] = {"threshold": t, "per_generator": {}, "per_difficulty": []}
    for gen in GENERATORS:
        m = gens == gen
        if not m.any():
            continue
        r = _ci(rate, s[m], y[m], groups=g[m].tolist(), n_boot=n_boot)
        r["pass_rate"] = float(y[m].mean())
        r["n"] = int(m.sum())
        out["per_generator"][gen] = r
    # d(x) in {0, .25, .5, .75, 1} with four generators; bins as in eval-verifier (bin 1 hardest).
    bins, edges = M.difficulty_bins(d, 4)
    for b, lab in enumerate(M.bin_labels(edges, "B")):
        m = bins == b
        r = _ci(rate, s[m], y[m], groups=g[m].tolist(), n_boot=n_boot) if m.any() else {}
        out["per_difficulty"].append({"label": lab, "n": int(m.sum()), **r})
    fam = np.asarray([0.0 if x.startswith("6b") else 1.0 for x in gens])
    kind = np.asarray([0.0 if x.endswith("finetuning") else 1.0 for x in gens])

    def gap(metric, codes_weak_is_0):
        def f(a, b, c):
            return metric(a[c == 0], b[c == 0], t) - metric(a[c == 1], b[c == 1], t)

        return f

    diffs = {
        "tnr_6b_minus_175b": gap(M.tnr, True),
        "tpr_6b_minus_175b": gap(M.tpr, True),
    }
    out["differences"] = _ci(diffs, s, y, fam, groups=g.tolist(), n_boot=n_boot)
    out["differences"].update(
        _ci(
            {
                "tnr_finetuning_minus_verification": gap(M.tnr, True),
                "tpr_finetuning_minus_verification": gap(M.tpr, True),
            },
            s,
            y,
            kind,
            groups=g.tolist(),
            n_boot=n_boot,
        )
    )
    easy = (d >= 0.5).astype(np.float64)  # 1 = easier half of d(x)
    out["differences"].update(
        _ci(
            {
                "tpr_easy_minus_hard": lambda a, b, c: (
                    M.tpr(a[c == 1], b[c == 1], t) - M.tpr(a[c == 0], b[c == 0], t)
                ),
                "tnr_easy_minus_hard": lambda a, b, c: (
                    M.tnr(a[c == 1], b[c == 1], t) - M.tnr(a[c == 0], b[c == 0], t)
                ),
            },
            s,
            y,
            easy,
            groups=g.tolist(),
            n_boot=n_boot,
        )
    )
    out["pass_rate_by_family"] = {
        "6b": float(y[fam == 0].mean()) if (fam == 0).any() else NAN,
        "175b": float(y[fam == 1].mean()) if (fam == 1).any() else NAN,
    }
    return out


# ----------------------------------------------------------------------------- (c) Lu 5.1
def lu_gain(rows, scores, threshold: float, rs_m: int) -> dict[str, Any]:
    """Verifier gain (eq. 1, pooled over the cell) vs simulated rejection-sampling gain, per cell.

    The file has one response per (problem, generator), so rejection sampling needs a pool of
    several responses per problem: cells are {both families (4 responses/problem), 6B (2),
    175B (2)} x {all problems, d(x) = 0.25, 0.5, 0.75} (d = 0 or 1 have no gain to find).
    """
    ix, s, y, g = _kept(rows, scores)
    gens = [rows[i]["generator"] for i in ix]
    all_y = np.asarray([bool(r["is_correct"]) for r in rows], dtype=np.float64)
    diff = M.problem_difficulty(
        all_y, [r["problem_id"] for r in rows], [r["generator"] for r in rows]
    )
    d = np.asarray([diff[p] for p in g])
    cells = []
    for fam_name, fam_ok in (
        ("4 generators", lambda x: True),
        ("6b", lambda x: x.startswith("6b")),
        ("175b", lambda x: x.startswith("175b")),
    ):
        fm = np.asarray([fam_ok(x) for x in gens])
        for dname, dm in (
            ("all", np.ones_like(d, bool)),
            ("d=0.25", np.isclose(d, 0.25)),
            ("d=0.5", np.isclose(d, 0.5)),
            ("d=0.75", np.isclose(d, 0.75)),
        ):
            m = fm & dm
            if m.sum() < 2:
                continue
            rs = M.simulate_rejection_sampling(
                s[m], y[m], g[m].tolist(), max_attempts=rs_m, threshold=threshold, seed=0
            )
            cells.append(
                {
                    "cell": f"{fam_name}, {dname}",
                    "n": int(m.sum()),
                    "base_accuracy": rs["base_accuracy"],
                    "verifier_gain": M.verifier_gain(s[m], y[m], threshold),
                    "rs_gain": rs["empirical_gain"],
                    "rs_gain_infinite_m": rs["expected_gain_infinite_m"],
                    "acceptance_rate": rs["acceptance_rate"],
                }
            )
    return {
        "max_attempts": rs_m,
        "threshold": threshold,
        "cells": cells,
        "correlation": correlation(cells),
    }


def correlation(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Pearson / Spearman of verifier gain vs RS gain over the *disjoint* cells (one family x
    one difficulty level: no response counted twice); ``all_cells`` adds the pooled cells."""
    from scipy.stats import pearsonr, spearmanr

    def corr(sel):
        vg = np.asarray([c["verifier_gain"] for c in sel], dtype=np.float64)
        rg = np.asarray([c["rs_gain"] for c in sel], dtype=np.float64)
        ok = np.isfinite(vg) & np.isfinite(rg)
        out = {"pearson": NAN, "pearson_p": NAN, "spearman": NAN, "n_cells": int(ok.sum())}
        if ok.sum() >= 3 and np.ptp(vg[ok]) > 0 and np.ptp(rg[ok]) > 0:
            pr = pearsonr(vg[ok], rg[ok])
            out.update(
                pearson=float(pr.statistic),
                pearson_p=float(pr.pvalue),
                spearman=float(spearmanr(vg[ok], rg[ok]).statistic),
            )
        return out

    disjoint = [
        c for c in cells if not c["cell"].startswith("4 ") and not c["cell"].endswith(", all")
    ]
    return corr(disjoint) | {"cells": "family x d(x), disjoint", "all_cells": corr(cells)}


# ----------------------------------------------------------------------------- figure
def _finite_cell(cell: dict[str, Any]) -> bool:
    return all(
        isinstance(cell.get(k), (int, float)) and math.isfinite(cell[k])
        for k in ("verifier_gain", "rs_gain")
    )


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def err(d):
        v = d.get("value", NAN)
        lo, hi = d.get("low", NAN), d.get("high", NAN)
        return v, [[v - lo if math.isfinite(lo) else 0], [hi - v if math.isfinite(hi) else 0]]

    fig, axes = plt.subplots(2, 3, figsize=(17, 9.5))
    a = res["a_zhou_rq2"]
    ax = axes[0, 0]
    names = list(a["per_generator"])
    for j, (k, c) in enumerate((("tpr", "tab:green"), ("tnr", "tab:red"))):
        for i, gname in enumerate(names):
            v, e = err(a["per_generator"][gname][k])
            ax.errorbar(
                i + (j - 0.5) * 0.2,
                v,
                yerr=e,
                fmt="o",
                color=c,
                capsize=4,
                label=k.upper() if i == 0 else None,
            )
    ax.set_xticks(
        range(len(names)),
        [f"{n}\npass {a['per_generator'][n]['pass_rate']:.2f}" for n in names],
        fontsize=8,
    )
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"(a) Zhou RQ2: rates vs generator (threshold {a['threshold']:.3f})")
    ax.legend()
    ax = axes[0, 1]
    bins = [b for b in a["per_difficulty"] if b["n"]]
    for j, (k, c) in enumerate((("tpr", "tab:green"), ("tnr", "tab:red"))):
        for i, b in enumerate(bins):
            v, e = err(b.get(k, {}))
            ax.errorbar(
                i + (j - 0.5) * 0.2,
                v,
                yerr=e,
                fmt="o",
                color=c,
                capsize=4,
                label=k.upper() if i == 0 else None,
            )
            if not math.isfinite(v):
                why = "no correct response" if k == "tpr" else "no wrong response"
                ax.text(
                    i + (j - 0.5) * 0.2,
                    0.5,
                    f"{k.upper()} undefined: {why}",
                    rotation=90,
                    fontsize=7,
                    ha="center",
                    va="center",
                    color=c,
                )
    ax.set_xticks(range(len(bins)), [f"{b['label']}\nn={b['n']}" for b in bins], fontsize=8)
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("difficulty d(x) (left = hardest)")
    ax.set_title("(a) Zhou RQ2: rates vs problem difficulty")
    ax.legend()

    b = res["b_kwok_axes"]
    ax = axes[0, 2]
    gs = [int(k) for k in b["granularity"]]
    for k, c in (
        ("auroc", "tab:blue"),
        ("pairwise_accuracy", "tab:orange"),
        ("tie_rate", "tab:gray"),
    ):
        vals = [b["granularity"][str(x)][k]["value"] for x in gs]
        lo = [b["granularity"][str(x)][k]["low"] for x in gs]
        hi = [b["granularity"][str(x)][k]["high"] for x in gs]
        ax.plot(gs, vals, "o-", color=c, label=k)
        ax.fill_between(gs, lo, hi, color=c, alpha=0.15)
    ax.set_xscale("log")
    ax.set_xticks(gs, [str(x) for x in gs])
    ax.minorticks_off()
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("granularity G (answer_match, reference-guided)")
    ax.set_title(f"(b) Kwok: granularity ({b['granularity'][str(gs[0])]['n_problems']} problems)")
    ax.legend(fontsize=8)

    ax = axes[1, 0]
    groups = [(k, b["repeats"][k]) for k in b["repeats"]] + [
        (c, b["criteria"][c]) for c in b["criteria"]
    ]
    width = 0.27
    for j, (k, c) in enumerate(
        (("auroc", "tab:blue"), ("pairwise_accuracy", "tab:orange"), ("tie_rate", "tab:gray"))
    ):
        for i, (_, r) in enumerate(groups):
            v, e = err(r[k])
            ax.bar(
                i + (j - 1) * width,
                v,
                width,
                yerr=e,
                color=c,
                capsize=3,
                label=k if i == 0 else None,
            )
            if not math.isfinite(v):
                ax.text(
                    i + (j - 1) * width,
                    0.02,
                    "undefined",
                    rotation=90,
                    fontsize=7,
                    ha="center",
                    va="bottom",
                )
    if all(r["tie_rate"].get("value") == 0 for _, r in groups):
        ax.text(
            0.02,
            0.97,
            "tie rate 0 in every setting (no bar)",
            transform=ax.transAxes,
            fontsize=8,
            va="top",
            color="tab:gray",
        )
    ax.set_xticks(range(len(groups)), [n for n, _ in groups])
    ax.set_ylim(0, 1.05)
    ax.set_title(
        f"(b) Kwok: repeats K (reasoning, sampled analyses; {groups[0][1]['n_problems']} problems)\n"
        f"and criteria C (pointwise + reference; {groups[-1][1]['n_problems']} problems)",
        fontsize=10,
    )
    ax.legend(fontsize=8)

    c = res["c_lu_gain"]
    ax = axes[1, 1]
    undefined = [x["cell"] for x in c["cells"] if not _finite_cell(x)]
    c = dict(c, cells=[x for x in c["cells"] if _finite_cell(x)])
    for cell in c["cells"]:
        col = (
            "tab:purple"
            if cell["cell"].startswith("4")
            else ("tab:olive" if cell["cell"].startswith("6b") else "tab:cyan")
        )
        ax.scatter(cell["verifier_gain"], cell["rs_gain"], color=col)
        ax.annotate(cell["cell"], (cell["verifier_gain"], cell["rs_gain"]), fontsize=7)
    lim = [
        min([0.0] + [x["verifier_gain"] for x in c["cells"]] + [x["rs_gain"] for x in c["cells"]])
        - 0.02,
        max([0.0] + [x["verifier_gain"] for x in c["cells"]] + [x["rs_gain"] for x in c["cells"]])
        + 0.02,
    ]
    ax.plot(lim, lim, "k--", lw=0.8)
    ax.axhline(0, color="gray", lw=0.5)
    ax.axvline(0, color="gray", lw=0.5)
    ax.set_xlabel("verifier gain (precision - accuracy, Lu eq. 1)")
    ax.set_ylabel(f"rejection-sampling gain (simulated, M={c['max_attempts']})")
    r = c["correlation"]
    ax.set_title(
        f"(c) Lu 5.1: Pearson r={r['pearson']:.2f}, Spearman {r['spearman']:.2f} "
        f"({r['n_cells']} disjoint cells)"
        + (
            f"\nundefined (no response accepted), not shown: {', '.join(undefined)}"
            if undefined
            else ""
        ),
        fontsize=10,
    )

    ax = axes[1, 2]
    d = res["d_reference"]
    e_ = res["e_tuning"]
    bars = [(k, v["auroc"]) for k, v in d["conditions"].items()] + [
        (f"held-out G={e_['default_G']} (default)", e_["test"]["default"]["auroc"]),
        (f"held-out G={e_['best_G']} (tuned)", e_["test"]["best"]["auroc"]),
    ]
    for i, (_n, r_) in enumerate(bars):
        v, e = err(r_)
        ax.bar(
            i, v, yerr=e, capsize=4, color="tab:blue" if i < len(d["conditions"]) else "tab:green"
        )
        ax.text(
            i + 0.22,
            (v if math.isfinite(v) else 0) + 0.02,
            format_number(v, 2) if math.isfinite(v) else "undefined",
            ha="center",
            fontsize=8,
        )
    ax.axhline(0.5, color="gray", lw=0.8, ls="--")
    ax.axhline(0.7, color="tab:red", lw=0.8, ls=":")
    ax.set_xticks(range(len(bars)), [n for n, _ in bars], rotation=20, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("AUROC (95% problem-bootstrap CI)")
    ax.set_title(
        f"(d) reference-guided vs -free ({d['n_problems']} problems)\n"
        f"(e) tuned G vs default G on the held-out half ({e_['n_test_problems']} problems)",
        fontsize=10,
    )
    fig.suptitle(
        f"Verification papers' findings, GSM8K dev model solutions, {res.get('verifier', verifier_label(None))} "
        f"({res.get('dtype', 'bfloat16')}; {res.get('sizes', '')})",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- report
def _vci(d):
    """``value [low, high]`` of a bootstrap dict, 3 decimals (``n/a`` where undefined)."""
    return f"{format_number(d.get('value'))} [{format_number(d.get('low'))}, {format_number(d.get('high'))}]"


TNR_CEILING = 0.95
"""When every generator's TNR is at least this, a TNR difference cannot show (Zhou RQ2 rows)."""


def _rise(lo: dict[str, float], hi: dict[str, float]) -> str:
    """Verdict for "AUROC rises along an axis": ``lo`` at the axis's smallest setting, ``hi`` at
    its largest (bootstrap dicts): reproduced when the CIs separate upwards."""
    a, b = lo.get("value", NAN), hi.get("value", NAN)
    if not (math.isfinite(a) and math.isfinite(b)):
        return "not measurable"
    if b > a and hi.get("low", NAN) > lo.get("high", NAN):
        return "reproduced"
    return "direction only, CIs overlap" if b > a else "not reproduced"


def findings(res: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Rows ``(paper, claim, verdict, numbers)``."""
    a, b, c, d, e = (
        res[k] for k in ("a_zhou_rq2", "b_kwok_axes", "c_lu_gain", "d_reference", "e_tuning")
    )
    D = a["differences"]
    tnrs = [r["tnr"].get("value", NAN) for r in a["per_generator"].values()]
    ceiling = (
        f"not measurable: TNR at its ceiling (>= {TNR_CEILING} for every generator at threshold "
        f"{format_number(a['threshold'])})"
        if tnrs and all(math.isfinite(x) and x >= TNR_CEILING for x in tnrs)
        else None
    )
    rows = [
        (
            "Zhou RQ2",
            "TNR falls as the generator gets stronger (6B errors are easier to catch than 175B's)",
            ceiling or _verdict(D["tnr_6b_minus_175b"], +1),
            f"TNR(6B) - TNR(175B) = {_vci(D['tnr_6b_minus_175b'])}; TNR "
            + " / ".join(
                format_number(a["per_generator"][gn]["tnr"]["value"], 2)
                for gn in a["per_generator"]
            )
            + f" ({' / '.join(a['per_generator'])}), threshold {format_number(a['threshold'])}",
        ),
        (
            "Zhou RQ2",
            "TNR: finetuning (weaker) vs verification-trained generators",
            ceiling or _verdict(D["tnr_finetuning_minus_verification"], +1),
            f"TNR(ft) - TNR(ver) = {_vci(D['tnr_finetuning_minus_verification'])}; TPR "
            + " / ".join(
                format_number(a["per_generator"][gn]["tpr"]["value"], 2)
                for gn in a["per_generator"]
            ),
        ),
        (
            "Zhou RQ2",
            "TPR rises on easier problems",
            _verdict(D["tpr_easy_minus_hard"], +1),
            f"TPR(d>=0.5) - TPR(d<0.5) = {_vci(D['tpr_easy_minus_hard'])}",
        ),
    ]
    G = b["granularity"]
    gs = sorted(G, key=int)
    tie_lo, tie_hi = G[gs[0]]["tie_rate"], G[gs[-1]]["tie_rate"]
    dtie = tie_lo["value"] - tie_hi["value"]
    rows.append(
        (
            "Kwok",
            f"tie rate falls as G grows (G={gs[0]} -> {gs[-1]})",
            "not measurable: expected-value scores never tie"
            if max(G[g]["tie_rate"]["value"] for g in gs) == 0
            else "reproduced"
            if dtie > 0 and tie_lo["low"] > tie_hi["high"]
            else ("direction only" if dtie > 0 else "not reproduced"),
            ", ".join(f"G={g}: {format_number(G[g]['tie_rate']['value'])}" for g in gs),
        )
    )
    rows.append(
        (
            "Kwok",
            "AUROC / pairwise accuracy rise with G",
            _rise(G[gs[0]]["auroc"], G[gs[-1]]["auroc"]),
            "; ".join(
                f"G={g}: AUROC {_vci(G[g]['auroc'])} pairwise {_vci(G[g]['pairwise_accuracy'])}"
                for g in gs
            ),
        )
    )
    K = b["repeats"]
    ks = list(K)
    rows.append(
        (
            "Kwok",
            "more repeats K (sampled analyses) raise AUROC / cut ties",
            _rise(K[ks[0]]["auroc"], K[ks[-1]]["auroc"]),
            "; ".join(
                f"{k}: AUROC {_vci(K[k]['auroc'])} ties {format_number(K[k]['tie_rate']['value'])} abst. {K[k]['n_abstained']}"
                for k in ks
            )
            + f" ({K[ks[0]]['n_problems']} problems)"
            + f"; direct reads: {b['direct_repeats_identical']}",
        )
    )
    C = b["criteria"]
    cs = list(C)
    rows.append(
        (
            "Kwok",
            "more criteria C raise AUROC",
            _rise(C[cs[0]]["auroc"], C[cs[-1]]["auroc"]),
            "; ".join(
                f"{k}: AUROC {_vci(C[k]['auroc'])} pairwise {format_number(C[k]['pairwise_accuracy']['value'])}"
                for k in cs
            )
            + f" ({C[cs[0]]['n_problems']} problems, pointwise + reference)",
        )
    )
    r = c["correlation"]
    rows.append(
        (
            "Lu 5.1",
            "verifier gain predicts the rejection-sampling gain (positive correlation across cells)",
            "not measurable"
            if not math.isfinite(r["pearson"])
            else (
                "reproduced"
                if r["pearson"] > 0 and r["pearson_p"] < 0.05
                else ("direction only (p >= 0.05)" if r["pearson"] > 0 else "not reproduced")
            ),
            f"Pearson r = {format_number(r['pearson'], 2)} (p = {format_number(r['pearson_p'], 3)}), Spearman {format_number(r['spearman'], 2)} over "
            f"{r['n_cells']} disjoint cells (family x d(x)); over all {r['all_cells']['n_cells']} cells incl. pooled ones "
            f"r = {format_number(r['all_cells']['pearson'], 2)} (p = {format_number(r['all_cells']['pearson_p'], 3)})",
        )
    )
    dc = d["conditions"]
    ref, free = dc["reference-guided answer_match"]["auroc"], dc["reference-free"]["auroc"]
    rows.append(
        (
            "this library",
            "the reference-guided prompt beats the reference-free one",
            "reproduced"
            if ref["low"] > free["high"]
            else ("direction only" if ref["value"] > free["value"] else "not reproduced"),
            "; ".join(f"{k}: AUROC {_vci(v['auroc'])}" for k, v in dc.items())
            + f" ({d['n_problems']} problems)",
        )
    )
    rows.append(
        (
            "this library",
            f"held-out reference-guided AUROC >= 0.70 (tuned G={e['best_G']} vs default G={e['default_G']})",
            "reached" if e["test"]["best"]["auroc"]["value"] >= 0.70 else "not reached",
            f"held-out: default {_vci(e['test']['default']['auroc'])}, tuned {_vci(e['test']['best']['auroc'])}; "
            f"difference {_vci(e['test']['difference'])}; {e['decision']}",
        )
    )
    return rows


def render(res: dict[str, Any]) -> str:
    lines = [
        f"# Verification papers' findings on GSM8K dev model solutions ({res.get('verifier', verifier_label(None))})",
        "",
        f"Command: `{res['command']}`  ",
        f"Data: {res['data']}; {res['sizes']}  ",
        f"Total wall time {res['wall_seconds']:.0f} s on {os.cpu_count()} CPU cores, dtype {res['dtype']}."
        + (f"  \n{res['cost_note']}" if res.get("cost_note") else ""),
        "",
        markdown_table(
            ["paper", "claim", "verdict", "numbers"],
            [[p, cl, f"**{v}**", n] for p, cl, v, n in findings(res)],
        ),
    ]
    a = res["a_zhou_rq2"]
    lines += [
        "",
        f"## (a) TPR / TNR at threshold {a['threshold']:.4f} (Youden's J on the tuning half)",
        "",
        markdown_table(
            ["generator", "pass rate", "n", "TPR", "TNR"],
            [
                [gname, format_number(r["pass_rate"], 2), r["n"], _vci(r["tpr"]), _vci(r["tnr"])]
                for gname, r in a["per_generator"].items()
            ],
        ),
        "",
        markdown_table(
            ["difficulty bin (d(x), hardest first)", "n", "TPR", "TNR"],
            [
                [r["label"], r["n"], _vci(r.get("tpr", {})), _vci(r.get("tnr", {}))]
                for r in a["per_difficulty"]
                if r["n"]
            ],
        ),
    ]
    b = res["b_kwok_axes"]
    axes_rows = [
        [
            axis + "=" + k if axis else k,
            r["n_problems"],
            _vci(r["auroc"]),
            _vci(r["pairwise_accuracy"]),
            _vci(r["tie_rate"]),
            r["n_abstained"],
            format_number(r.get("cost", {}).get("seconds_per_response"), 2),
            format_number(r.get("cost", {}).get("reads_per_response"), 1),
        ]
        for axis, d in (("G", b["granularity"]), ("", b["repeats"]), ("", b["criteria"]))
        for k, r in d.items()
    ]
    lines += [
        "",
        "## (b) Scaling axes",
        "",
        markdown_table(
            [
                "setting",
                "problems",
                "AUROC",
                "pairwise acc.",
                "tie rate",
                "abstained",
                "s / response",
                "reads / response",
            ],
            axes_rows,
        ),
    ]
    lines += ["", f"K: {b['repeats_note']}", "", f"C: {b['criteria_note']}"]
    c = res["c_lu_gain"]
    rs_keys = ("base_accuracy", "verifier_gain", "rs_gain", "rs_gain_infinite_m", "acceptance_rate")
    lines += [
        "",
        f"## (c) Verifier gain vs simulated rejection sampling (M = {c['max_attempts']})",
        "",
        markdown_table(
            ["cell", "n", "base acc.", "verifier gain", "RS gain", "RS gain (M=inf)", "acceptance"],
            [[r["cell"], r["n"], *(r[k] for k in rs_keys)] for r in c["cells"]],
        ),
    ]
    d = res["d_reference"]
    lines += [
        "",
        f"## (d) Reference-guided vs reference-free ({d['n_problems']} problems, G = 20, K = 1)",
        "",
        markdown_table(
            ["prompt", "AUROC", "pairwise acc.", "tie rate", "s / response"],
            [
                [
                    k,
                    _vci(r["auroc"]),
                    _vci(r["pairwise_accuracy"]),
                    _vci(r["tie_rate"]),
                    format_number(r.get("cost", {}).get("seconds_per_response"), 2),
                ]
                for k, r in d["conditions"].items()
            ],
        ),
    ]
    e = res["e_tuning"]
    lines += [
        "",
        "## (e) Tuned on the first half, reported on the second",
        "",
        f"Tuning half ({e['n_tune_problems']} problems) AUROC by G: "
        + ", ".join(f"G={g}: {format_number(v)}" for g, v in e["tune_auroc"].items()),
        "",
        f"Held-out half ({e['n_test_problems']} problems): default G={e['default_G']} {_vci(e['test']['default']['auroc'])}, "
        f"tuned G={e['best_G']} {_vci(e['test']['best']['auroc'])}, paired difference {_vci(e['test']['difference'])}; "
        f"cost {format_number(e['cost_per_response_s'], 2)} s / response (G={e['best_G']}, one read). {e['decision']}",
    ]
    lines += [
        "",
        "## Timings",
        "",
        markdown_table(
            ["run", "responses", "s", "s / response", "reads / response", "low-mass abstentions"],
            [
                [
                    k,
                    t["n_responses"],
                    format_number(t["seconds"], 0),
                    format_number(t["seconds_per_response"], 2),
                    format_number(t["reads_per_response"], 1),
                    t["n_low_mass"],
                ]
                for k, t in res["timings"].items()
            ],
        ),
    ]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--problems", type=int, default=30, help="dev problems for G, (a), (c), (e)")
    ap.add_argument(
        "--long-problems",
        type=int,
        default=6,
        help="problems for the long pointwise prompts (C, reference-free)",
    )
    ap.add_argument(
        "--repeat-problems", type=int, default=6, help="problems for the K axis (reasoning style)"
    )
    ap.add_argument("--granularities", default="2,3,5,10,20")
    ap.add_argument(
        "--repeats", type=int, default=4, help="largest K; K = 1, 2, 4 ... up to it are reported"
    )
    ap.add_argument("--max-reasoning-tokens", type=int, default=32)
    ap.add_argument("--rs-attempts", type=int, default=8)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument(
        "--model",
        default=None,
        help="verifier.model: an offline name (qwen2.5-coder-0.5b), a directory or a Hub id; "
        "default the embedded SmolLM2-135M",
    )
    ap.add_argument(
        "--dtype",
        default=None,
        help="verifier.backend_options.dtype; default bfloat16 for the embedded 135M (as committed), "
        "'auto' (densereward.backends.dtype.resolve_dtype) for --model",
    )
    ap.add_argument(
        "--name",
        default=None,
        help="output stem under --out: papers (default model) or papers_<model name>",
    )
    ap.add_argument("--batch-size", type=int, default=16, help="verifier.batch_size")
    ap.add_argument(
        "--cache-dir", default=None, help="verifier.cache_dir: a rerun reuses the reads"
    )
    ap.add_argument("--out", default=str(REPO / "docs" / "figures"))
    ap.add_argument(
        "--render-only",
        default=None,
        help="re-render papers.md/png and the findings from an earlier papers.json (no scoring)",
    )
    ap.add_argument(
        "--compare",
        nargs="+",
        default=None,
        metavar="JSON",
        help="write <out>/papers_compare.md: the findings of these papers*.json side by side "
        "(one verdict column per verifier; no scoring)",
    )
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.compare:
        text = compare(args.compare)
        atomic_write_text(out / "papers_compare.md", text)
        print(text)
        return 0
    if args.render_only:
        res = _nanify(json.loads(Path(args.render_only).read_text()))
        res["c_lu_gain"]["correlation"] = correlation(res["c_lu_gain"]["cells"])
        _write(res, out, args.name or Path(args.render_only).stem)
        return 0
    if args.dtype is None:
        args.dtype = "bfloat16" if args.model is None else "auto"
    name = args.name or ("papers" if args.model is None else "papers_" + _slug(args.model))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    t_start = time.perf_counter()
    gs = [int(x) for x in args.granularities.split(",")]
    default_g = VerifierConfig().granularity
    if default_g not in gs:
        gs.append(default_g)
    rows = load_responses(args.data, limit=args.problems)
    pids = list(dict.fromkeys(r["problem_id"] for r in rows))
    tune = set(pids[: len(pids) // 2])
    long_p = set(pids[: args.long_problems])
    rep_p = set(pids[: args.repeat_problems])
    base = dict(
        model=args.model,
        cache_dir=args.cache_dir,
        batch_size=args.batch_size,
        backend_options={"dtype": args.dtype},
    )
    timings: dict[str, Any] = {}

    # Warm-up (model load, first forward passes) so that the first timed run is not charged for it.
    score_responses(rows[:2], VerifierConfig(**base), reference_guided=True)

    # --- G axis on the reference-guided default prompt (answer_match); the default G with K
    # direct repeats too, to show that greedy direct repeats are identical reads.
    k_max = args.repeats
    by_g: dict[int, list] = {}
    identical = None
    for g in gs:
        k = k_max if g == default_g else 1
        recs = _score(
            rows,
            VerifierConfig(granularity=g, n_repeats=k, **base),
            True,
            f"answer_match G={g} K={k} direct",
            timings,
        )
        by_g[g] = recs
        if k > 1:
            reads = [r["per_repeat"] for r in recs if r["per_repeat"]]
            same = sum(1 for pr in reads if len(set(pr)) == 1)
            identical = (
                f"{same}/{len(reads)} responses got {k} identical direct reads at G={g} "
                f"(greedy logprob reads of the same prompt; the engine deduplicates them: "
                f"{timings[f'answer_match G={g} K={k} direct']['model_reads']} reads requested)"
            )
    scores_g = {g: [r["score"] for r in by_g[g]] for g in gs}
    kwok_g = {}
    for g in gs:
        kwok_g[str(g)] = ranking(rows, scores_g[g], args.bootstrap)
        kwok_g[str(g)]["cost"] = timings[next(k for k in timings if f"G={g} " in k)]

    # --- K axis: reasoning style (sampled analysis before each read), reference-guided.
    rrows = [r for r in rows if r["problem_id"] in rep_p]
    recs_k = _score(
        rrows,
        VerifierConfig(
            granularity=default_g,
            n_repeats=k_max,
            style="reasoning",
            max_reasoning_tokens=args.max_reasoning_tokens,
            **base,
        ),
        True,
        f"answer_match reasoning K={k_max}",
        timings,
    )
    ks = [k for k in (1, 2, 4, 8) if k <= k_max]
    kwok_k = {}
    for k in ks:
        sc = []
        for rec in recs_k:
            if not rec["per_repeat"]:  # scored without a model call (no final answer)
                sc.append(rec["score"])
                continue
            vals = [v for v in rec["per_repeat"][:k] if v is not None]
            sc.append(float(np.mean(vals)) if vals else None)
        kwok_k[f"K={k}"] = ranking(rrows, sc, args.bootstrap)
        kwok_k[f"K={k}"]["cost"] = {
            "seconds_per_response": timings[f"answer_match reasoning K={k_max}"][
                "seconds_per_response"
            ]
            * k
            / k_max,
            "reads_per_response": float(k),
        }
    n_diff = sum(
        1
        for r in recs_k
        if r["per_repeat"] and len({v for v in r["per_repeat"] if v is not None}) > 1
    )

    # --- C axis and (d): the long pointwise prompt, on the first --long-problems problems.
    lrows = [r for r in rows if r["problem_id"] in long_p]
    recs_c = _score(
        lrows,
        VerifierConfig(granularity=default_g, criteria=dict(CRITERIA_3), **base),
        True,
        "pointwise + reference, C=3",
        timings,
    )
    first = next(iter(CRITERIA_3))
    sc1 = [None if r["score"] is None else (r["per_criterion"] or {}).get(first) for r in recs_c]
    kwok_c = {
        "C=1": ranking(lrows, sc1, args.bootstrap),
        "C=3": ranking(lrows, [r["score"] for r in recs_c], args.bootstrap),
    }
    tc = timings["pointwise + reference, C=3"]
    kwok_c["C=1"]["cost"] = {
        "seconds_per_response": tc["seconds_per_response"] / 3,
        "reads_per_response": 1.0,
    }
    kwok_c["C=3"]["cost"] = tc
    recs_free = _score(
        lrows,
        VerifierConfig(granularity=default_g, **base),
        False,
        "reference-free pointwise",
        timings,
    )
    lidx = [i for i, r in enumerate(rows) if r["problem_id"] in long_p]
    ref_cond = {
        "reference-guided answer_match": ranking(
            lrows, [scores_g[default_g][i] for i in lidx], args.bootstrap
        ),
        "reference-guided pointwise (C=1)": kwok_c["C=1"],
        "reference-free": ranking(lrows, [r["score"] for r in recs_free], args.bootstrap),
    }
    ref_cond["reference-guided answer_match"]["cost"] = kwok_g[str(default_g)]["cost"]
    ref_cond["reference-free"]["cost"] = timings["reference-free pointwise"]

    # --- (e) tune G on the first half, test on the second.
    y_all = np.asarray([bool(r["is_correct"]) for r in rows], dtype=np.float64)
    tune_auroc = {}
    for g in gs:
        trows, tsc = _subset(rows, scores_g[g], lambda r: r["problem_id"] in tune)
        _, s_, y_, _ = _kept(trows, tsc)
        tune_auroc[str(g)] = M.auroc(s_, y_)
    best_g = max(
        gs,
        key=lambda g: (
            tune_auroc[str(g)] if math.isfinite(tune_auroc[str(g)]) else -1,
            g == default_g,
        ),
    )
    test_ix = [
        i
        for i, r in enumerate(rows)
        if r["problem_id"] not in tune
        and scores_g[best_g][i] is not None
        and scores_g[default_g][i] is not None
    ]
    sb = np.asarray([scores_g[best_g][i] for i in test_ix])
    sd = np.asarray([scores_g[default_g][i] for i in test_ix])
    yt = y_all[test_ix]
    gt = [rows[i]["problem_id"] for i in test_ix]
    test = M.bootstrap_many(
        {
            "best": lambda a, b, c: M.auroc(a, c),
            "default": lambda a, b, c: M.auroc(b, c),
            "difference": lambda a, b, c: M.auroc(a, c) - M.auroc(b, c),
        },
        sb,
        sd,
        yt,
        groups=gt,
        n_resamples=args.bootstrap,
        seed=0,
    )
    test = {k: {"auroc": v} if k != "difference" else v for k, v in test.items()}
    clearly = best_g != default_g and test["difference"]["low"] > 0
    decision = (
        f"G={best_g} beats the default on the held-out half (CI of the difference > 0): recommended as default"
        if clearly
        else (
            "the tuned G is the default G"
            if best_g == default_g
            else f"G={best_g} does not clearly beat G={default_g} on the held-out half: default kept"
        )
    )

    # --- (a) and (c) at the threshold calibrated on the tuning half (default setting).
    s_def = scores_g[default_g]
    trows, tsc = _subset(rows, s_def, lambda r: r["problem_id"] in tune)
    _, s_, y_, _ = _kept(trows, tsc)
    thr = M.best_threshold(s_, y_)["threshold"]
    thr = 0.5 if not math.isfinite(thr) else thr
    res: dict[str, Any] = {
        "command": "python benchmarks/papers.py "
        + " ".join(argv if argv is not None else __import__("sys").argv[1:]),
        "data": str(Path(args.data).name),
        "dtype": _resolved_dtype(args.dtype),
        "model": args.model,
        "verifier": verifier_label(args.model),
        "sizes": (
            f"{len(pids)} problems x 4 generators for G, (a), (c), (e) (tuning half = first {len(tune)}); "
            f"first {len(long_p)} for C and (d); first {len(rep_p)} for K"
        ),
        "a_zhou_rq2": zhou_rq2(rows, s_def, thr, args.bootstrap),
        "b_kwok_axes": {
            "granularity": kwok_g,
            "repeats": kwok_k,
            "criteria": kwok_c,
            "direct_repeats_identical": identical,
            "repeats_note": (
                f"direct reads are greedy: {identical}. K is therefore varied with the reasoning style: "
                f"before each read the model samples an analysis of up to {args.max_reasoning_tokens} tokens "
                f"(temperature {VerifierConfig().reasoning_temperature}, a different seed per repeat), so repeats "
                f"differ; {n_diff}/{len(recs_k)} responses got differing reads. K=k averages the first k reads of "
                f"one K={k_max} run; reads below the score-token mass floor ({VerifierConfig().min_mass}) abstain."
            ),
            "criteria_note": (
                "C = 3 criteria on the pointwise prompt with the reference answer: "
                + "; ".join(f"{k}: {v}" for k, v in CRITERIA_3.items())
                + ". C = 1 is the first criterion's read of the same run (the answer_match prompt has one criterion)."
            ),
        },
        "c_lu_gain": lu_gain(rows, s_def, thr, args.rs_attempts),
        "d_reference": {"n_problems": len(long_p), "conditions": ref_cond},
        "e_tuning": {
            "n_tune_problems": len(tune),
            "n_test_problems": len(pids) - len(tune),
            "tune_auroc": tune_auroc,
            "best_G": best_g,
            "default_G": default_g,
            "test": test,
            "decision": decision,
            "cost_per_response_s": kwok_g[str(best_g)]["cost"]["seconds_per_response"],
        },
        "timings": timings,
    }
    res["wall_seconds"] = time.perf_counter() - t_start
    _write(res, out, name)
    print(json.dumps({"wall_seconds": round(res["wall_seconds"])}))
    return 0


def compare(paths: Sequence[str | Path]) -> str:
    """Markdown: the findings of several ``papers*.json`` side by side, one verdict column per
    verifier (its verdict, then its numbers with CIs), and a row of each run's sizes."""
    runs = [_nanify(json.loads(Path(p).read_text())) for p in paths]
    for r in runs:
        r["c_lu_gain"]["correlation"] = correlation(r["c_lu_gain"]["cells"])
    tables = [findings(r) for r in runs]
    n = len(tables[0])
    if any(len(t) != n for t in tables):
        raise ValueError("the runs have different numbers of findings")
    heads = [
        f"{r.get('verifier', verifier_label(None))} ({r.get('dtype', 'bfloat16')})" for r in runs
    ]
    rows = [
        [
            "sizes",
            "",
            *(
                r["sizes"]
                + f"; {r.get('cost_wall') or format_number(r['wall_seconds'] / 60, 0) + ' min'}"
                for r in runs
            ),
        ]
    ]
    for i in range(n):
        paper, claim = tables[0][i][0], tables[0][i][1]
        cells = []
        for t in tables:
            _, cl, v, num = t[i]
            extra = f" ({cl})" if cl != claim else ""
            cells.append(f"**{v}**{extra}: {num}")
        rows.append([paper, claim, *cells])
    return markdown_table(["paper", "finding", *(f"verdict: {h}" for h in heads)], rows) + "\n"


_NUMERIC_KEYS = frozenset(
    (
        "value",
        "low",
        "high",
        "base_accuracy",
        "verifier_gain",
        "rs_gain",
        "rs_gain_infinite_m",
        "acceptance_rate",
        "pass_rate",
        "threshold",
    )
)


def _nanify(obj: Any) -> Any:
    """JSON null (how :func:`to_jsonable` writes NaN) back to NaN inside metric dicts."""
    if isinstance(obj, dict):
        return {
            k: (NAN if v is None and k in _NUMERIC_KEYS else _nanify(v)) for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_nanify(v) for v in obj]
    return obj


def _slug(model: str) -> str:
    """``qwen2.5-coder-0.5b`` -> itself; a path or Hub id -> its last part."""
    return Path(str(model).rstrip("/")).name.replace(" ", "_")


def _resolved_dtype(dtype: str) -> str:
    from densereward.backends.dtype import resolve_dtype

    return f"{resolve_dtype(dtype, 'cpu')} (auto)" if dtype == "auto" else dtype


def verifier_label(model: str | None) -> str:
    return "embedded 135M verifier" if model is None else f"{model} verifier"


def _write(res: dict[str, Any], out: Path, name: str = "papers") -> None:
    out.mkdir(parents=True, exist_ok=True)
    res["findings"] = [
        dict(zip(("paper", "claim", "verdict", "numbers"), f, strict=True)) for f in findings(res)
    ]
    atomic_write_json(out / f"{name}.json", to_jsonable(res))
    atomic_write_text(out / f"{name}.md", render(res))
    plot(res, out / f"{name}.png")
    print(render(res))


if __name__ == "__main__":
    raise SystemExit(main())
