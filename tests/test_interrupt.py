"""A run stopped by SIGTERM or Ctrl-C, and the run that follows it in the same directory (F2).

A stopped ``train sac`` / ``train grpo`` / ``compare`` says on stderr what it left (a checkpoint
to resume from, or nothing) and exits 143 (SIGTERM) or 130 (Ctrl-C); a fresh run in a directory
a stopped start left behind replaces that start's files (its curves are not appended to), and a
resumed run drops the rows written after its checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from densereward.config import load_yaml
from densereward.errors import Interrupted, sigterm_interrupts
from densereward.io import append_jsonl, drop_rows_after, read_jsonl

REPO = Path(__file__).resolve().parents[1]


def _steps(path: Path) -> list[int]:
    return [int(r["step"]) for r in read_jsonl(path)]


def test_drop_rows_after_keeps_the_rows_up_to_the_step(tmp_path):
    path = tmp_path / "curve.jsonl"
    for step in (0, 100, 200, 300):
        append_jsonl(path, {"step": step, "value": step / 300})
    with path.open("a") as f:
        f.write('{"step": 40')  # a line torn by the kill
    assert drop_rows_after(path, 100) == 2
    assert _steps(path) == [0, 100] and path.read_text().endswith("}\n")
    assert drop_rows_after(path, 100) == 0
    assert drop_rows_after(tmp_path / "none.jsonl", 5) == 0


def test_sigterm_raises_interrupted_in_the_main_thread_and_is_restored_after():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as stopped, sigterm_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs at the next bytecode
    assert stopped.value.signal_name == "SIGTERM" and stopped.value.exit_code == 143
    assert isinstance(stopped.value, KeyboardInterrupt)  # the clean-up of Ctrl-C runs
    assert signal.getsignal(signal.SIGTERM) is before
    ctrl_c = Interrupted.of(KeyboardInterrupt())
    assert (ctrl_c.signal_name, ctrl_c.exit_code) == ("SIGINT", 130)


def test_a_sigterm_after_the_command_finished_exits_with_its_status_and_says_so(tmp_path):
    """F2 (rerun 8): a SIGTERM that arrived after ``train sac`` had printed its last line, while
    the interpreter shut down, ended the process with a silent 143 although every output was
    written. It now ends it with the command's own status and one line saying so. The shutdown
    is held open here by an atexit hook (as joining threads holds a real one)."""
    marker = tmp_path / "shutting-down"
    code = (  # the hook comes after densereward's import, as W&B's and torch's do
        "import atexit, sys, time; from densereward.cli import main; "
        f"atexit.register(lambda: (open({str(marker)!r}, 'w').close(), time.sleep(60))); "
        "sys.exit(main())"
    )
    config = REPO / "configs" / "sac_fetchreach_sparse.yaml"
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "train", "sac", "--config", str(config), "--dry-run"],
        cwd=REPO,
        env={**env, "MUJOCO_GL": "egl"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), proc.communicate(timeout=30)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, (proc.returncode, err)
    assert "ok  " in out  # the dry run's own lines came first, whole
    assert err.strip().splitlines()[-1] == (
        "densereward: SIGTERM arrived after densereward train sac had finished (exit status 0); "
        "its outputs are complete, so it exits with 0"
    )


def test_a_sigterm_after_command_finished_lets_the_command_end_and_is_named():
    """After the command's outputs are written (``command_finished``), a SIGTERM inside the
    block no longer raises: the summary prints, and ``late_stop_signal`` names it."""
    from densereward.errors import command_finished, late_stop_signal

    with sigterm_interrupts():
        assert late_stop_signal() is None
        command_finished()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)  # the handler runs at the next bytecode; no Interrupted
        assert late_stop_signal() == "SIGTERM"
    with sigterm_interrupts():  # a new block starts unfinished
        assert late_stop_signal() is None


@pytest.mark.slow  # a 300-step SAC run through the console script (~20 s)
def test_a_sigterm_right_after_train_sac_printed_its_summary_exits_0_and_says_so(tmp_path):
    """F2 (reruns 8 and 9): a SIGTERM sent the moment ``train sac`` printed its ``plot:``
    line (the run complete, summary.json written) gave exit 143 and "stopped by SIGTERM"
    (or nothing), so a scheduler saw a finished run as stopped. It exits 0 now, saying the
    signal came after the run had finished."""
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}
    densereward = Path(sys.executable).with_name("densereward")
    argv = [str(densereward)] if densereward.exists() else [sys.executable, "-m", "densereward"]
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            *argv,
            "train",
            "sac",
            "--config",
            str(REPO / "configs" / "sac_fetchreach_sparse.yaml"),
            "--total-timesteps",
            "300",
            "--output-dir",
            str(run_dir),
            "training.eval_every=150",
            "training.checkpoint_every=300",
            "sac.learning_starts=100",
            "wandb.enabled=false",
        ],
        cwd=REPO,
        env={**env, "MUJOCO_GL": "egl", "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("plot:"):
            proc.send_signal(signal.SIGTERM)
            break
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (proc.returncode, err)
    assert (run_dir / "summary.json").is_file() and (run_dir / "final_model.zip").is_file()
    assert err.strip().splitlines()[-1] == (
        "densereward: SIGTERM arrived after densereward train sac had finished (exit status 0); "
        "its outputs are complete, so it exits with 0"
    ), err


# --------------------------------------------------------------------------------------------
# SAC
# --------------------------------------------------------------------------------------------


def _small_sac(**training) -> dict:
    config = load_yaml(REPO / "configs" / "sac_fetchreach_sparse.yaml")
    config["training"].update(
        {"log_interval": 1, "curve_every": 50, "eval_every": 50, "eval_episodes": 1, **training}
    )
    config["sac"].update({"learning_starts": 40, "batch_size": 16})
    config["wandb"] = {"enabled": False}
    return config


@pytest.mark.slow
def test_a_fresh_run_replaces_the_files_a_stopped_start_left(tmp_path):
    """F2: a run killed before its first checkpoint left eval_curve.jsonl (and more); the
    corrected re-run appended to it, and its curve read steps [0, 0, 500, 1000]."""
    from densereward.trainers import sac

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("env: {}\n")
    append_jsonl(run_dir / "eval_curve.jsonl", {"step": 0, "value": 0.9, "n_episodes": 3})
    append_jsonl(run_dir / "train_curve.jsonl", {"step": 900, "value": 0.5})
    append_jsonl(run_dir / "verifier_dynamics.jsonl", {"step": 900, "stale": True})
    (run_dir / "monitor.csv").write_text("#stale\n")
    (run_dir / "notes.txt").write_text("the user's own file")
    config = _small_sac(total_timesteps=100, checkpoint_every=0)
    lines = sac.dry_run(config, output_dir=run_dir)
    assert (
        f"run directory: {run_dir} (exists with no checkpoint and no result: the files of the "
        "earlier start (eval_curve.jsonl, monitor.csv, train_curve.jsonl, "
        "verifier_dynamics.jsonl) are replaced)" in lines
    )
    summary = sac.run(config, output_dir=run_dir)
    assert [p["step"] for p in summary["curve"]] == [0, 50, 100]
    assert _steps(run_dir / "eval_curve.jsonl") == [0, 50, 100]
    assert all(p["n_episodes"] == 1 for p in summary["curve"])  # none of the stale row
    assert 900 not in _steps(run_dir / "train_curve.jsonl")
    assert not any(r.get("stale") for r in read_jsonl(run_dir / "verifier_dynamics.jsonl"))
    assert (run_dir / "notes.txt").read_text() == "the user's own file"


def _train_sac_stopped_by_sigterm(
    run_dir: Path, overrides: list[str], ready, **env_vars: str
) -> str:
    """Start `densereward train sac` (FetchReach sparse, 100000 steps) in a subprocess with
    ``overrides``, send SIGTERM once ``ready()`` holds, and return its stderr (exit 143)."""
    from test_wandb_config import cli_process

    yaml_path = str(REPO / "configs" / "sac_fetchreach_sparse.yaml")
    proc = cli_process(
        [
            *("train", "sac", "--config", yaml_path),
            *("--output-dir", str(run_dir), "--total-timesteps", "100000"),
            "training.curve_every=25",
            "training.eval_every=0",
            "sac.learning_starts=40",
            "sac.batch_size=16",
            *overrides,
        ],
        **env_vars,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and not ready():
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err[-3000:]
    return err


@pytest.mark.slow
def test_sigterm_stops_train_sac_with_what_it_left_and_resume_drops_the_later_rows(tmp_path):
    """F2: `densereward train sac` killed by SIGTERM exited 143 with no message. It says now
    what it left (the checkpoint and the --resume command) and exits 143; --resume then drops
    the curve rows written after that checkpoint instead of counting them twice."""
    from densereward.trainers import sac

    run_dir = tmp_path / "run"

    def ready() -> bool:  # a checkpoint, and a curve row after it for the resume to drop
        curve = run_dir / "train_curve.jsonl"
        rows = _steps(curve) if curve.is_file() else []
        return (run_dir / "checkpoints" / "sac_100_steps.zip").is_file() and max(
            rows, default=0
        ) > 100

    overrides = ["training.checkpoint_every=100", "wandb.enabled=false"]
    err = _train_sac_stopped_by_sigterm(run_dir, overrides, ready)
    stopped = [line for line in err.splitlines() if line.startswith("densereward: stopped")]
    assert len(stopped) == 1, err[-3000:]
    newest = max(
        int(p.name.split("_")[1]) for p in (run_dir / "checkpoints").glob("sac_*_steps.zip")
    )
    assert stopped[0].startswith("densereward: stopped by SIGTERM at step ")
    assert f"checkpoint sac_{newest}_steps.zip" in stopped[0]
    assert f"add --resume to the same command (--output-dir {run_dir})" in stopped[0]
    assert "Traceback" not in err and not (run_dir / "summary.json").exists()
    assert max(_steps(run_dir / "train_curve.jsonl")) > newest  # rows the resume must drop

    config = load_yaml(REPO / "configs" / "sac_fetchreach_sparse.yaml")
    config["training"].update(
        total_timesteps=newest + 100, checkpoint_every=100, curve_every=25, eval_every=0
    )
    config["sac"].update(learning_starts=40, batch_size=16)
    config["wandb"] = {"enabled": False}
    summary = sac.run(config, output_dir=run_dir, resume=True)
    steps = [p["step"] for p in summary["curve"]]
    assert steps == sorted(set(steps)) and steps[-1] == newest + 100, steps
    assert _steps(run_dir / "train_curve.jsonl") == steps
    dyn = _steps(run_dir / "verifier_dynamics.jsonl")
    assert dyn == sorted(dyn)


@pytest.mark.slow
def test_a_fresh_run_replaces_the_wandb_run_of_a_start_stopped_before_its_first_checkpoint(
    tmp_path, caplog
):
    """Rerun 6/7 F2: a SAC start stopped before its first checkpoint and re-run afresh into the
    same directory replaced wandb_id.txt but left the stopped start's W&B offline run beside the
    new one, so `wandb sync <run_dir>/wandb/offline-run-*` uploaded the stopped start too. The
    fresh start removes the W&B runs of the id it replaces (only those) and says so, as its dry
    run does."""
    from densereward.trainers import sac

    run_dir = tmp_path / "run"
    _train_sac_stopped_by_sigterm(
        run_dir,
        ["training.checkpoint_every=0", "wandb.enabled=true"],
        (run_dir / "train_curve.jsonl").is_file,
        WANDB_MODE="offline",
    )
    old_id = (run_dir / "wandb_id.txt").read_text().strip()
    stopped = [p.name for p in (run_dir / "wandb").glob(f"offline-run-*-{old_id}")]
    assert len(stopped) == 1, sorted(p.name for p in (run_dir / "wandb").iterdir())
    # another W&B run in the same folder (not the stopped start's id) and a file of one's own
    other = run_dir / "wandb" / "offline-run-20260101_000000-abcdef012345"
    other.mkdir()
    (other / "keep.txt").write_text("another run")
    (run_dir / "notes.txt").write_text("the user's own file")

    config = load_yaml(REPO / "configs" / "sac_fetchreach_sparse.yaml")
    config["training"].update(total_timesteps=50, checkpoint_every=0, eval_every=0)
    config["sac"].update(learning_starts=40, batch_size=16)
    config["wandb"] = {"enabled": True, "mode": "offline"}
    line = next(x for x in sac.dry_run(config, output_dir=run_dir) if x.startswith("run dir"))
    assert f"wandb/{stopped[0]}" in line and "wandb_id.txt" in line, line
    assert "abcdef012345" not in line
    with caplog.at_level(logging.WARNING, logger="densereward"):
        sac.run(config, output_dir=run_dir)
    said = [r.getMessage() for r in caplog.records if "earlier start" in r.getMessage()]
    assert len(said) == 1 and f"wandb_id.txt, wandb/{stopped[0]}) are replaced" in said[0]
    new_id = (run_dir / "wandb_id.txt").read_text().strip()
    assert new_id != old_id
    runs = sorted(p.name for p in (run_dir / "wandb").glob("*run-*") if p.is_dir())
    assert [r for r in runs if old_id in r] == [], runs  # the stopped start's run is gone
    assert [r for r in runs if r.endswith(new_id)] and other.name in runs, runs
    assert (other / "keep.txt").read_text() == "another run"
    assert (run_dir / "notes.txt").read_text() == "the user's own file"


# --------------------------------------------------------------------------------------------
# GRPO's run directory
# --------------------------------------------------------------------------------------------


def _checkpoint(
    run_dir: Path, step: int, files=("trainer_state.json", "reward_quality_state.json")
):
    """A ``checkpoint-<step>`` directory holding ``files`` (a complete GRPO save: both)."""
    ckpt = run_dir / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    for name in files:
        (ckpt / name).write_text("{}")
    return ckpt


def test_grpo_dry_run_says_a_stopped_starts_files_are_replaced_and_resume_drops_later_rows(
    tmp_path,
):
    from densereward.trainers.grpo import _create_run_dir, _run_dir_state

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text("{}")
    for step in (1, 2, 3):
        append_jsonl(run_dir / "reward_quality.jsonl", {"step": step})
    assert _run_dir_state(run_dir, None) == (
        "exists with no checkpoint and no result: the files of the earlier start "
        "(reward_quality.jsonl) are replaced"
    )
    _checkpoint(run_dir, 2)
    assert _run_dir_state(run_dir, "latest") == (
        "continues from checkpoint-2; the 1 row written after it (reward_quality.jsonl) is dropped"
    )
    _create_run_dir(run_dir, "latest")
    assert _steps(run_dir / "reward_quality.jsonl") == [1, 2]
    # rerun 14 F2: with none written after the checkpoint, the dry run no longer says rows go
    assert _run_dir_state(run_dir, "latest") == (
        "continues from checkpoint-2; no row was written after it (reward_quality.jsonl): "
        "none to drop"
    )
    _create_run_dir(run_dir, str(run_dir / "checkpoint-2"))
    assert _steps(run_dir / "reward_quality.jsonl") == [1, 2]
    # rerun 17 F3: a run that tracks no reward quality (reward.track: false) has no such file;
    # its dry run and its stop line spoke of rows in it all the same
    from densereward.trainers.grpo import _stopped

    (run_dir / "reward_quality.jsonl").unlink()
    assert _run_dir_state(run_dir, "latest") == "continues from checkpoint-2"
    assert _stopped(KeyboardInterrupt(), run_dir, 3, 5).detail == (
        f"at step 3 of 5; {run_dir} keeps checkpoint-2: add --resume to the same command "
        f"(--output-dir {run_dir}) to continue from it"
    )


def test_a_fresh_grpo_start_replaces_the_wandb_run_of_a_stopped_start(tmp_path, monkeypatch):
    """Rerun 6/7 F2 for GRPO: a fresh start into a stopped start's directory wrote a new
    wandb_id.txt but left that start's W&B offline run beside its own. It replaces both now
    (only the W&B runs of that id) and the dry run names them."""
    import wandb

    from densereward.io import wandb_run_id
    from densereward.trainers.grpo import _create_run_dir, _run_dir_state

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    runs = {}
    for key in ("stopped", "other"):  # real W&B offline runs in the run directory's wandb/
        run_id = wandb_run_id(run_dir, reuse=False) if key == "stopped" else "abcdef012345"
        run = wandb.init(id=run_id, dir=str(run_dir), project="densereward-test")
        run.log({"x": 1.0})
        run.finish()
        runs[key] = Path(run.dir).parent  # <run_dir>/wandb/offline-run-<time>-<id>
    wandb.teardown()
    append_jsonl(run_dir / "reward_quality.jsonl", {"step": 1})
    assert _run_dir_state(run_dir, None) == (
        "exists with no checkpoint and no result: the files of the earlier start "
        f"(reward_quality.jsonl, wandb_id.txt, wandb/{runs['stopped'].name}) are replaced"
    )
    _create_run_dir(run_dir, None)
    assert not runs["stopped"].exists() and runs["other"].is_dir()
    assert not (run_dir / "wandb_id.txt").exists()
    assert not (run_dir / "reward_quality.jsonl").exists()


# --------------------------------------------------------------------------------------------
# compare
# --------------------------------------------------------------------------------------------


def test_a_comparison_stopped_by_sigterm_says_which_runs_are_kept(tmp_path, capsys):
    """F2, and F7 of the eighth rerun: the stop line read "stopped by SIGTERM 3 of 8 runs ..."
    (no separator), and neither the dry run nor the re-run said that the stopped run's partial
    directory is replaced; a W&B run it left under wandb.dir stayed beside the new one. The
    stop line now starts "during run <condition> <seed>;", the dry run and the re-run name the
    partial directory and its W&B run as replaced, and the re-run removes that W&B run."""
    from densereward import sample_efficiency as C

    calls: list[str] = []
    wandb_dir = tmp_path / "wb"

    def run(config, *, output_dir):
        calls.append(str(output_dir))
        output_dir.mkdir(parents=True)
        run_id = f"toy{len(calls)}"  # as train sac / grpo keep it, and W&B names its run folder
        (output_dir / "wandb_id.txt").write_text(run_id)
        (Path(config["wandb"]["dir"]) / "wandb" / f"offline-run-20260101_000000-{run_id}").mkdir(
            parents=True
        )
        (output_dir / "curve.jsonl").write_text('{"step": 0, "value": 0.0}\n')
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        steps = config["training"]["steps"]
        return {
            "metric": "toy",
            "curve": [{"step": 0, "value": 0.0}, {"step": steps, "value": 1.0}],
        }

    spec = C.TrainerSpec(
        run=run, dry_run=lambda c, *, output_dir: [], budget_key=("training", "steps")
    )
    out = tmp_path / "cmp"
    config = {
        "name": "toy",
        "trainer": "toy",
        "output_dir": str(out),
        "base": {"training": {"steps": 10}},
        "conditions": {"a": {}, "b": {}},
        "seeds": [0, 1],
        "budget": 10,
        "wandb": {"dir": str(wandb_dir)},
    }
    partial = out / "runs" / "a" / "seed1" / "a-seed1"
    stale = wandb_dir / "wandb" / "offline-run-20260101_000000-toy3"
    with pytest.raises(Interrupted) as stopped, sigterm_interrupts():
        C.run_comparison(config, trainers={"toy": spec}, progress=False)
    assert stopped.value.exit_code == 143
    assert stopped.value.detail == (
        f"during run a seed1; 2 of 4 runs finished and are kept in {out / 'runs'}; the stopped "
        f"run's partial directory {partial} (and its W&B run {stale}) is replaced when you "
        "re-run the same command, which starts that run afresh and continues the comparison"
    )
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "stopped" and events[-1]["signal"] == "SIGTERM"
    assert partial.is_dir() and stale.is_dir()

    said = (
        f"the stopped run a seed1 starts afresh: its partial directory {partial} (and its W&B "
        f"run {stale}) is replaced"
    )
    lines = C.dry_run_comparison(config, trainers={"toy": spec})
    assert f"output directory: {out} (2 of 4 runs finished there and would be skipped)" in lines
    assert said in lines, lines
    capsys.readouterr()
    C.run_comparison(config, trainers={"toy": spec}, progress=False)
    err = capsys.readouterr().err
    assert err.count(said) == 1, err
    assert calls[3] == str(partial) and len(calls) == 5  # that run again, then the last one
    assert not stale.exists()  # the stopped start's W&B run is not synced beside the new one
    assert (wandb_dir / "wandb" / "offline-run-20260101_000000-toy4").is_dir()
    assert (partial / "wandb_id.txt").read_text() == "toy4"


def test_grpo_resume_skips_a_checkpoint_stopped_mid_save(tmp_path, caplog):
    """F1: a run SIGTERMed during a save left checkpoint-2 without reward_quality_state.json;
    the stop message and the dry run called it a full resume point, and --resume used it (the
    reward-quality window started afresh). The newest complete checkpoint is named and used,
    and the incomplete one is said to be skipped, once."""
    from densereward.rewards.trl_callback import STATE_FILE
    from densereward.trainers.grpo import (
        _create_run_dir,
        _resume_checkpoint,
        _run_dir_state,
        _stopped,
    )

    run_dir = tmp_path / "run"
    _checkpoint(run_dir, 1)
    _checkpoint(run_dir, 2, files=("trainer_state.json", "model.safetensors"))
    for step in (1, 2, 3):
        append_jsonl(run_dir / "reward_quality.jsonl", {"step": step})
    assert STATE_FILE == "reward_quality_state.json"
    assert _resume_checkpoint(run_dir, "latest") == run_dir / "checkpoint-1"
    assert _run_dir_state(run_dir, "latest") == (
        "continues from checkpoint-1, the newest complete checkpoint (checkpoint-2 is "
        "incomplete: no reward_quality_state.json: stopped mid-save); the 2 rows written "
        "after it (reward_quality.jsonl) are dropped"
    )
    stopped = _stopped(KeyboardInterrupt(), run_dir, 2, 5)
    assert stopped.detail == (
        f"at step 2 of 5; {run_dir} keeps checkpoint-1, the newest complete checkpoint "
        "(checkpoint-2 is incomplete: no reward_quality_state.json: stopped mid-save): add "
        f"--resume to the same command (--output-dir {run_dir}) to continue from checkpoint-1 "
        "(the reward-quality rows written after it are dropped then)"
    )
    with caplog.at_level("WARNING", logger="densereward.trainers.grpo"):
        _create_run_dir(run_dir, "latest")
    skipped = [r.getMessage() for r in caplog.records if "incomplete" in r.getMessage()]
    assert skipped == [
        "--resume: checkpoint-2 is incomplete (no reward_quality_state.json: stopped "
        "mid-save); continuing from checkpoint-1, the newest complete checkpoint"
    ]
    assert _steps(run_dir / "reward_quality.jsonl") == [1]

    # none complete (the user's run: checkpoint-1 half-deleted by save_total_limit as well):
    # the newest is used, and said to be incomplete
    (run_dir / "checkpoint-1" / STATE_FILE).unlink()
    assert _resume_checkpoint(run_dir, "latest") == run_dir / "checkpoint-2"
    assert _run_dir_state(run_dir, "latest").startswith(
        "continues from checkpoint-2, which is incomplete (no reward_quality_state.json: "
        "stopped mid-save; no complete checkpoint to use instead), weights only"
    )
    assert "keeps checkpoint-2, which is incomplete (no reward_quality_state.json" in (
        _stopped(KeyboardInterrupt(), run_dir, 2, 5).detail
    )
