"""Every ``densereward`` command the README and docs show is run by the suite, as written.

Each one parses with the real command line (its flags exist, its ``--config`` file is there),
and each one of a command with a dry run (``train grpo``, ``train sac``, ``compare``,
``serve``) passes that dry run, with a scripted verifier server standing in for a documented
server address: what the command would hit on this machine is listed, and the run would start.
The README's ``score`` commands run for real (the embedded model, or the scripted server).

Not run here (each is run elsewhere, or cannot run on a CPU test machine): the commands'
full training runs (``tests/test_grpo.py``, ``tests/test_sac.py``, ``tests/test_compare.py``
run short ones of the same configs), ``eval-verifier`` on 100 GSM8K problems and
``eval-progress`` (``tests/test_eval_verifier.py`` and ``tests/test_eval_progress.py`` run the
same commands on fewer problems / episodes), ``make``, ``pip``, ``vllm serve``, ``accelerate
launch`` and ``python benchmarks/*.py``.
"""

from __future__ import annotations

import re
import shlex
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
_COMMAND = re.compile(r"^(?:[A-Z_]+=\S+\s+)*densereward\s")
DRY_RUNS = {"train grpo", "train sac", "compare", "serve"}
"""The sub-commands with a ``--dry-run``."""


@dataclass(frozen=True)
class DocCommand:
    """One command as a page shows it: the page, the line, argv after ``densereward``, and the
    environment assignments before it (``PYTHONPATH=.``)."""

    page: str
    line: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    @property
    def id(self) -> str:
        return (
            f"{self.page}:{' '.join(self.argv[:2])}:{zlib.crc32(self.line.encode()) % 10_000:04d}"
        )


def documented_commands() -> list[DocCommand]:
    """The ``densereward`` commands of every fenced block (not ``python``) of the README and
    docs, continuation lines joined and comments dropped."""
    found = []
    for page in PAGES:
        for lang, body in _FENCE.findall(page.read_text(encoding="utf-8")):
            if lang == "python":
                continue
            lines = body.splitlines()
            i = 0
            while i < len(lines):
                line = lines[i].strip()
                while line.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    line = line[:-1] + " " + lines[i].strip()
                i += 1
                if not _COMMAND.match(line):
                    continue
                words = shlex.split(line, comments=True)
                env = {}
                while words[0] != "densereward":
                    key, value = words.pop(0).split("=", 1)
                    env[key] = value
                found.append(DocCommand(str(page.relative_to(REPO)), line, tuple(words[1:]), env))
    return found


COMMANDS = documented_commands()


def test_the_pages_show_the_commands_this_module_runs():
    """The extraction finds what the pages show (a change in their form would empty the list)."""
    kinds = {c.argv[0] for c in COMMANDS}
    assert {"score", "train", "compare", "eval-verifier", "eval-progress", "serve"} <= kinds
    assert len(COMMANDS) >= 30


def distinct(commands: list[DocCommand]) -> list[DocCommand]:
    """One of each command (several pages show the same one)."""
    seen: dict[tuple[str, ...], DocCommand] = {}
    for c in commands:
        seen.setdefault(c.argv, c)
    return list(seen.values())


@pytest.mark.parametrize("command", distinct(COMMANDS), ids=lambda c: c.id)
def test_every_documented_command_parses_as_written(command):
    """Its sub-command and flags exist (argparse would exit 2) and its config file is there."""
    from densereward.cli import build_parser

    args = build_parser().parse_args(list(command.argv))
    config = getattr(args, "config", None)
    assert config is None or (REPO / config).is_file(), f"{command.page}: no {config}"


SERVED = re.compile(r"http://(?:127\.0\.0\.1|10\.0\.0\.\d+):\d+/v1")
"""A documented verifier server address (a scripted server stands in for it): in the command,
or in its config when the page starts that server itself (``vllm serve ... --port 8001``)."""

