"""One W&B shape for every command (``densereward.wandb_config``): the top-level ``wandb:``
section, validated in one place, applied the same way by ``train grpo``, ``train sac`` and
``compare``; each dry run shows the resolved settings; the earlier shapes are refused naming the
key that replaced them; a short real SAC run writes an offline W&B run with the configured
project, group, name and tags."""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import pytest

from densereward.config import load_yaml
from densereward.errors import ConfigError
from densereward.wandb_config import WandbConfig, describe_wandb, wandb_environment

REPO = Path(__file__).resolve().parents[1]
W_KEYS = "enabled, project, entity, group, name, tags, mode, dir"


def offline_run(run_dir: Path) -> tuple[str, str, str, list[str], str]:
    """(project, group, name, tags, job type) of the one offline W&B run under ``run_dir``, read
    from the run record of its ``.wandb`` file (LevelDB log framing: 32 KiB blocks of records,
    each a 7-byte header, crc, length and kind, before the bytes of a ``wandb`` protobuf
    ``Record``; the file starts with a 7-byte W&B header). Not a byte search: the run's config,
    which holds the ``wandb:`` section's values too, is in the same file."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("wandb/offline-run-*/*.wandb")
    data, pos, buf = path.read_bytes(), 7, b""
    while pos + 7 <= len(data):
        if (left := 32768 - pos % 32768) < 7:  # a block's tail too short for a header: padding
            pos += left
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        buf, pos = buf + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(buf)
            if record.WhichOneof("record_type") == "run":
                r = record.run
                return r.project, r.run_group, r.display_name, list(r.tags), r.job_type
            buf = b""
    raise AssertionError(f"no run record in {path}")


def test_the_section_is_validated_in_one_place():
    w = WandbConfig.from_section({"project": "p", "group": "g", "tags": ["a", "b"]})
    assert (w.project, w.group, w.tags, w.enabled, w.mode) == ("p", "g", ("a", "b"), True, "auto")
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "unknown key(s) in section 'wandb': 'projekt' (did you mean 'project'?); the keys are "
            f"{W_KEYS}"
        ),
    ):
        WandbConfig.from_section({"projekt": "p"})
    with pytest.raises(
        ConfigError, match="wandb.mode must be one of auto, online, offline, disabled"
    ):
        WandbConfig.from_section({"mode": "offlne"})
    with pytest.raises(ConfigError, match="wandb.enabled must be true or false"):
        WandbConfig.from_section({"enabled": "yes"})
    with pytest.raises(ConfigError, match="section 'wandb' must be a mapping"):
        WandbConfig.from_section(True)


def test_the_environment_is_set_for_one_run_and_restored(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_RUN_GROUP", "someone-elses")
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    w = WandbConfig(project="p", group="g", tags=("a", "b"))
    with wandb_environment(w, tmp_path / "run-1") as mode:
        assert mode == "offline"  # mode auto keeps the user's WANDB_MODE
        assert os.environ["WANDB_PROJECT"] == "p" and os.environ["WANDB_RUN_GROUP"] == "g"
        assert os.environ["WANDB_NAME"] == "run-1" and os.environ["WANDB_TAGS"] == "a,b"
        assert os.environ["WANDB_DIR"] == str(tmp_path / "run-1")
    assert "WANDB_PROJECT" not in os.environ and os.environ["WANDB_RUN_GROUP"] == "someone-elses"
    with wandb_environment(WandbConfig(mode="disabled", dir=str(tmp_path / "w")), tmp_path) as m:
        assert m == "disabled" and os.environ["WANDB_DIR"] == str(tmp_path / "w")
    assert os.environ["WANDB_MODE"] == "offline"
    with wandb_environment(WandbConfig(enabled=False), tmp_path) as m:
        assert m is None and "WANDB_PROJECT" not in os.environ
    line = describe_wandb(WandbConfig(group="g"), tmp_path / "run-2")
    assert "project densereward, entity (default), group g, name run-2" in line
    assert "mode offline (WANDB_MODE)" in line


@pytest.mark.parametrize(
    ("training", "message"),
    [
        (
            {"wandb": False},
            "training.wandb moved to the top-level wandb: section: set wandb.enabled "
            "(e.g. wandb: {enabled: false})",
        ),
        ({"wandb_project": "p"}, "set wandb.project (e.g. wandb: {project: p})"),
    ],
)
def test_sac_refuses_the_earlier_keys_naming_the_new_one(training, message):
    from densereward.trainers import sac

    with pytest.raises(ConfigError) as err:
        sac.parse_config({"training": training})
    assert message in str(err.value)


@pytest.mark.slow  # imports TRL to validate the GRPO config
@pytest.mark.parametrize("report_to", [["wandb"], "all", ["tensorboard", "wandb"]])
def test_grpo_refuses_wandb_in_report_to_and_adds_it_from_the_section(report_to, tmp_path):
    from densereward.trainers import grpo

    config = load_yaml(REPO / "configs" / "grpo_math_cpu.yaml")
    config["training"]["report_to"] = report_to
    with pytest.raises(
        ConfigError,
        match="switched by the top-level wandb: section .*drop wandb/all from training.report_to",
    ):
        grpo.resolve_config(config)
    config["training"]["report_to"] = ["tensorboard"]
    parts = grpo.resolve_config(config)
    assert grpo.build_grpo_args(parts, tmp_path / "r", cpu_check=True).report_to == [
        "tensorboard",
        "wandb",
    ]
    config["wandb"]["enabled"] = False
    parts = grpo.resolve_config(config)
    assert grpo.build_grpo_args(parts, tmp_path / "r", cpu_check=True).report_to == ["tensorboard"]
    config["training"]["report_to"] = "none"  # consistent with enabled: false
    assert grpo.build_grpo_args(grpo.resolve_config(config), tmp_path / "r").report_to == []
    config["wandb"]["enabled"] = True  # "none" used to switch W&B off: not silently on now
    with pytest.raises(ConfigError, match="asks for no W&B run, but wandb.enabled is true"):
        grpo.resolve_config(config)


def test_every_commands_dry_run_shows_the_resolved_settings(tmp_path, capsys, monkeypatch):
    """``train sac --dry-run`` (and ``compare --dry-run`` for its runs) print the ``wandb:``
    line; ``train grpo``'s is in tests/test_grpo.py's dry runs (it imports TRL)."""
    from densereward.cli import main as cli_main

    monkeypatch.setenv("WANDB_MODE", "offline")
    sac_cfg = REPO / "configs" / "sac_fetchreach_sparse.yaml"
    assert (
        cli_main(
            [
                "train",
                "sac",
                "--config",
                str(sac_cfg),
                "--output-dir",
                str(tmp_path / "sac-run"),
                "--dry-run",
                "wandb.group=g1",
                "wandb.tags=[x]",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "wandb: project densereward, entity (default), group g1, name sac-run, tags ['x'], "
        f"mode offline (WANDB_MODE), dir {tmp_path / 'sac-run'}" in out
    )
    compare = tmp_path / "compare.yaml"
    compare.write_text(
        f"trainer: sac\nbase: {sac_cfg}\nname: tiny\noutput_dir: {tmp_path / 'cmp'}\n"
        "conditions: {sparse: {}, dense: [env.id=FetchReachDense-v4, env.reward=env]}\n"
        "seeds: [0]\nbudget: 1000\nwandb: {project: dr-test, tags: [cmp]}\n"
    )
    assert cli_main(["compare", "--config", str(compare), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("wandb: ") == 1, out  # the comparison's line, not one per condition
    assert (
        "wandb: project dr-test, entity (default), group tiny, name <condition>-seed<k>, "
        "tags ['cmp'], mode offline (WANDB_MODE)" in out
    )
    bad = compare.read_text().replace(
        "conditions: {sparse: {}", "conditions: {sparse: [wandb.group=x]"
    )
    compare.write_text(bad)
    assert cli_main(["compare", "--config", str(compare), "--dry-run"]) == 2
    assert "wandb.group is set by the comparison for every run" in capsys.readouterr().err


def test_compare_gives_every_run_the_comparisons_section():
    from densereward.sample_efficiency import config as C

    cfg = C.parse_compare_config(
        {
            "trainer": "sac",
            "base": "configs/sac_fetchreach_sparse.yaml",
            "conditions": {"a": {}, "b": ["env.id=FetchReachDense-v4", "env.reward=env"]},
            "seeds": [0, 1],
            "wandb": {"project": "p", "enabled": False},
        },
        name="cmp",
    )
    runs = C.build_run_configs(cfg, base_dir=REPO)
    sections = [run["wandb"] for seeds in runs.values() for run in seeds.values()]
    assert len(sections) == 4 and all(s == sections[0] for s in sections)
    assert sections[0] == {
        **sections[0],
        "project": "p",
        "enabled": False,
        "group": "cmp",
        "name": None,
    }


def test_a_short_sac_run_writes_an_offline_run_with_the_configured_project_and_group(
    tmp_path, monkeypatch
):
    """The smallest SAC run the tests use (sparse FetchReach, no verifier), W&B on, offline."""
    from densereward.trainers import sac

    monkeypatch.setenv("WANDB_MODE", "offline")
    for key in ("WANDB_PROJECT", "WANDB_RUN_GROUP"):
        monkeypatch.delenv(key, raising=False)
    config = load_yaml(REPO / "configs" / "sac_fetchreach_sparse.yaml")
    config["env"]["n_envs"] = 1
    config["sac"].update(learning_starts=30, batch_size=16, policy_kwargs={"net_arch": [16, 16]})
    config["training"].update(
        total_timesteps=60, eval_every=0, curve_every=30, checkpoint_every=0, log_interval=1
    )
    config["wandb"] = {"project": "dr-wandb-test", "group": "dr-group", "tags": ["t1"]}
    sac.run(config, output_dir=tmp_path / "run-a")
    assert offline_run(tmp_path / "run-a") == ("dr-wandb-test", "dr-group", "run-a", ["t1"], "")
    assert "WANDB_PROJECT" not in os.environ and "WANDB_RUN_GROUP" not in os.environ


@pytest.mark.slow  # two short SAC runs
def test_a_comparison_groups_its_runs_and_names_each_after_its_run_directory(tmp_path, monkeypatch):
    from densereward.sample_efficiency import run_comparison

    monkeypatch.setenv("WANDB_MODE", "offline")
    config = {
        "name": "tiny-cmp",
        "trainer": "sac",
        "base": "configs/sac_fetchreach_sparse.yaml",
        "common": [
            "env.n_envs=1",
            "sac.learning_starts=30",
            "sac.batch_size=16",
            "sac.policy_kwargs={net_arch: [16, 16]}",
            "training.eval_every=0",
            "training.curve_every=30",
            "training.checkpoint_every=0",
        ],
        "conditions": {"sparse": {}, "dense": ["env.id=FetchReachDense-v4", "env.reward=env"]},
        "seeds": [0],
        "budget": 60,
        "n_bootstrap": 100,
        "output_dir": str(tmp_path / "cmp"),
        "wandb": {"project": "dr-cmp-test", "tags": ["cmp"]},
    }
    monkeypatch.chdir(REPO)
    run_comparison(config, progress=False)
    for cname in ("sparse", "dense"):
        run_dir = tmp_path / "cmp" / "runs" / cname / "seed0" / f"{cname}-seed0"
        want = ("dr-cmp-test", "tiny-cmp", f"{cname}-seed0", ["cmp"], cname)
        assert offline_run(run_dir) == want


# --------------------------------------------------------------------------------------------
# W&B's service process (wandb-core) ending during a run
# --------------------------------------------------------------------------------------------


def children(pid: int, name: str) -> list[int]:
    """The pids of ``pid``'s child processes whose command line names ``name`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:  # the process ended while we read
            continue
        if int(fields[1]) == pid and name.encode() in cmdline:
            found.append(int(stat.parent.name))
    return found


