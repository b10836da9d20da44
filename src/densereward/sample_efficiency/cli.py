"""``densereward compare``: the sample-efficiency comparison's command line."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from ..config_files import add_override_arguments, apply_overrides, load_yaml, overrides_from
from ..errors import ConfigError, command_finished
from .config import add_run_settings, split_run_settings
from .report import console_verdict
from .runner import dry_run_comparison, output_dir_of, run_comparison

__all__ = ["EPILOG", "add_arguments", "config_from_args", "main"]

EPILOG = """\
examples:
  densereward compare --config configs/compare_fetchreach.yaml
  densereward compare --config configs/compare_fetchreach.yaml --seeds 0 1 --budget 2000 --output-dir runs/cmp-small
  densereward compare --config configs/compare_fetchreach.yaml threshold=0.9 --seeds 0 1   # a comparison key (threshold:)
  densereward compare --config configs/compare_fetchreach.yaml training.eval_every=250 --seeds 0 1   # a run setting, added to common:
  densereward compare --config configs/compare_grpo_cpu.yaml --conditions sparse dense
  densereward compare --config configs/compare_fetchreach.yaml --report-only   # statistics of finished runs

Overrides: a bare key (threshold=0.9) or one under a comparison key (wandb.group=g) sets the
comparison; section.field=value of any other section (training., sac., verifier., ...) is a run
setting, added to common: after the file's entries (it wins over them; a key a condition sets
itself is refused). common=[...] replaces the file's common:.

