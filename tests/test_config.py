"""Configuration: VerifierConfig validation, YAML loading, dotted overrides, typed coercion,
threshold resolution and the hints that name the fix."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from densereward import VerifierConfig
from densereward.config import (
    apply_overrides,
    check_sections,
    from_dict,
    load_yaml,
    parse_override,
    resolve_threshold,
)
from densereward.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]

# ---- VerifierConfig --------------------------------------------------------------------------


def test_defaults_are_valid_and_frozen():
    c = VerifierConfig()
    assert (c.backend, c.granularity, c.n_repeats, c.style, c.threshold) == (
        "transformers",
        20,
        1,
        "direct",
        "auto",
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.granularity = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"granularity": 1}, r"verifier\.granularity must be in \[2, 26\], got 1"),
        ({"granularity": 27}, r"verifier\.granularity must be in \[2, 26\], got 27"),
        ({"n_repeats": 0}, r"verifier\.n_repeats must be >= 1"),
        ({"style": "chain"}, r"verifier\.style must be 'direct' or 'reasoning'"),
        ({"on_error": "ignore"}, r"verifier\.on_error must be 'abstain' or 'raise'"),
        ({"beta": 0.0}, r"verifier\.beta must be > 0"),
        ({"min_mass": 1.0}, r"verifier\.min_mass must be in \[0, 1\)"),
        ({"min_mass": -0.1}, r"verifier\.min_mass must be in \[0, 1\)"),
        ({"threshold": 1.5}, r"verifier\.threshold must be in \[0, 1\]"),
        ({"threshold": "youden"}, "use auto, a number in"),
        ({"chat_template_kwargs": ["enable_thinking"]}, "chat_template_kwargs must be a mapping"),
        ({"chat_template_kwargs": {1: True}}, "chat_template_kwargs must be a mapping"),
        # issue 28 item 9: values a backend would clamp or fail on much later
        ({"batch_size": 0}, r"verifier\.batch_size must be >= 1, got 0"),
        ({"model": ""}, r"verifier\.model is empty"),
        ({"model": "  "}, r"verifier\.model is empty"),
    ],
)
def test_bad_verifier_fields_are_config_errors_naming_the_field(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        VerifierConfig(**kwargs)


_URL = {"base_url": "http://x/v1"}


@pytest.mark.parametrize(
    ("backend", "options", "match"),
    [
        # issue 29 item 2: each backend owns its options, validated when the config loads
        (
            "openai",
            {},
            r"backend='openai'.*backend_options\.base_url is required.*set "
            r"verifier\.backend_options\.base_url=http://",
        ),
        ("sampled", {}, r"backend='sampled'.*backend_options\.base_url is required"),
        (
            "transformers",
            {"dtype": "bfloat61"},
            r"verifier\.backend_options\.dtype: 'bfloat61' \(did you mean 'bfloat16'\?\)",
        ),
        (
            "vllm",
            {"dtype": "fp32"},
            r"verifier\.backend_options\.dtype: 'fp32'; use auto \| float32",
        ),
        (
            "openai",
            {**_URL, "max_concurrency": 0},
            r"backend_options\.max_concurrency must be >= 1",
        ),
        ("sampled", {**_URL, "n_samples": 0}, r"backend_options\.n_samples must be >= 1"),
        ("openai", {**_URL, "max_retries": -1}, r"backend_options\.max_retries must be >= 0"),
        ("openai", {**_URL, "timeout_s": 0}, r"backend_options\.timeout_s must be > 0"),
        ("openai", {**_URL, "requests_per_minute": 0}, r"requests_per_minute must be > 0"),
        (
            "vllm",
            {"gpu_memory_utilization": 1.5},
            r"backend_options\.gpu_memory_utilization must be in \(0, 1\]",
        ),
        (
            "openai",
            {"base_url": "http://x/v1", "timout_s": 3},
            r"'verifier\.backend_options\.timout_s' \(did you mean 'verifier\.backend_options\.timeout_s'",
        ),
        (
            "transformers",
            {"base_url": "http://x/v1"},
            r"unknown verifier\.backend_options for backend 'transformers'.*it takes dtype, device",
        ),
        ("transformers", {"batch_size": 4}, r"batch_size: shared, set verifier\.<name>"),
        (
            "openai",
            {**_URL, "dtype": "float32"},
            r"options of 'transformers', 'vllm': switching backends, set verifier\.backend_options=",
        ),
        ("openai", {**_URL, "timeout_s": "soon"}, r"backend_options\.timeout_s: expected float"),
    ],
)
def test_bad_backend_options_are_config_errors_naming_the_field(backend, options, match):
    with pytest.raises(ConfigError, match=match):
        VerifierConfig(backend=backend, backend_options=options)


@pytest.mark.parametrize("name", ["dtype", "device", "base_url", "max_retries", "n_samples"])
def test_a_former_flat_field_names_its_new_spelling(name):
    with pytest.raises(
        ConfigError, match=rf"verifier\.{name} moved.*set verifier\.backend_options\.{name}"
    ):
        from_dict(VerifierConfig, {name: "x"}, prefix="verifier.")


def test_options_are_the_backends_frozen_dataclass_with_defaults_filled_in():
    from densereward.backend_options import OpenAIOptions, TransformersOptions

    c = VerifierConfig(backend_options={"dtype": "float32"})
    assert c.options == TransformersOptions(dtype="float32") and c.backend_options == {
        "dtype": "float32"
    }
    assert VerifierConfig().options == TransformersOptions()
    h = VerifierConfig(
        backend="openai",
        backend_options={"base_url": ["http://a/v1", "http://b/v1"], "top_logprobs": "5"},
    )
    assert isinstance(h.options, OpenAIOptions) and h.options.top_logprobs == 5
    assert h.options.base_url == ("http://a/v1", "http://b/v1") and hash(h)  # still hashable
    with pytest.raises(dataclasses.FrozenInstanceError):
        h.options.timeout_s = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError, match="read-only"):
        h.backend_options["top_logprobs"] = 3  # type: ignore[index]
    # the score cache's key sees what changes an answer, not where or how fast it is asked
    assert h.answer_options() == {"top_logprobs": 5}


def test_unknown_backend_is_a_config_error():
    with pytest.raises(ConfigError, match="transformer"):
        VerifierConfig(backend="transformer")


def test_criteria_list_becomes_a_hashable_tuple_and_thresholds_are_accepted():
    c = VerifierConfig(criteria=["correctness", "clarity"], threshold=0.0)
    assert c.criteria == ("correctness", "clarity")
    hash(c)  # frozen and hashable (it keys caches)
    assert VerifierConfig(threshold=1.0).threshold == 1.0
    assert VerifierConfig(threshold="runs/x/metrics.json").threshold.endswith(".json")


# ---- from_dict: unknown keys are errors, values are coerced to the field types -------------


@dataclass(frozen=True)
class _Inner:
    k: int = 1


@dataclass(frozen=True)
class _Outer:
    flag: bool = False
    n: int = 0
    x: float = 0.0
    name: str = ""
    maybe: int | None = None
    inner: _Inner = dataclasses.field(default_factory=_Inner)


def test_from_dict_coerces_strings_from_the_command_line():
    o = from_dict(
        _Outer, {"flag": "yes", "n": "3", "x": "1e-3", "name": 7, "maybe": "4", "inner": {"k": "2"}}
    )
    assert o == _Outer(flag=True, n=3, x=1e-3, name="7", maybe=4, inner=_Inner(k=2))
    assert from_dict(_Outer, {"flag": "false", "maybe": None}).flag is False
    assert from_dict(_Outer, None) == _Outer()


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (
            {"flg": True},
            r"unknown key\(s\) in the config \(_Outer\): 'flg' \(did you mean 'flag'\?\)",
        ),
        ({"flag": "maybe"}, r"flag: expected a boolean, got 'maybe'"),
        ({"n": "three"}, r"n: expected int, got 'three'"),
        ({"inner": {"kk": 1}}, r"'kk' \(did you mean 'k'\?\)"),
    ],
)
def test_from_dict_rejects_unknown_keys_and_uncoercible_values(data, match):
    with pytest.raises(ConfigError, match=match):
        from_dict(_Outer, data)


@pytest.mark.parametrize("value", [10.5, True, "10.5", float("nan")])
def test_a_non_integer_granularity_is_refused_not_truncated(value):
    """Issue 41: verifier.granularity=10.5 loaded as 10 (int(10.5)) and true as 1, with no word;
    a granularity that is not a whole number is now a ConfigError naming the key, from YAML or
    the command line (from_dict) and from the API (VerifierConfig(...))."""
    with pytest.raises(ConfigError, match=r"^verifier\.granularity: expected int"):
        from_dict(VerifierConfig, {"granularity": value}, prefix="verifier.")
    with pytest.raises(ConfigError, match=r"^verifier\.granularity must be an integer, got "):
        VerifierConfig(granularity=value)


def test_whole_numbers_still_load_as_ints_and_an_optional_int_is_refused_too():
    assert from_dict(VerifierConfig, {"granularity": 10.0}).granularity == 10  # YAML 10.0
    assert from_dict(VerifierConfig, {"granularity": "10"}).granularity == 10  # --set ...=10
    assert type(from_dict(VerifierConfig, {"granularity": 10.0}).granularity) is int
    with pytest.raises(ConfigError, match=r"^maybe: expected int, got 2\.5"):
        from_dict(_Outer, {"maybe": 2.5})  # int | None: refused, not passed on as 2.5
    with pytest.raises(ConfigError, match=r"^x: expected float, got True"):
        from_dict(_Outer, {"x": True})
    assert from_dict(_Outer, {"maybe": None, "x": 3}) == _Outer(x=3.0)


def test_from_dict_names_the_yaml_section_in_errors():
    with pytest.raises(ConfigError, match=r"in section 'verifier': 'granularty'"):
        from_dict(VerifierConfig, {"granularty": 5}, prefix="verifier.")
    with pytest.raises(ConfigError, match=r"verifier\.granularity: expected int"):
        from_dict(VerifierConfig, {"granularity": "many"}, prefix="verifier.")
    assert from_dict(VerifierConfig, {"granularity": "5"}).granularity == 5


# ---- YAML files and overrides -----------------------------------------------------------------


def test_every_shipped_config_has_a_valid_verifier_section():
    paths = sorted((REPO / "configs").glob("*.yaml"))
    assert len(paths) >= 5
    for path in paths:
        section = load_yaml(path).get("verifier")
        if section is not None:
            assert isinstance(
                from_dict(VerifierConfig, section, prefix="verifier."), VerifierConfig
            )


def test_load_yaml_errors_and_empty_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_yaml(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="top level must be a mapping, got list"):
        load_yaml(tmp_path / "list.yaml")
    (tmp_path / "empty.yaml").write_text("")
    assert load_yaml(tmp_path / "empty.yaml") == {}


def test_parse_override_types():
    assert parse_override("a.b=3") == (["a", "b"], 3)
    assert parse_override("a=0.5") == (["a"], 0.5)
    assert parse_override("a=1e-6") == (["a"], 1e-6)
    assert parse_override("a=[1, 2]") == (["a"], [1, 2])
    assert parse_override("a=null") == (["a"], None)
    assert parse_override("a=") == (["a"], "")
    assert parse_override("a=x=y") == (["a"], "x=y")  # split at the first '='
    for word in ("yes", "no", "on", "off", "No"):  # YAML 1.1 booleans stay strings
        assert parse_override(f"a={word}") == (["a"], word)
    assert parse_override("a=true") == (["a"], True)
    with pytest.raises(ConfigError, match="must look like key=value"):
        parse_override("training.max_steps")


def test_an_override_value_is_the_text_written_unless_it_is_yaml_flow_or_a_scalar():
    """F1: ``env.task="Goal: x"`` became the mapping ``{'Goal': 'x'}`` (YAML reads ``k: v`` as a
    block mapping and ``- x`` as a list), and the box describer showed the verifier its repr.
    A value is a mapping or list only when written in flow form (``{...}`` / ``[...]``); other
    text stays as written: a ``#`` is not a comment, ``10:30`` is not YAML 1.1's 630, and text
    YAML cannot read (``*x``, ``a: b: c``) is text, not a traceback."""
    for text in (
        "Move the point to the origin: both coordinates within 0.2 of 0.",
        "Reply with one sentence: The answer is <number>.",
        "- a list item, or a dash",
        "Goal: x: y",  # not valid YAML
        "*stars* matter",  # an undefined YAML alias
        "@home",
        "the goal # not a comment",
        "10:30",
    ):
        assert parse_override(f"env.task={text}") == (["env", "task"], text), text
    assert parse_override("env.task=  Goal: x  ") == (["env", "task"], "Goal: x")
    # flow forms, quotes and scalars are YAML still
    assert parse_override("a={b: 1, c: [x, y]}") == (["a"], {"b": 1, "c": ["x", "y"]})
    assert parse_override("a=[1, 2]") == (["a"], [1, 2])
    assert parse_override("a='Goal: x'") == (["a"], "Goal: x")
    assert parse_override('a="x # y"') == (["a"], "x # y")
    assert parse_override("a=7") == (["a"], 7)
    assert parse_override("a=null") == (["a"], None)
    assert parse_override("a='Hello' she said") == (["a"], "'Hello' she said")
    assert parse_override("a='k': v") == (["a"], "'k': v")
    # a value in flow form that YAML cannot read is an error naming the override and the fix
    for bad in ("a={b: 1", "a=[1, 2", "a=[optional] reach the goal"):
        with pytest.raises(ConfigError, match=r"^override 'a=.*': not valid YAML \(.*\); close"):
            parse_override(bad)


def test_a_text_field_refuses_a_mapping_or_a_list_instead_of_showing_its_repr():
    """F1: a mapping given to a text field (``env.task``, ``data.system_prompt``) was turned into
    its Python repr by ``str()``; now it is a one-line error naming the field and the fix."""
    from densereward.data import DataConfig
    from densereward.trainers.sac_config import EnvConfig

    with pytest.raises(ConfigError) as err:
        from_dict(EnvConfig, {"task": {"Goal": "reach"}}, prefix="env.")
    assert str(err.value) == (
        "env.task: expected text, got a mapping {'Goal': 'reach'}; put text that holds ': ' "
        "or starts with '- ' in quotes"
    )
    with pytest.raises(ConfigError, match=r"^data\.system_prompt: expected text, got a list"):
        from_dict(DataConfig, {"system_prompt": ["a", "b"]}, prefix="data.")
    assert from_dict(DataConfig, {"task": 5}, prefix="data.").task == "5"  # a number is text


def test_apply_overrides_nests_creates_and_refuses_to_descend_into_a_value():
    config = {"training": {"max_steps": 10}, "seed": 1}
    out = apply_overrides(config, ["training.max_steps=5", "verifier.granularity=10"])
    assert out is config
    assert config == {"training": {"max_steps": 5}, "verifier": {"granularity": 10}, "seed": 1}
    with pytest.raises(ConfigError, match="'seed' is not a section"):
        apply_overrides(config, ["seed.value=2"])


def test_check_sections_names_the_likely_fix():
    sections = {"training": lambda: ["learning_rate"], "verifier": lambda: ["granularity"]}
    check_sections({"training": {}, "verifier": {}}, sections)
    with pytest.raises(ConfigError) as err:
        check_sections({"trainng": {}, "granularity": 5}, sections)
    msg = str(err.value)
    assert "'trainng' (did you mean 'training'?)" in msg
    assert "'granularity' (did you mean 'verifier.granularity'?)" in msg
    assert "the sections are training, verifier" in msg


def test_check_sections_builds_field_lists_only_for_the_error():
    def boom():
        raise AssertionError("field list built for a valid config")

    check_sections({"training": {}}, {"training": boom})


# ---- resolve_threshold ------------------------------------------------------------------------


def test_resolve_threshold_fixed_auto_and_from_metrics_json(tmp_path):
    assert resolve_threshold("auto") == (None, "auto (Youden's J)")
    assert resolve_threshold(0) == (0.0, "fixed 0")
    assert resolve_threshold(0.25) == (0.25, "fixed 0.25")
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"threshold_calibration": {"threshold": 0.4321}}))
    value, source = resolve_threshold(str(path))
    assert value == 0.4321 and source == f"0.4321 from {path}"


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (None, "cannot read a calibrated threshold"),  # no file
        ("not json", "cannot read a calibrated threshold"),
        ({"threshold_calibration": {}}, "cannot read a calibrated threshold"),
        ({"threshold_calibration": {"threshold": None}}, r"not a number in \[0, 1\]"),
        ({"threshold_calibration": {"threshold": 1.2}}, r"not a number in \[0, 1\]"),
        ({"threshold_calibration": {"threshold": float("nan")}}, r"not a number in \[0, 1\]"),
    ],
)
def test_resolve_threshold_bad_metrics_json(tmp_path, content, match):
    path = tmp_path / "metrics.json"
    if content is not None:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(ConfigError, match=match):
        resolve_threshold(str(path))


def test_resolve_threshold_out_of_range_number():
    with pytest.raises(ConfigError, match=r"threshold must be in \[0, 1\], got -0.1"):
        resolve_threshold(-0.1)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("verifier:\n  granularity: [20\n", r"not valid YAML at line 3, column 1"),
        (
            "verifier:\n\tgranularity: 20\n",
            r"not valid YAML at line 2, column 1: found character '\\t'",
        ),
    ],
)
def test_a_yaml_syntax_error_is_a_config_error_naming_the_file_and_line(tmp_path, text, match):
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as info:
        load_yaml(path)
    assert str(path) in str(info.value)


def test_a_section_that_is_not_a_mapping_and_a_nested_typo_name_their_yaml_path():
    with pytest.raises(ConfigError, match=r"section 'verifier' must be a mapping.*int 3"):
        from_dict(VerifierConfig, 3, prefix="verifier.")
    with pytest.raises(
        ConfigError, match=r"in section 'verifier.frames': 'max_frame' \(did you mean 'max_frames'"
    ):
        from_dict(VerifierConfig, {"frames": {"max_frame": 4}}, prefix="verifier.")


def test_switching_the_backend_drops_the_files_options_the_new_one_does_not_take(caplog):
    """Issue 41 item 6e: a GRPO file's transformers options (device, dtype) made every
    ``verifier.backend=openai`` override fail; they are dropped with one warning naming them.
    Options an override sets are kept (and refused if the backend does not take them)."""
    import copy

    file = {
        "verifier": {
            "backend": "transformers",
            "model": None,
            "backend_options": {"device": "cpu", "dtype": "float32"},
        }
    }
    with caplog.at_level("WARNING", logger="densereward.config"):
        config = apply_overrides(
            copy.deepcopy(file),
            ["verifier.backend=openai", "verifier.backend_options.base_url=http://h/v1"],
        )
    assert config["verifier"]["backend_options"] == {"base_url": "http://h/v1"}
    assert VerifierConfig(**config["verifier"]).options.base_url == "http://h/v1"
    assert [r.getMessage() for r in caplog.records] == [
        "verifier.backend=openai: dropped verifier.backend_options device, dtype of the config "
        "(options of 'transformers' that 'openai' does not take)"
    ]
    caplog.clear()
    # the same backend again: nothing dropped; back from openai: its URL goes
    same = apply_overrides(copy.deepcopy(file), ["verifier.backend=transformers"])
    assert same == file and not caplog.records
    back = apply_overrides(copy.deepcopy(config), ["verifier.backend=transformers"])
    assert back["verifier"]["backend_options"] == {}
    # an option the user typed stays, so the config still refuses it by name
    typed = apply_overrides(
        copy.deepcopy(file), ["verifier.backend_options.device=cuda", "verifier.backend=openai"]
    )
    assert typed["verifier"]["backend_options"] == {"device": "cuda"}
    with pytest.raises(ConfigError, match="verifier.backend_options.device"):
        VerifierConfig(**typed["verifier"])
    # an unknown backend keeps everything: the config names it with a did-you-mean
    assert apply_overrides(copy.deepcopy(file), ["verifier.backend=opnai"])["verifier"][
        "backend_options"
    ] == {"device": "cpu", "dtype": "float32"}
