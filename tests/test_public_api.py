"""The root package (issue 16 item 8): what TRL and SB3 users come for is importable from
``densereward``, loaded on first use, so the core install needs neither training stack."""

from __future__ import annotations

import importlib
import json

import pytest
from test_layering import _run_blocked

import densereward

# what TRL and SB3 users import from the root, and the module each name lives in
HOMES = {
    "RewardConfig": "densereward.rewards",
    "build_reward_funcs": "densereward.rewards",
    "MathCorrectnessReward": "densereward.rewards",
    "VerifierReward": "densereward.rewards",
    "AsyncVerifierReward": "densereward.rewards",
    "GroupVerifierReward": "densereward.rewards",
    "AsyncGroupVerifierReward": "densereward.rewards",
    "RewardQualityTracker": "densereward.rewards",
    "RewardQualityCallback": "densereward.rewards.trl_callback",
    "ProgressRewardConfig": "densereward.progress_reward",
    "verifier_progress_fn": "densereward.progress_reward",
    "VerifierProgressReward": "densereward.wrappers",
    "SparseSuccessReward": "densereward.wrappers",
    "VecVerifierProgressReward": "densereward.vec_env",
}


def test_root_names_are_the_objects_of_their_home_modules():
    for name, module in HOMES.items():
        assert getattr(densereward, name) is getattr(importlib.import_module(module), name), name
    # with every extra installed here, all of them are public: in __all__ and dir()
    assert set(HOMES) <= set(densereward.__all__) and set(HOMES) <= set(dir(densereward))
    assert len(densereward.__all__) == len(set(densereward.__all__))
    assert not [n for n in densereward.__all__ if not hasattr(densereward, n)]
    with pytest.raises(AttributeError, match="has no attribute 'VerifierRewards'"):
        densereward.VerifierRewards  # noqa: B018


# the verbs and config classes of the verifier, eagerly imported (issue 29 item 4)
CORE = {
    "Verifier",
    "VerifierConfig",
    "VerifierFactory",
    "ScoreScale",
    "ScoreResult",
    "PairwiseResult",
    "RankResult",
    "default_model_path",
}


def test_the_root_exports_what_trl_and_sb3_users_come_for_and_nothing_else():
    """``__all__`` is the verifier's verbs and configs plus the TRL / SB3 names: no error class,
    no backend internals. The names the root used to export still resolve, from their home
    module, with a DeprecationWarning that names it."""
    assert set(densereward.__all__) == CORE | set(HOMES)
    for name in densereward._MOVED:
        assert name not in densereward.__all__ and name not in dir(densereward), name
        home = importlib.import_module(densereward._MOVED[name])
        with pytest.warns(DeprecationWarning, match=f"import it from {home.__name__}"):
            assert getattr(densereward, name) is getattr(home, name), name
    errors = importlib.import_module("densereward.errors")
    assert {"ConfigError", "DataError", "DenseRewardError"} <= set(densereward._MOVED)
    assert densereward._MOVED["ConfigError"] == errors.__name__
    with pytest.warns(DeprecationWarning):
        from densereward import ConfigError  # the old spelling keeps working
    assert ConfigError is errors.ConfigError


_CORE_ONLY = """
import json
import densereward
from densereward import Verifier, VerifierConfig
from densereward import metrics
STACKS = ('trl', 'stable_baselines3', 'gymnasium', 'transformers.trainer',
          'transformers.trainer_callback')
report = {
    "loaded": sorted(m for m in STACKS if m in sys.modules),
    "auroc": metrics.auroc([0.9, 0.2, 0.7, 0.4], [1, 0, 1, 0]),
    "verifier": densereward.Verifier is Verifier and densereward.metrics is metrics,
    "granularity": VerifierConfig(granularity=5).granularity,
    "all": sorted(densereward.__all__),
    "reward_config": densereward.RewardConfig().type,
    "progress_config": densereward.ProgressRewardConfig().mode,
}
for name in ("VerifierProgressReward", "VecVerifierProgressReward", "SparseSuccessReward"):
    try:
        getattr(densereward, name)
    except ImportError as err:
        report[name] = str(err)
print(json.dumps(report))
"""


def test_import_densereward_without_trl_sb3_or_gymnasium():
    """A subprocess that cannot import trl, stable_baselines3 or gymnasium: the core works,
    the reward functions and configs load, and the Gymnasium/SB3 wrappers raise an
    ImportError that names the extra."""
    out = _run_blocked(["trl", "stable_baselines3", "gymnasium"], _CORE_ONLY)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    # after import densereward, Verifier, VerifierConfig and metrics: no training stack, not
    # even transformers' trainer (the TRL callback's base class)
    assert report["loaded"] == []
    assert report["auroc"] == 1.0 and report["verifier"] is True
    assert report["granularity"] == 5
    assert report["reward_config"] == "gated" and report["progress_config"] == "shaping"
    # names whose stack is missing are left out of __all__, so `from densereward import *`
    # works on the core install (not run here: it loads every other name, ~30 s)
    assert "VerifierProgressReward" not in report["all"] and "RewardConfig" in report["all"]
    for name in ("VerifierProgressReward", "VecVerifierProgressReward", "SparseSuccessReward"):
        msg = report[name]
        assert f"densereward.{name} needs the 'robotics' extra" in msg, msg
        assert "pip install 'densereward[robotics]'" in msg
