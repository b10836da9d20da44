"""ScoreScale: the G ordered score tokens, their values phi, spellings and validation."""

from __future__ import annotations

import numpy as np
import pytest

from densereward import ScoreScale
from densereward.errors import ConfigError


def test_letters_are_worst_first_with_values_0_to_g_minus_1():
    s = ScoreScale.letters(4)
    assert s.tokens == ("A", "B", "C", "D") and s.granularity == 4
    assert s.values == (0.0, 1.0, 2.0, 3.0)
    np.testing.assert_array_equal(s.phi, [0.0, 1.0, 2.0, 3.0])
    assert s.phi.dtype == np.float64 and s.phi.shape == (4,)
    assert ScoreScale.letters().granularity == 20 and ScoreScale.letters().tokens[-1] == "T"
    assert ScoreScale.letters(26).tokens[-1] == "Z"


@pytest.mark.parametrize("g", [0, 1, 27, 100])
def test_letters_outside_2_to_26_name_the_range(g):
    with pytest.raises(ConfigError, match=r"\[2, 26\]"):
        ScoreScale.letters(g)


def test_default_spellings_are_the_token_and_its_space_prefixed_form():
    s = ScoreScale.letters(3)
    assert s.spellings == (("A", " A"), ("B", " B"), ("C", " C"))
    assert s.all_spellings() == ("A", " A", "B", " B", "C", " C")


def test_normalize_maps_phi_min_max_to_0_1_with_nonuniform_values():
    s = ScoreScale(tokens=("bad", "ok", "good"), values=(-1.0, 0.0, 3.0))
    assert s.normalize(-1.0) == 0.0 and s.normalize(3.0) == 1.0
    assert s.normalize(0.0) == pytest.approx(0.25)  # not 0.5: phi is not uniform
    # an expectation under a distribution: (0.5 * -1 + 0.5 * 3 + 1) / 4
    assert s.normalize(float(np.array([0.5, 0.0, 0.5]) @ s.phi)) == pytest.approx(0.5)


def test_describe_names_worst_and_best():
    assert ScoreScale.letters(3).describe() == "A (worst) to C (best), 3 levels in order ABC"
    words = ScoreScale(tokens=("no", "yes"))
    assert words.describe() == "no (worst) to yes (best), 2 levels in order no, yes"


def test_custom_spellings_are_kept():
    s = ScoreScale(tokens=("A", "B"), spellings=(("A", "a"), ("B", " B", "b")))
    assert s.all_spellings() == ("A", "a", "B", " B", "b")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tokens": ("A",)}, "at least 2 tokens"),
        ({"tokens": ()}, "at least 2 tokens"),
        ({"tokens": ("A", "A")}, "distinct"),
        ({"tokens": ("A", "B"), "values": (0.0, 1.0, 2.0)}, "2 score tokens but 3 values"),
        ({"tokens": ("A", "B"), "values": (1.0, 1.0)}, "strictly increasing"),
        ({"tokens": ("A", "B", "C"), "values": (0.0, 2.0, 1.0)}, "strictly increasing"),
        ({"tokens": ("A", "B"), "spellings": (("A",),)}, "one tuple per level"),
        ({"tokens": ("A", "B"), "spellings": ((" A", "A"), ("B",))}, "canonical token first"),
        ({"tokens": ("A", "B"), "spellings": (("A", "x"), ("B", "x"))}, "two levels"),
    ],
)
def test_invalid_scales_are_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        ScoreScale(**kwargs)


def test_scales_are_frozen_and_compare_by_value():
    s = ScoreScale.letters(3)
    assert s == ScoreScale(tokens=("A", "B", "C"))
    assert s != ScoreScale(tokens=("A", "B", "C"), values=(0.0, 1.0, 4.0))
    assert hash(s) == hash(ScoreScale.letters(3))
    with pytest.raises(AttributeError):
        s.tokens = ("X", "Y")  # type: ignore[misc]
