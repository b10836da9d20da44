"""The documentation site (mkdocs.yml) builds strictly, covers every public name, and the strict
build is a check that can fail: a broken reference fails it."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import yaml
from conftest import require

REPO = Path(__file__).resolve().parents[1]
API_DIR = REPO / "docs" / "api"
_DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)
_ENV = {
    **os.environ,
    "NO_MKDOCS_2_WARNING": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}

require("mkdocs", "dev")
require("mkdocstrings_handlers.python", "dev")


def mkdocs_build(config: Path, site_dir: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of ``config`` into ``site_dir`` (a warning is an error)."""
    cmd = [
        sys.executable,
        "-m",
        "mkdocs",
        "build",
        "--strict",
        "--config-file",
        str(config),
        "--site-dir",
        str(site_dir),
    ]
    return subprocess.run(cmd, cwd=REPO, env=_ENV, capture_output=True, text=True, timeout=600)


def inventory(site_dir: Path) -> set[str]:
    """The object names in the site's ``objects.inv`` (Sphinx inventory v2: 4 header lines, zlib)."""
    raw = (site_dir / "objects.inv").read_bytes().split(b"\n", 4)[4]
    return {line.split(" ", 1)[0] for line in zlib.decompress(raw).decode().splitlines()}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site_dir = tmp_path_factory.mktemp("site")
    done = mkdocs_build(REPO / "mkdocs.yml", site_dir)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-6000:]}"
    return site_dir


def test_the_site_builds_strictly(site):
    assert (site / "index.html").is_file() and (site / "api" / "index.html").is_file()
    for page in ("configuration", "measurements", "findings", "reward_hacking", "gpu"):
        assert (site / page / "index.html").is_file(), page


def load_script(name: str):
    """A module of scripts/ (the site's hooks and griffe extension)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOOKS = load_script("mkdocs_hooks")
PUBLIC = HOOKS.public_modules(REPO / "src" / "densereward")


def documented_modules() -> list[str]:
    """The modules the API pages render (``::: module`` directives)."""
    return [
        m for page in sorted(API_DIR.glob("*.md")) for m in _DIRECTIVE.findall(page.read_text())
    ]


def test_every_public_name_has_a_reference_entry(site):
    """Each name of each public module's ``__all__`` (and the root's) is in the inventory."""
    names = inventory(site)
    missing = [m for m in PUBLIC if m not in names]  # not rendered at all
    for module in sorted({*PUBLIC, *documented_modules()}):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError:  # a directive of one object: densereward.default_model_path
            continue
        for n in getattr(mod, "__all__", ()):  # a lazy re-export counts at its home submodule
            if f"{module}.{n}" not in names and not any(
                x.startswith(f"{module}.") and x.endswith(f".{n}") for x in names
            ):
                missing.append(f"{module}.{n}")
    import densereward

    root = {n.rsplit(".", 1)[-1] for n in names}
    missing += [f"densereward.{n}" for n in densereward.__all__ if n not in root]
    assert not missing, f"public names with no API reference entry: {missing}"


def test_public_modules_without_a_page_are_rendered_on_a_generated_one(site):
    """scripts/mkdocs_hooks.py puts each public module no docs/api page renders on api/more.md
    (a new module is in the reference before it has a page; give it one when it lands)."""
    assert "densereward.scale" in PUBLIC and "densereward.backends" in PUBLIC
    assert not [m for m in PUBLIC if m.rsplit(".", 1)[-1].startswith("_")]
    undocumented = HOOKS.undocumented_modules(REPO / "docs", REPO / "src" / "densereward")
    more = (site / "api" / "more" / "index.html").read_text()
    assert all(f'id="{m}"' in more for m in undocumented), undocumented
    page = HOOKS.more_page(["densereward.x", "densereward.y"])
    assert "::: densereward.x\n\n::: densereward.y\n" in page


def _temp_site(tmp_path: Path, page: str, module: str | None = None) -> Path:
    """A copy of mkdocs.yml building one page (``page``) from a temporary docs folder, with the
    module ``docs_probe`` (source ``module``) importable by mkdocstrings when given."""
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    docs = tmp_path / "docs"
    docs.mkdir(parents=True)
    (docs / "index.md").write_text(page)
    config.update(
        docs_dir=str(docs),
        nav=[{"Home": "index.md"}],
        hooks=[str(REPO / h) for h in config.get("hooks", [])],
    )
    python = config["plugins"][-1]["mkdocstrings"]["handlers"]["python"]
    python["paths"] = [str(REPO / p) for p in python["paths"]]
    python["options"]["extensions"] = [str(REPO / e) for e in python["options"]["extensions"]]
    if module is not None:
        (tmp_path / "docs_probe.py").write_text(module)
        python["paths"].append(str(tmp_path))
    path = tmp_path / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config))
    return path


_GOOD_PAGE = "::: densereward.scale\n\nSee [ScoreScale][densereward.scale.ScoreScale].\n"


def test_a_temporary_copy_of_the_config_builds(tmp_path):
    """The control of the test below: the same temporary site with good references builds."""
    probe = '"""Uses :class:`~densereward.scale.ScoreScale` and :mod:`.elsewhere`."""\n'
    done = mkdocs_build(
        _temp_site(tmp_path, _GOOD_PAGE + "\n::: docs_probe\n", probe), tmp_path / "site"
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize(
    ("page", "message"),
    [
        (
            "::: densereward.scale\n\nSee [the scale][densereward.scale.NoSuchScale].\n",
            "Could not find cross-reference target",
        ),
        ("See [the guide](no_such_page.md).\n", "no_such_page.md"),
        ("::: densereward.scale\n\n::: docs_probe\n", "densereward.scale.NoSuchScale"),
    ],
    ids=["cross-reference", "relative-link", "docstring-role"],
)
def test_a_broken_reference_fails_the_strict_build(tmp_path, page, message):
    """In a page, or in a docstring (a Sphinx role naming a ``densereward`` object that does
    not exist; one that exists is a link, tested by the control above)."""
    probe = '"""Uses :class:`~densereward.scale.ScoreScale` and :class:`densereward.scale.NoSuchScale`."""\n'
    done = mkdocs_build(_temp_site(tmp_path, page, probe), tmp_path / "site")
    assert done.returncode != 0 and message in done.stderr, done.stderr[-3000:]


def test_the_site_helpers():
    """scripts/griffe_doctest.py's and mkdocs_hooks.py's doctests; the hooks refuse a nav entry
    whose page is missing, naming it (it was dropped without a word, defeating --strict)."""
    import doctest

    from mkdocs.exceptions import PluginError

    assert doctest.testmod(load_script("griffe_doctest")).failed == 0
    assert doctest.testmod(HOOKS).failed == 0
    nav = [{"A": "index.md"}, {"B": [{"C": "no_such_page.md"}]}, "api/index.md", {"D": "https://x"}]
    with pytest.raises(PluginError, match=r"1 page\(s\) .*B > C: no_such_page.md; add the page"):
        HOOKS.on_config({"nav": nav, "docs_dir": str(REPO / "docs")})
    whole = {"nav": nav[:1] + nav[2:], "docs_dir": str(REPO / "docs")}
    assert HOOKS.on_config(whole) is whole
