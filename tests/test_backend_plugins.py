"""A third-party backend from a real entry point, used by name from YAML (issue 29 items 1-2).

The plugin is a tiny installed distribution built in a temporary directory: a
``*.dist-info`` with ``entry_points.txt`` naming the backend (group ``densereward.backends``)
and its options dataclass (group ``densereward.backend_options``), and the package itself, put
on ``sys.path``. Nothing of ours imports it: the registries read the groups.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from densereward.backend_options import BACKEND_OPTIONS, BACKENDS
from densereward.config import VerifierConfig, from_dict, load_yaml
from densereward.errors import ConfigError
from densereward.verifier import Verifier

REPO = Path(__file__).resolve().parents[1]

_OPTIONS = '''
from dataclasses import dataclass

from densereward.errors import ConfigError


@dataclass(frozen=True)
class ConstOptions:
    """The constant backend's options: the score letter it always reads and its mass."""

    letter: str = "A"
    mass: float = 0.9

    def __post_init__(self):
        if not 0.0 < self.mass <= 1.0:
            raise ConfigError(f"verifier.backend_options.mass must be in (0, 1], got {self.mass}")
'''

_BACKEND = '''
import math

from densereward.backends.base import BackendUsage, LocalAsyncMixin, TokenLogprobs

from .options import ConstOptions


class ConstBackend(LocalAsyncMixin):
    """Every read puts ``mass`` on ``options.letter``."""

    name = "const"
    model_id = "const-v1"
    options_class = ConstOptions

    def __init__(self, config):
        self.config = config
        self.options = config.options
        self.usage = BackendUsage()

    def next_token_logprobs(self, prompts, candidates):
        self.usage.n_calls += 1
        return [TokenLogprobs({self.options.letter: math.log(self.options.mass)}) for _ in prompts]

    def tokenize(self, text):
        return [ord(c) for c in text]  # one token per character

    def generate(self, prompts, **kwargs):
        return ["" for _ in prompts]

    def close(self):
        pass
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """Install the ``const`` backend as a distribution on ``sys.path``; uninstall afterwards."""
    site = tmp_path / "site"
    pkg = site / "dr_const_plugin"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "options.py").write_text(textwrap.dedent(_OPTIONS))
    (pkg / "backend.py").write_text(textwrap.dedent(_BACKEND))
    info = site / "dr_const_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dr-const-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[densereward.backends]\nconst = dr_const_plugin.backend:ConstBackend\n\n"
        "[densereward.backend_options]\nconst = dr_const_plugin.options:ConstOptions\n"
    )
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    BACKENDS.reload_plugins()
    BACKEND_OPTIONS.reload_plugins()
    yield site
    for registry in (BACKENDS, BACKEND_OPTIONS):
        registry._entries.pop("const", None)
    for name in [m for m in sys.modules if m.startswith("dr_const_plugin")]:
        del sys.modules[name]


def _yaml(tmp_path: Path, text: str) -> VerifierConfig:
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return from_dict(VerifierConfig, load_yaml(path)["verifier"], prefix="verifier.")


def test_a_plugin_backend_is_used_by_name_from_yaml(plugin, tmp_path):
    assert "const" in BACKENDS.names() and "dr_const_plugin" not in sys.modules
    cfg = _yaml(
        tmp_path,
        """
        verifier:
          backend: const
          granularity: 5
          calibrate: false
          backend_options: {letter: E, mass: '0.8'}
        """,
    )
    # validated into the plugin's own dataclass when the config loads (the option entry is
    # imported, the backend module is not yet)
    assert type(cfg.options).__name__ == "ConstOptions" and cfg.options.mass == 0.8
    assert "dr_const_plugin.backend" not in sys.modules
    with Verifier(cfg) as v:
        assert v.backend.name == "const"
        # it declares no capability: BackendBase's defaults (issue 42)
        assert not v.capabilities.text_reads and v.capabilities.boundary_logprobs is None
        r = v.score(problem="2+2", response="4")
    assert r.value == pytest.approx(1.0)  # all the mass on E, the top of A..E


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (
            "{lettre: B}",
            r"'verifier.backend_options.lettre' \(did you mean "
            r"'verifier.backend_options.letter'\?\); it takes letter, mass",
        ),
        ("{mass: 2}", r"backend='const'.*mass must be in \(0, 1\], got 2"),
        ("{mass: lots}", r"verifier.backend_options.mass: expected float, got 'lots'"),
    ],
)
def test_a_plugin_backends_options_are_validated_at_load(plugin, tmp_path, options, match):
    with pytest.raises(ConfigError, match=match):
        _yaml(tmp_path, f"verifier:\n  backend: const\n  backend_options: {options}\n")


def test_a_plugin_backend_is_named_on_the_command_line(plugin, tmp_path):
    """``densereward eval-verifier`` in a fresh process finds the plugin through its entry point."""
    data = tmp_path / "rows.jsonl"
    data.write_text(
        '{"problem": "2+2", "response": "4", "is_correct": true, "generator": "g"}\n'
        '{"problem": "2+3", "response": "6", "is_correct": false, "generator": "g"}\n'
    )
    env = {"PYTHONPATH": str(plugin), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    cmd = [
        sys.executable,
        "-m",
        "densereward.cli",
        "eval-verifier",
        "--responses",
        str(data),
        "--out",
        str(tmp_path / "out"),
        "--no-plots",
        "--bootstrap",
        "0",
        "verifier.backend=const",
        "verifier.granularity=5",
        "verifier.calibrate=false",
        "verifier.backend_options.letter=B",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"backend": "const"' in (tmp_path / "out" / "metrics.json").read_text()
    bad = subprocess.run(
        [*cmd, "verifier.backend_options.lettr=B"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert bad.returncode != 0 and "did you mean 'verifier.backend_options.letter'" in bad.stderr


def test_the_dry_run_checks_the_model_of_a_plugin_that_loads_it_here(plugin, tmp_path, monkeypatch):
    """``loads_model = True`` on a plugin's options class makes ``verifier.model`` a model that
    must load in this process (checked like ``transformers``'); without it the name goes to a
    server and is not checked here."""
    from densereward.backend_options import loads_model
    from densereward.trainers.checks import check_models

    cfg = _yaml(tmp_path, "verifier: {backend: const, model: ./no/such/model}\n")
    assert not loads_model("const")
    lines, problems = check_models(None, cfg)
    assert len(lines) == 1 and not problems  # the policy only
    assert loads_model("transformers") and loads_model("vllm") and not loads_model("openai")
    monkeypatch.setattr(BACKEND_OPTIONS.load("const"), "loads_model", True, raising=False)
    assert loads_model("const")
    with pytest.raises(ConfigError, match=r"verifier.model='./no/such/model': no such file"):
        check_models(None, cfg)
