"""densereward.registry: the one registry every extensible part uses."""

from __future__ import annotations

import json
import sys
import types
from importlib import metadata

import pytest

from densereward.errors import BackendUnavailableError, ConfigError, RegistryError
from densereward.registry import Registry, entry_point_group


def test_lazy_string_entry_is_imported_only_on_load():
    name = "densereward_test_lazy_mod"
    sys.modules.pop(name, None)
    r = Registry("thing", group=None, builtins={"x": f"{name}:VALUE"})
    assert r.names() == ["x"] and "x" in r
    assert name not in sys.modules  # listing imports nothing
    mod = types.ModuleType(name)
    mod.VALUE = 42
    sys.modules[name] = mod
    try:
        assert r.load("x") == 42
    finally:
        sys.modules.pop(name)


def test_unknown_name_is_a_config_error_with_did_you_mean():
    r = Registry(
        "reward kind", group=None, builtins={"dense": "json:dumps", "sparse": "json:loads"}
    )
    with pytest.raises(ConfigError, match=r"unknown reward kind 'dens'.*Did you mean 'dense'"):
        r.check("dens")
    with pytest.raises(ConfigError, match=r"available: \['dense', 'sparse'\]"):
        r.load("nothing-like-it")


def test_a_taken_name_is_never_overwritten_and_re_registering_is_a_no_op():
    r = Registry("thing", group=None, builtins={"json": "json:dumps"})
    r.register("json", "json:dumps")
    r.register("json", json.dumps)  # the object the string names: the same entry
    with pytest.raises(RegistryError, match="already registered"):
        r.register("json", "json:loads")
    with pytest.raises(RegistryError, match="module:attr"):
        r.register("bad", "no-colon")
    with pytest.raises(RegistryError, match="non-empty"):
        r.register("  ", "json:dumps")


def test_decorator_form_and_dotted_attributes():
    r = Registry("thing", group=None, builtins={"join": "os:path.join"})
    assert r.load("join")("a", "b") in ("a/b", "a\\b")

    @r.register("mine")
    class Mine:
        pass

    assert r.load("mine") is Mine


def test_an_entry_that_cannot_load_raises_the_registrys_error():
    r = Registry("verifier backend", group=None, error=BackendUnavailableError)
    r.register("ghost", "densereward_no_such_module_xyz:Backend")
    with pytest.raises(BackendUnavailableError, match="cannot load"):
        r.load("ghost")


def test_plugins_come_from_the_entry_point_group(monkeypatch):
    ep = metadata.EntryPoint(name="plug", value="json:dumps", group=entry_point_group("things"))
    clash = metadata.EntryPoint(name="json", value="json:loads", group=entry_point_group("things"))
    seen = []

    def fake_entry_points(group):
        seen.append(group)
        return [ep, clash] if group == "densereward.things" else []

    monkeypatch.setattr(metadata, "entry_points", fake_entry_points)
    r = Registry("thing", group=entry_point_group("things"), builtins={"json": "json:dumps"})
    assert r.names() == ["json", "plug"]
    assert r.load("plug") is json.dumps
    assert r.load("json") is json.dumps  # a plugin cannot take a built-in's name
    assert seen == ["densereward.things"]  # read once
    r.names()
    assert seen == ["densereward.things"]
