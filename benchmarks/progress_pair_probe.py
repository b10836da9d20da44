"""Can a small verifier compare two robot states? A binary pairwise choice on stated distances.

The read a distilled reward (issue 39) would be trained on: "which state is closer to
completing the task? A or B", answered after the prefill ``Answer:``, read as the probability
of `` A`` against `` B`` (the two tokens' softmax; their share of the whole next-token mass is
reported as ``mass``). Each pair is asked in both orders and the position bias cancelled,
``p(a closer) = (P_A(a, b) + 1 - P_A(b, a)) / 2``; a state's strength is its mean
preference over the other states (a Borda / Bradley-Terry-style summary). ``pair_acc`` is the
share of pairs whose debiased preference picks the state with the smaller distance; ``rho``
the Spearman correlation of strength with closeness.

Forms: ``now`` (``Gripper-target distance now N cm.``) and ``rel`` (with the 5 cm success
radius); ``--demos`` adds two solved pairs as chat turns. Raw transformers on purpose: the
library reads scores on a graded scale, this probes the plain binary choice.

Run (measured 2026-12-02 on 2 shared cores, Qwen2.5-Coder-0.5B, 4-bit Q4_K_M GGUF converted,
float32; results in ``docs/figures/progress_pair_probe.json``)::

    HF_HUB_OFFLINE=1 python benchmarks/progress_pair_probe.py --form now \\
        --states 0.5 2 4 6 9 12 16 20 26
    HF_HUB_OFFLINE=1 python benchmarks/progress_pair_probe.py --form rel --demos \\
        --states 1 4 9 16 26
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

TASK = "Move the robot gripper to the target. Success: gripper within 5 cm of the target."
SYSTEM = "You compare two states of a robot task and answer with one letter: A or B."
DEMO_PAIRS = ((25, 8), (3, 14))  # answers B, A


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--form", choices=("now", "rel"), default="now")
    ap.add_argument("--demos", action="store_true")
    ap.add_argument("--states", type=float, nargs="+", default=[1, 4, 9, 16, 26])
    ap.add_argument("--json", default=None, help="append the result to this JSON list")
    args = ap.parse_args()

    import torch
    from scipy.stats import spearmanr
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from densereward.backends.models import resolve_model

    path = resolve_model(args.model)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    def state(d: float) -> str:
        if args.form == "now":
            return f"Gripper-target distance now {d:.0f} cm."
        return f"Gripper-target distance {d:.0f} cm (success: within 5 cm)."

    def user(a: float, b: float) -> str:
        return (
            f"Task: {TASK}\n\nState A: {state(a)}\nState B: {state(b)}\n\n"
            "Which state is closer to completing the task? Answer A or B."
        )

    def prompt(a: float, b: float) -> str:
        msgs = [{"role": "system", "content": SYSTEM}]
        if args.demos:
            for x, y in DEMO_PAIRS:
                msgs += [
                    {"role": "user", "content": user(x, y)},
                    {"role": "assistant", "content": "Answer: " + ("A" if x < y else "B")},
                ]
        msgs.append({"role": "user", "content": user(a, b)})
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return text + "Answer:"

    ida, idb = tok.encode(" A")[-1], tok.encode(" B")[-1]

    def p_a(a: float, b: float) -> tuple[float, float]:
        ids = tok(prompt(a, b), return_tensors="pt")
        with torch.no_grad():
            logits = model(**ids).logits[0, -1]
        two = torch.softmax(logits[[ida, idb]], 0)
        mass = torch.softmax(logits, 0)[[ida, idb]].sum().item()
        return two[0].item(), mass

    t0 = time.time()
    prefs, masses, correct = {}, [], 0
    pairs = list(itertools.combinations(args.states, 2))
    for a, b in pairs:
        fwd, m1 = p_a(a, b)
        back, m2 = p_a(b, a)
        masses += [m1, m2]
        prefs[(a, b)] = 0.5 * (fwd + 1.0 - back)
        correct += (prefs[(a, b)] > 0.5) == (a < b)
    n = len(args.states)
    strength = {
        s: sum(
            prefs[(s, o)] if (s, o) in prefs else 1 - prefs[(o, s)] for o in args.states if o != s
        )
        / (n - 1)
        for s in args.states
    }
    rho = float(spearmanr([-s for s in args.states], [strength[s] for s in args.states]).statistic)
    out = {
        "model": args.model,
        "form": args.form,
        "demos": args.demos,
        "states_cm": args.states,
        "n_pairs": len(pairs),
        "pair_acc": round(correct / len(pairs), 3),
        "rho_strength_closeness": round(rho, 3),
        "strength": {str(k): round(v, 3) for k, v in strength.items()},
        "mean_mass_on_A_B": round(sum(masses) / len(masses), 3),
        "seconds": round(time.time() - t0, 1),
    }
    print(json.dumps(out))
    if args.json:
        from pathlib import Path

        p = Path(args.json)
        rows = json.loads(p.read_text()) if p.exists() else []
        p.write_text(json.dumps(rows + [out], indent=1) + "\n")


if __name__ == "__main__":
    main()
