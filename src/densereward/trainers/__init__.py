"""The trainers behind ``densereward train``: :mod:`~densereward.trainers.grpo` (TRL's GRPOTrainer,
``densereward[trl]``) and :mod:`~densereward.trainers.sac` (stable-baselines3 SAC,
``densereward[robotics]``).

Each module exposes the same contract (docs/ARCHITECTURE.md): ``add_arguments(parser)``,
``main(args)``, ``cli_main(argv)``, ``run(config, output_dir=...) -> summary`` and
``dry_run(config, output_dir=...) -> lines``. Importing this package imports neither TRL nor SB3.
"""