ENVIRONMENT_BOUND = re.compile(
    r"cannot be reached offline|is not in the local Hugging Face cache and the Hub cannot be reached"
    r"|model\.name='~/\.cache/densereward/models/[^']+': no such file or directory"
)
"""A dry-run problem that is this machine's, not the command's: no Hugging Face Hub (the
Qwen3-8B GPU config's model and data set), or a model the docs build in a step before
(``configs/compare_grpo_dense_cpu.yaml``'s warm-started policy, made by
``benchmarks/chain_sum_warm_start.py``) that this machine has not built. Any other ``!!`` line,
or error, fails the test."""


def with_servers(command: DocCommand):
    """Scripted servers for the command's documented server addresses, listing its
    ``verifier.model`` (a context manager yielding their URLs in order)."""
    import contextlib

    from servers import MisbehavingServer

    model = next(
        (w.split("=", 1)[1] for w in command.argv if w.startswith("verifier.model=")), None
    ) or config_model(command)
    stack = contextlib.ExitStack()
    n = len(SERVED.findall(" ".join(command.argv))) or int(config_serves(command))
    urls = [
        stack.enter_context(MisbehavingServer(**({"model": model} if model else {}))).base_url
        for _ in range(n)
    ]
    return stack, urls


def config_model(command: DocCommand) -> str | None:
    """The ``verifier.model`` of the command's config (a served verifier is checked to serve it)."""
    from densereward.config import load_yaml

    if "--config" not in command.argv:
        return None
    config = load_yaml(REPO / command.argv[command.argv.index("--config") + 1])
    return (config.get("verifier") or {}).get("model")


def config_serves(command: DocCommand) -> bool:
    """Whether the command's config reads a served verifier at a documented address."""
    from densereward.config import load_yaml

    if "--config" not in command.argv:
        return False
    verifier = (
        load_yaml(REPO / command.argv[command.argv.index("--config") + 1]).get("verifier") or {}
    )
    url = str((verifier.get("backend_options") or {}).get("base_url") or "")
    return verifier.get("backend") == "openai" and bool(SERVED.fullmatch(url))


def as_run_here(command: DocCommand, urls: list[str], out: Path, *, dry_run: bool) -> list[str]:
    """The command's argv with each documented server address replaced by a scripted server's
    (in order), ``--output-dir`` / ``--out`` under ``out``, and ``--dry-run`` when asked. A
    ``--resume`` finds the checkpoint its page's previous command leaves (``checkpoint-5``)."""
    it = iter(urls)
    argv = [SERVED.sub(lambda _: next(it), w) for w in command.argv]
    if len(urls) > len(SERVED.findall(" ".join(command.argv))):  # the config's own address
        argv.append(f"verifier.backend_options.base_url={urls[-1]}")
    for flag in ("--output-dir", "--out"):
        if flag in argv:
            i = argv.index(flag) + 1
            argv[i] = str(out / argv[i])
            if "--resume" in argv:
                (Path(argv[i]) / "checkpoint-5").mkdir(parents=True)
    if dry_run and "--dry-run" not in argv:
        argv.append("--dry-run")
    return argv


def own_env_module(directory: Path) -> None:
    """docs/extending.md's ``myreach.py``, written as the page shows it (``PYTHONPATH=.``)."""
    text = (REPO / "docs" / "extending.md").read_text(encoding="utf-8")
    section = text[text.index("## Bring your own environment") :]
    block = re.search(r"^```python\n(.*?)^```", section, re.DOTALL | re.MULTILINE).group(1)
    (directory / "myreach.py").write_text(block)


def dry_runnable(command: DocCommand) -> bool:
    return command.argv[0] in DRY_RUNS or " ".join(command.argv[:2]) in DRY_RUNS