Re-running the same command resumes: finished runs (runs/<condition>/seed<k>/result.json) are
skipped and an interrupted run starts again. Outputs: report.md, learning_curves.png, results.json, curves.json.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``densereward compare``'s arguments to ``parser``."""
    parser.description = (
        "Compare reward conditions (e.g. sparse vs dense) over seeds with the same trainer and budget: "
        "IQM with stratified-bootstrap CIs, probability of improvement, steps to threshold, AUC (rliable)."
    )
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--config", required=True, help="comparison YAML, e.g. configs/compare_fetchreach.yaml"
    )
    add_override_arguments(
        parser,
        "threshold=0.9 (a comparison key) or training.eval_every=250 (a run setting: added to "
        "common:, for every condition)",
    )
    parser.add_argument(
        "--output-dir", default=None, help="output directory (overrides output_dir:)"
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=None, help="seeds (overrides seeds:)"
    )
    parser.add_argument(
        "--budget", type=int, default=None, help="steps per run (overrides budget:)"
    )
    parser.add_argument(
        "--conditions", nargs="+", default=None, metavar="NAME", help="run only these conditions"
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing; report the runs finished so far (their budget, seeds and conditions "
        "are read from <output dir>/compare_config.yaml; flags still override)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="validate every condition with its trainer's dry run (data files, environment ids, "
        "configs) and list the finished runs; run nothing, create nothing",
    )


_RUN_KEYS = ("trainer", "base", "common", "conditions", "seeds", "budget")
"""Keys of a comparison config that define its runs (the rest only changes the analysis)."""


def config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Load the comparison YAML and apply the command-line overrides (flags win).

    With ``--report-only`` the run-defining keys (``trainer, base, common, conditions, seeds,
    budget``) come from ``<output dir>/compare_config.yaml`` when it exists -- the config the
    runs there were made with -- so a comparison run with ``--budget/--seeds/--conditions``
    can be re-analysed without repeating them; analysis keys (``threshold``, ``final_window``,
    ``metric``, bootstrap settings) still come from ``--config``, and overrides and flags
    still win.

    An override ``section.field=value`` whose section is not a comparison key
    (``training.eval_every=250``; :func:`~.config.split_run_settings`) is a run setting: it is
    added to ``common`` after the file's entries (:func:`~.config.add_run_settings`), after the
    comparison's own overrides (so ``common=[...]``, which replaces the file's list, comes
    first) and ``--conditions``.

    Raises:
        ConfigError: for a missing config file, a malformed override, ``--conditions``
            naming a condition the config does not have (or one twice), a run setting whose
            key a condition sets itself, or a run setting with ``--report-only``.
    """
    comparison, run_settings = split_run_settings(overrides_from(args))
    if run_settings and getattr(args, "report_only", False):
        raise ConfigError(
            f"--report-only re-analyses the recorded runs; run settings ({' '.join(run_settings)}) "
            "would change the runs: run the comparison without --report-only (into a new "
            "--output-dir) to train with them"
        )
    config = load_yaml(args.config)
    if getattr(args, "report_only", False):
        out = output_dir_of(
            getattr(args, "output_dir", None),
            config.get("output_dir"),
            config.get("name") or Path(args.config).stem,
        )
        stored_path = out / "compare_config.yaml"
        if stored_path.is_file():
            stored = load_yaml(stored_path)
            for key in _RUN_KEYS:
                if key in stored:
                    config[key] = stored[key]
                else:
                    config.pop(key, None)
            print(f"report-only: runs as recorded in {stored_path}", file=sys.stderr)
    apply_overrides(config, comparison)
    if args.seeds is not None:
        config["seeds"] = list(args.seeds)
    if args.budget is not None:
        config["budget"] = args.budget
    if args.conditions:
        conds = config.get("conditions") or {}
        unknown = [c for c in args.conditions if c not in conds]
        if unknown:
            raise ConfigError(f"--conditions: unknown {unknown}; the config has {list(conds)}")
        dup = sorted({c for c in args.conditions if args.conditions.count(c) > 1})
        if dup:
            raise ConfigError(f"--conditions: {dup} given more than once")
        if len(args.conditions) < 2:  # a comparison needs two; name the flag, not the YAML
            raise ConfigError(
                f"--conditions needs at least two of: {', '.join(map(str, conds))} "
                f"(got {args.conditions[0]})"
            )
        config["conditions"] = {c: conds[c] for c in args.conditions}
    return add_run_settings(config, run_settings)


def main(args: argparse.Namespace) -> int:
    """Run ``densereward compare`` from parsed arguments; returns the exit code."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    config = config_from_args(args)
    cfg_path = Path(args.config)
    if getattr(args, "dry_run", False):
        lines = dry_run_comparison(
            config,
            output_dir=args.output_dir,
            base_dir=cfg_path.resolve().parent,
            name=cfg_path.stem,
            common_given=split_run_settings(overrides_from(args))[1],
        )
        n_problems = sum(line.startswith("!! ") for line in lines)
        print(
            "dry run: comparison valid; nothing run, nothing created"
            + (f"; {n_problems} problem(s) the runs would hit:" if n_problems else "")
        )
        for line in lines:  # "!! " a problem (exit 2), "note: " a certain outcome, else a check
            if line.startswith("!! "):
                print(f"  {line}")
            elif line.startswith("note: "):
                print(f"  note  {line[len('note: ') :]}")
            else:
                print(f"  ok  {line}")
        return 2 if n_problems else 0  # a run would stop (or train nothing) on this machine
    res = run_comparison(
        config,
        output_dir=args.output_dir,
        base_dir=cfg_path.resolve().parent,
        name=cfg_path.stem,
        progress=not args.no_progress,
        report_only=args.report_only,
    )
    command_finished()  # its outputs are written: a SIGTERM now lets the summary print
    out = Path(res["output_dir"])
    print(
        f"report: {out / 'report.md'}\nlearning curves: {out / 'learning_curves.png'}\nresults: {out / 'results.json'}"
    )
    for p in res["pairs"]:
        print(console_verdict(p))
    if res.get("threshold_not_applied"):
        print(res["threshold_not_applied"], file=sys.stderr)
    if res.get("steps_to_threshold_note"):
        print(res["steps_to_threshold_note"], file=sys.stderr)
    if res["missing"]:
        print(f"incomplete: {len(res['missing'])} run(s) not finished", file=sys.stderr)
    return 0