def cli_process(argv: list[str], **env_vars: str):
    """``python -m densereward.cli *argv`` in a fresh process (the densereward under test first
    on its ``PYTHONPATH``, ``env_vars`` added), stdout and stderr piped as text."""
    import subprocess
    import sys

    import densereward

    src = str(Path(densereward.__file__).parents[1])  # the densereward under test
    pythonpath = os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=pythonpath, **env_vars)
    cmd = [sys.executable, "-m", "densereward.cli", *argv]
    return subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def kill_wandb_core_during(argv: list[str], ready, sig: str = "SIGTERM", **env_vars: str):
    """Run the command line ``argv`` with W&B offline, kill its W&B service (the child process
    wandb-core) with ``sig`` once ``ready()`` holds, and return ``(exit status, stdout,
    stderr)``; asserts that the run went on without W&B (exit 0) and said so in one line, with
    no traceback and no "This is a bug"."""
    import signal
    import time

    proc = cli_process(argv, WANDB_MODE="offline", HF_HUB_OFFLINE="1", **env_vars)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None and not ready():
            time.sleep(0.1)
        core = children(proc.pid, "wandb-core")
        assert proc.poll() is None and len(core) == 1, (core, proc.communicate()[1][-3000:])
        os.kill(core[0], getattr(signal, sig))
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-2000:] + err[-3000:]
    for bad in ("This is a bug", "Traceback", "Exception ignored", "internal error"):
        assert bad not in err, err[-3000:]
    said = [line for line in err.splitlines() if "wandb-core" in line]
    assert len(said) == 1, err[-3000:]
    assert "the run goes on without W&B" in said[0] and "wandb.enabled=false" in said[0]
    return said[0], out