@pytest.mark.parametrize(
    "command", [c for c in distinct(COMMANDS) if dry_runnable(c)], ids=lambda c: c.id
)
def test_every_documented_command_with_a_dry_run_passes_it(command, tmp_path, monkeypatch, capsys):
    """As written, in its dry-run form: exit 0, or 2 only for what this machine lacks (the
    Hub); a documented server address is a scripted server listing the command's model."""
    import sys

    from densereward.cli import main

    monkeypatch.chdir(REPO)  # the pages' paths are relative to the repository root
    if command.env.get("PYTHONPATH") == ".":  # the page's own module, in the directory it names
        own_env_module(tmp_path)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setitem(sys.modules, "myreach", None)
        del sys.modules["myreach"]
    stack, urls = with_servers(command)
    with stack:
        argv = as_run_here(command, urls, tmp_path / "out", dry_run=True)
        before = sorted(tmp_path.rglob("*"))
        rc = main(argv)
    if command.env.get("PYTHONPATH") == ".":
        import gymnasium as gym

        gym.registry.pop("Reach1D-v0", None)
    captured = capsys.readouterr()
    out = captured.out + captured.err
    problems = [
        line
        for line in out.splitlines()
        if line.lstrip().startswith("!!") or line.startswith("densereward: error:")
    ]
    assert not [p for p in problems if not ENVIRONMENT_BOUND.search(p)], out
    assert rc == (2 if problems else 0), out
    assert sorted(tmp_path.rglob("*")) == before  # a dry run creates nothing


SCORES = [c for c in distinct(COMMANDS) if c.argv[:1] == ("score",)]


@pytest.mark.parametrize(
    "command",
    [pytest.param(c, marks=[] if SERVED.search(c.line) else pytest.mark.slow) for c in SCORES],
    ids=lambda c: c.id,
)
def test_every_documented_score_command_runs(command, tmp_path, capsys):
    """For real: the embedded model (slow: it loads), or a scripted server for the page's."""
    from densereward.cli import main

    stack, urls = with_servers(command)
    with stack:
        rc = main(as_run_here(command, urls, tmp_path, dry_run=False))
    out = capsys.readouterr().out
    assert rc == 0 and "expected score : " in out, out
    model = "Qwen/Qwen3-8B" if urls else "SmolLM2-135M-Instruct (embedded)"
    assert f"verifier       : {'openai' if urls else 'transformers'} {model} " in out, out


def _served_port(words: list[str], config_of: Path | None) -> str | None:
    """The port of the verifier server a command reads: its base_url override, else its config's."""
    from densereward.config import load_yaml

    urls = [w.split("=", 1)[1] for w in words if w.startswith("verifier.backend_options.base_url=")]
    if not urls and config_of is not None:
        verifier = load_yaml(config_of).get("verifier") or {}
        if verifier.get("backend") == "openai":
            urls = [str((verifier.get("backend_options") or {}).get("base_url") or "")]
    ports = {m for u in urls for m in re.findall(r":(\d+)/v1", u)}
    return ports.pop() if len(ports) == 1 else None


def test_a_page_that_starts_a_verifier_server_points_its_commands_at_it():
    """A block that starts ``vllm serve ... --port N`` and then runs commands reads port N in
    each of them (the README started 8000 and dry-ran configs/grpo_math_qwen3_8b.yaml, which
    reads 8001: its dry run, which contacts the server, would have failed)."""
    checked = []
    for page in PAGES:
        for lang, body in _FENCE.findall(page.read_text(encoding="utf-8")):
            served = re.search(r"^vllm serve \S+ .*--port (\d+)", body, re.MULTILINE)
            if lang == "python" or served is None:
                continue
            for line in body[served.end() :].replace("\\\n", " ").splitlines():
                words = shlex.split(line, comments=True)
                if not words or words[0] not in ("densereward", "accelerate"):
                    continue
                config = words[words.index("--config") + 1] if "--config" in words else None
                port = _served_port(words, REPO / config if config else None)
                checked.append((page.name, port))
                assert port == served.group(1), f"{page.name}: {line!r} reads port {port}"
    assert len(checked) >= 4, checked
