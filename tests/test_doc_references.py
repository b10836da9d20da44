"""Every file and config key the README and docs name exists.

``tests/test_doc_commands.py`` runs the commands the pages show; this file checks the names in
their prose: each repository path under ``configs/``, ``docs/``, ``src/``, ``benchmarks/`` or
``scripts/`` is a file or folder of the repository, and each config key written in backticks as
``section.key`` (``verifier.min_mass``, ``env.render_size=64``, ``reward.render_frames: true``)
is a field of that section's dataclass, or of the library class a pass-through section feeds
(``training:`` of GRPO -> ``trl.GRPOConfig``, ``sac:`` -> stable-baselines3's ``SAC``). A key
one level deeper is checked where the field is itself a dataclass (``verifier.frames.max_side``)
or the backend options (``verifier.backend_options.dtype``: a field of some backend's options).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
_FENCED = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
_INLINE = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(
    r"(?<![\w./-])((?:configs|docs|src|benchmarks|scripts|tests|trainers|envs)/[^\s`'\")\]|,;:]*)"
)
_KEY = re.compile(r"(?<![\w./-])([a-z_]+)\.([a-z_][a-z0-9_]*)(?:\.([a-z_][a-z0-9_]*))?(?![\w/(-])")
_PLACEHOLDER = re.compile(r"[<>*{}]|\.\.\.")
_FILE_SUFFIXES = {"py", "md", "yaml", "yml", "json", "jsonl", "txt", "png", "pt", "pkl", "toml"}
FOREIGN = {"data.max_response_length", "wandb.init"}
"""Other tools' names the pages quote (verl's config key, the W&B library's function)."""
REFUSED = {"training.wandb", "training.wandb_project"}
"""Keys of earlier releases the pages name as refused (each is checked to be refused)."""


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.init}


@cache
def schema() -> dict[str, set[str]]:
    """Section -> its keys, the union over the commands that read a section of that name."""
    from stable_baselines3 import SAC
    from trl import GRPOConfig

    from densereward.config import VerifierConfig
    from densereward.data import DataConfig
    from densereward.policy_eval import HeldoutConfig
    from densereward.progress_reward import ProgressRewardConfig
    from densereward.rewards import RewardConfig
    from densereward.serve.app import ServeConfig
    from densereward.trainers import grpo_config, sac_config

    sac_args = set(inspect.signature(SAC.__init__).parameters) - {"self", "policy", "env"}
    return {
        "verifier": _fields(VerifierConfig),
        "reward": _fields(RewardConfig) | _fields(ProgressRewardConfig),
        "training": _fields(GRPOConfig) | _fields(sac_config.TrainingConfig),
        "model": _fields(grpo_config.ModelConfig),
        "data": _fields(DataConfig),
        "heldout": _fields(HeldoutConfig),
        "env": _fields(sac_config.EnvConfig),
        "sac": sac_args,
        "serve": _fields(ServeConfig),
        "wandb": _fields(grpo_config.WandbConfig),
    }


@cache
def nested(section: str, key: str) -> set[str] | None:
    """The keys under ``section.key`` when they are checkable, else ``None``."""
    from densereward.backend_options import BACKEND_OPTIONS
    from densereward.config import VerifierConfig

    if (section, key) == ("verifier", "backend_options"):
        return set().union(*(_fields(BACKEND_OPTIONS.load(n)) for n in BACKEND_OPTIONS.names()))
    if section == "verifier":
        hint = typing.get_type_hints(VerifierConfig).get(key)
        if dataclasses.is_dataclass(hint):
            return _fields(hint)
    return None


def _prose(page: Path) -> str:
    return _FENCED.sub("", page.read_text(encoding="utf-8"))


def named_paths() -> list[tuple[str, str]]:
    """(page, path) for each repository path a page names (in prose, code or a link); a path
    with a placeholder (``docs/figures/papers_<model>.md``, ``configs/sac_*.yaml``) is kept up
    to its first placeholder, a stem some file must start with."""
    found = set()
    for page in PAGES:
        for path in _PATH.findall(page.read_text(encoding="utf-8")):
            found.add(
                (str(page.relative_to(REPO)), _PLACEHOLDER.split(path.split("#")[0])[0].rstrip("."))
            )
    return sorted(found)


def named_keys() -> list[tuple[str, str]]:
    """(page, ``section.key[.sub]``) for each config key a page's inline code names."""
    found = set()
    for page in PAGES:
        for span in _INLINE.findall(_prose(page)):
            for section, key, sub in _KEY.findall(span):
                name = f"{section}.{key}" + (f".{sub}" if sub else "")
                if section in schema() and key not in _FILE_SUFFIXES and name not in FOREIGN:
                    found.add((str(page.relative_to(REPO)), name))
    return sorted(found)


def test_the_pages_name_files_and_keys():
    """The scan finds what the pages name (a broken pattern would make the checks below pass)."""
    paths, keys = {p for _, p in named_paths()}, {k for _, k in named_keys()}
    assert {"configs/grpo_math_cpu.yaml", "benchmarks/papers.py"} <= paths
    assert {"verifier.min_mass", "env.render_size", "verifier.backend_options.dtype"} <= keys
    assert len(paths) > 80 and len(keys) > 40


@pytest.mark.parametrize("page,path", named_paths())
def test_every_named_file_exists(page, path):
    folder, _, stem = path.rpartition("/")
    there = (REPO / path).exists() or any((REPO / folder).glob(f"{stem}*"))
    assert there, f"{page} names {path}, which is not in the repository"


@pytest.mark.parametrize("page,name", named_keys())
def test_every_named_config_key_exists(page, name):
    if name in REFUSED:
        from densereward.errors import ConfigError
        from densereward.wandb_config import refuse_old_keys

        section, key = name.split(".")
        with pytest.raises(ConfigError, match=f"{name} moved"):
            refuse_old_keys({section: {key: 1}})
        return
    section, key, *sub = name.split(".")
    keys = schema()[section]
    assert key in keys, f"{page} names `{name}`: {section}: has no key {key!r}"
    inner = nested(section, key) if sub else None
    if inner is not None:
        assert sub[0] in inner, f"{page} names `{name}`: {section}.{key} has no key {sub[0]!r}"
