"""Sample efficiency of reward conditions (e.g. sparse vs dense) over seeds: ``densereward compare``.

A comparison runs every ``(condition, seed)`` pair through a registered trainer's ``run``
function -- for ``sac`` and ``grpo`` the same ``run()`` that ``densereward train`` uses
(:mod:`densereward.trainers.sac`, :mod:`densereward.trainers.grpo`) -- with the same budget,
then reports per condition the interquartile mean (IQM) of final performance and of the
normalised area under the learning curve with stratified-bootstrap 95% confidence intervals,
the steps needed to reach a threshold, and for every pair of conditions the probability of
improvement (Agarwal et al. 2021, "Deep RL at the Edge of the Statistical Precipice"; the
statistics are :mod:`densereward.metrics.curves`).

Modules: :mod:`.config` (the YAML config and the registry of trainers), :mod:`.runner`
(resumable runs), :mod:`.report` (analysis, Markdown report, plot), :mod:`.cli` (the command).

Config (YAML; unknown keys are errors)::

    name: fetchreach-sparse-vs-dense
    trainer: sac                              # sac | grpo | a name added with register_trainer or a plugin
    base: configs/sac_fetchreach_sparse.yaml  # a train config path, or an inline mapping
    common: [training.metrics_window=20]      # overrides applied to every condition
    conditions:                               # name -> overrides (dotted list or nested mapping)
      sparse: {}
      env_dense: [env.id=FetchReachDense-v4, env.reward=env]
    seeds: [0, 1, 2]
    budget: 6000                              # training.total_timesteps (sac) / training.max_steps (grpo)
    threshold: 0.8
    output_dir: runs/compare/fetchreach

Output directory::

    <out>/runs/<condition>/seed<k>/result.json        one finished run (written atomically, last)
    <out>/runs/<condition>/seed<k>/<condition>-seed<k>/  the trainer's run directory
    <out>/events.jsonl                                start / finish / skip of every run (append-only)
    <out>/results.json, report.md, learning_curves.png

Resuming: re-running the same command skips every run whose ``result.json`` exists and was
produced by the same run config (a fingerprint is stored); the partial directory of a run that
was interrupted (and its W&B run, also one under ``wandb.dir``) is removed and the run starts
afresh, which the dry run and the re-run say, so a crash loses at most that run.

Python API::

    from densereward.sample_efficiency import run_comparison
    results = run_comparison(load_yaml("configs/compare_fetchreach.yaml"), output_dir="runs/cmp")
    results["pairs"][0]["verdict"]

A trainer of your own: a function that trains one run and returns its learning curve::

    def my_run(config, *, output_dir):
        ...
        return {"metric": "eval/success_rate", "curve": [{"step": 0, "value": 0.0}, ...]}

    register_trainer("mine", TrainerSpec(run=my_run, dry_run=my_dry_run,
                                         budget_key=("training", "steps")))
    run_comparison({"trainer": "mine", ...})   # or run_comparison(..., trainers={"mine": spec})

or, from a package of your own without importing densereward, the entry point
``mine = "my_pkg.compare:SPEC"`` in the group ``densereward.trainers`` (docs/extending.md).
"""

from __future__ import annotations

from .cli import add_arguments, config_from_args, main
from .config import (
    TRAINERS,
    CompareConfig,
    CompareWandbConfig,
    TrainerSpec,
    build_run_configs,
    fingerprint,
    parse_compare_config,
    register_trainer,
)
from .report import analyze, plot_curves, render_report, verdict
from .runner import dry_run_comparison, run_comparison

__all__ = [
    "TRAINERS",
    "CompareConfig",
    "CompareWandbConfig",
    "TrainerSpec",
    "add_arguments",
    "analyze",
    "build_run_configs",
    "config_from_args",
    "dry_run_comparison",
    "fingerprint",
    "main",
    "parse_compare_config",
    "plot_curves",
    "register_trainer",
    "render_report",
    "run_comparison",
    "verdict",
]