def test_a_service_found_gone_when_the_run_finishes_is_said_once_and_a_next_run_starts(
    tmp_path, monkeypatch, caplog
):
    """The W&B service ending after a run's last log: finishing the run raised
    ConnectionResetError (and W&B's exit hook printed a traceback at exit). It is said once
    now, W&B is torn down, and a next run in the same process (a comparison) gets a new
    service."""
    import logging
    import signal
    import time

    import wandb

    from densereward.wandb_config import WandbService

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    run = wandb.init(project="dr-lost", id="lostservice01")
    run.log({"x": 1.0}, step=1)
    (core,) = children(os.getpid(), "wandb-core")
    os.kill(core, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while core in children(os.getpid(), "wandb-core") and time.monotonic() < deadline:
        time.sleep(0.1)  # reaped by W&B's own process handle, or a zombie: gone either way
    service = WandbService(tmp_path / "run", tmp_path)
    with caplog.at_level(logging.WARNING, logger="densereward"):
        service.finish(run, step=7)
        service.finish(run, step=7)  # a second finish (a trainer's finally) says nothing
    said = [r.getMessage() for r in caplog.records if "wandb-core" in r.getMessage()]
    assert len(said) == 1 and service.lost_at == 7, said
    # which error the dead service gives depends on timing: under load (CI beside other jobs)
    # run.finish() raised W&B's HandleAbandonedError, which escaped as an error of the test
    assert said[0].startswith(
        "the W&B service (wandb-core) ended before the run could finish its W&B run, found at "
        "step 7 ("
    ) and (
        "(ConnectionResetError: Connection lost): that W&B run stays unfinished;" in said[0]
        or "(HandleAbandonedError: no reply from it): that W&B run stays unfinished;" in said[0]
    ), said[0]
    assert wandb.run is None
    again = wandb.init(project="dr-lost", id="nextrun00002")
    again.log({"x": 2.0}, step=1)
    WandbService(tmp_path / "run2", tmp_path).finish(again, step=1)
    assert sum("wandb-core" in r.getMessage() for r in caplog.records) == 1  # the new run's fine


@pytest.mark.slow  # a 1000-step SAC run through the command line (~20 s)
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_train_sac_goes_on_without_wandb_when_its_service_ends_and_says_so_once(tmp_path, sig):
    """Rerun 11 F2: a SAC run whose W&B service (the child process wandb-core) was killed
    ended with "internal error: ConnectionResetError: Connection lost. This is a bug", no stop
    line, and W&B's 30-line atexit traceback. The run goes on without W&B now: one warning
    names the service, the step and what is kept; the run's own files are complete, exit 0."""
    run_dir = tmp_path / "run"
    config = str(REPO / "configs" / "sac_fetchreach_sparse.yaml")
    argv = ["train", "sac", "--config", config, "--output-dir", str(run_dir)]
    argv += [
        *("--total-timesteps", "1000", "training.checkpoint_every=200", "training.eval_every=0"),
        *("training.log_interval=1", "sac.learning_starts=100", "sac.batch_size=16"),
    ]
    first = run_dir / "checkpoints" / "sac_200_steps.zip"
    said, out = kill_wandb_core_during(argv, first.is_file, sig, MUJOCO_GL="egl")
    assert "the W&B service (wandb-core) ended during the run at environment step " in said
    assert (run_dir / "summary.json").is_file() and (run_dir / "final_model.zip").is_file()
    steps = [int(r["time/total_timesteps"]) for r in _csv_rows(run_dir / "logs" / "progress.csv")]
    assert steps[-1] == 1000, steps
    assert out.splitlines()[-1].startswith("plot: ")


def _csv_rows(path: Path) -> list[dict[str, str]]:
    import csv

    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_a_handle_abandoned_by_a_dead_service_counts_as_the_service_lost():
    """CI under load: run.finish() on a killed wandb-core raised W&B's HandleAbandonedError
    (not ConnectionResetError), which WandbService did not take for a lost service."""
    from wandb.sdk.mailbox.mailbox_handle import HandleAbandonedError

    from densereward.wandb_config import SERVICE_LOST, service_lost

    assert HandleAbandonedError in service_lost() and ConnectionError in service_lost()
    assert set(SERVICE_LOST) <= set(service_lost())
