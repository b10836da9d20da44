"""Rewards, progress functions and wrappers survive pickling (issue 29 item 3).

TRL's async GRPO rollout worker forwards the reward functions to a spawned child process
(``trl/rewards/accuracy_rewards.py``: rewards are callable classes "so the reward stays
picklable"), and SB3's ``SubprocVecEnv`` pickles the environment factories with the progress
function they hold. Each test pickles an object that has already worked (built verifier,
started Math-Verify worker, an episode under way), unpickles it and checks that the copy
computes what the original computes.
"""

from __future__ import annotations

import asyncio
import functools
import pickle
import warnings

import numpy as np
import pytest
from servers import scripted_verifier
from test_verifier import make
from test_wrappers import distance_progress

from densereward import envs
from densereward.rewards import (
    MathChecker,
    MathCorrectnessReward,
    RewardConfig,
    RewardQualityTracker,
    VerifierReward,
    build_reward_funcs,
)
from densereward.verifier import VerifierFactory
from densereward.wrappers import ProgressRewardConfig, verifier_progress_fn


def round_trip(obj):
    return pickle.loads(pickle.dumps(obj))


def batch(n_groups: int = 2):
    """A GRPO batch of ``n_groups`` prompts x 2 completions with the dataset columns."""
    rows = [
        ("What is 7+5?", "12", [r"quality=0.9 so \boxed{12}", r"quality=0.2 so \boxed{13}"]),
        ("What is 2*3?", "6", [r"quality=0.4 so \boxed{6}", r"quality=0.7 so \boxed{5}"]),
    ][:n_groups]
    prompts, completions, problems, answers = [], [], [], []
    for problem, answer, texts in rows:
        for text in texts:
            prompts.append([{"role": "user", "content": problem}])
            completions.append([{"role": "assistant", "content": text}])
            problems.append(problem)
            answers.append(answer)
    return {"prompts": prompts, "completions": completions, "problem": problems, "answer": answers}


def call(fn, **kwargs):
    out = fn(**kwargs)
    return asyncio.run(out) if asyncio.iscoroutine(out) else out


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", ["sparse", "dense", "group", "gated"])
def test_every_reward_function_computes_the_same_after_a_round_trip(kind, use_async):
    """build_reward_funcs' outputs (MathCorrectnessReward, VerifierReward, VerifierMonitor,
    GroupVerifierReward, their async forms, the tracker they share) on a verifier whose backend
    was given: the copy holds the recipe, builds its verifier at its first call and returns the
    same rewards."""
    verifier, _ = make(granularity=10)
    checker = MathChecker(executor="inline")
    funcs, _ = build_reward_funcs(
        RewardConfig(type=kind, use_async=use_async, reference_prompt="anchored"),
        verifier,  # shows "quality="
        tracker=RewardQualityTracker(threshold=0.5),
        checker=checker,
        num_generations=2,
    )
    kw = batch()
    before = [call(f, **kw) for f in funcs]
    copies = [round_trip(f) for f in funcs]
    for f, c in zip(funcs, copies, strict=True):
        assert type(c) is type(f) and c.__name__ == f.__name__
    after = [call(c, **kw) for c in copies]
    assert after == before
    # (gated: each correctness stratum of these groups has one member, so the judge ties)
    assert any(v is not None and 0 < v < 1 for vals in before for v in vals) or kind in (
        "sparse",
        "gated",
    )
    tracked = [c.tracker for c in copies if getattr(c, "tracker", None) is not None]
    assert all(t.records for t in tracked)  # the copy's tracker (and its new lock) works


def test_the_math_checker_restarts_its_worker_process_after_a_round_trip():
    """A MathChecker with a running worker process pickles without it; the copy starts its own."""
    checker = MathChecker(timeout_s=60)
    reward = MathCorrectnessReward(checker=checker)
    kw = batch(1)
    before = reward(**kw)
    assert checker._proc is not None and before == [1.0, 0.0]
    copy = round_trip(reward)
    assert copy.checker._proc is None
    assert copy(**kw) == before  # the verdicts cached so far travel with it
    fresh = batch(2)  # a second group, not checked yet: the copy's own worker starts
    assert copy(**fresh) == reward(**fresh) == [1.0, 0.0, 1.0, 0.0]
    assert copy.checker._proc is not None
    assert copy.checker._proc.pid != checker._proc.pid
    copy.checker.close()
    checker.close()


def test_a_reward_rebuilds_its_http_verifier_after_a_round_trip(server):
    """The verifier built from its config (the openai backend at a loopback server) is shipped as
    its VerifierFactory; the copy builds its own client at its first call and scores the same."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*cannot tokenize.*")
        reward = VerifierReward(
            scripted_verifier(server.base_url, granularity=20),
            reference_guided=False,
            injection_penalty=None,
        )
        kw = batch()
        before = reward(**kw)
        n_requests = len(server.chat_requests())
        copy = round_trip(reward)
        assert isinstance(copy._verifier, VerifierFactory)  # not built until the first call
        after = copy(**kw)
    assert after == before and all(v is not None for v in after)
    assert copy.verifier is not reward.verifier
    assert copy.verifier.backend is not reward.verifier.backend
    assert len(server.chat_requests()) > n_requests  # the copy asked the server itself
    copy.close()
    reward.close()


def test_a_progress_function_computes_the_same_after_a_round_trip():
    verifier, _ = make(granularity=10)
    fn = verifier_progress_fn(verifier)
    tasks, trajs = ["t", "t", "t"], ["quality=0.1", "quality=0.6", "no score here"]
    before = fn(tasks, trajs)
    copy = round_trip(fn)
    assert copy(tasks, trajs) == before and before[2] is None and before[1] is not None
    assert copy.last_reasons == fn.last_reasons and copy.last_reasons[2]
    # a factory is accepted too, and built at the first call
    lazy = verifier_progress_fn(VerifierFactory(verifier.config, backend=verifier.backend))
    assert round_trip(lazy)(tasks, trajs) == before


def reach_actions(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, size=4).astype(np.float32) for _ in range(n)]


PROGRESS = ProgressRewardConfig(mode="shaping", score_every=2)


def test_the_gymnasium_wrapper_continues_after_a_round_trip():
    """VerifierProgressReward on FetchReach, pickled mid-episode. Gymnasium-Robotics pickles its
    environments as their constructor arguments (``EzPickle``), so the copy starts afresh: reset
    with the same seed, the copy and the original give the same rewards and observations."""
    env = envs.make_env(
        "FetchReach-v4",
        reward="verifier",
        progress_fn=distance_progress,
        reward_config=PROGRESS,
        gamma=0.9,
        monitor=False,
    )
    env.reset(seed=0)
    for a in reach_actions(3):
        env.step(a)
    copy = round_trip(env)
    assert len(copy.core.cache) == len(env.core.cache) > 0  # the scores so far travel with it
    env.reset(seed=1)
    copy.reset(seed=1)
    rewards = []
    for a in reach_actions(4, seed=1):
        o1, r1, *_ = env.step(a)
        o2, r2, *_ = copy.step(a)
        rewards.append(r1)
        assert r1 == r2
        np.testing.assert_array_equal(o1["observation"], o2["observation"])
    assert any(r != 0 for r in rewards)  # the progress moved: the shaping is not all zero
    assert copy.verifier_stats.n_calls == env.verifier_stats.n_calls
    env.close()
    copy.close()


def test_the_vec_env_wrapper_continues_after_a_round_trip():
    venv = envs.make_vec_env(
        "FetchReach-v4",
        2,
        seed=0,
        reward="verifier",
        progress_fn=distance_progress,
        reward_config=PROGRESS,
        gamma=0.9,
    ).venv  # VecVerifierProgressReward(DummyVecEnv); SB3's VecMonitor outside is not ours
    venv.reset()
    for a in reach_actions(3):
        venv.step(np.stack([a, -a]))
    copy = round_trip(venv)  # the environments start afresh (EzPickle): reset both alike
    for v in (venv, copy):
        v.seed(1)
        v.reset()
    for a in reach_actions(4, seed=1):
        _, r1, *_ = venv.step(np.stack([a, -a]))
        _, r2, *_ = copy.step(np.stack([a, -a]))
        np.testing.assert_array_equal(r1, r2)
        assert np.any(r1 != 0)
    assert copy.num_envs == 2 and copy.core.stats.n_calls == venv.core.stats.n_calls
    venv.close()
    copy.close()


@pytest.mark.slow
def test_subproc_vec_env_runs_the_verifier_progress_wrapper(server):
    """SB3's SubprocVecEnv (start method spawn) pickles each environment factory with the
    progress function; each worker builds its own openai verifier from the recipe and the
    rewards equal those of the same environments stepped in-process."""
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*cannot tokenize.*")
        progress_fn = verifier_progress_fn(scripted_verifier(server.base_url, granularity=20))
    make_one = functools.partial(
        envs.make_env,
        "FetchReach-v4",
        reward="verifier",
        progress_fn=progress_fn,
        reward_config=PROGRESS,
        gamma=0.9,
        monitor=False,
    )
    actions = reach_actions(4)
    rewards = {}
    for name, cls, kw in [
        ("dummy", DummyVecEnv, {}),
        ("subproc", SubprocVecEnv, {"start_method": "spawn"}),
    ]:
        venv = cls([make_one, make_one], **kw)
        venv.seed(0)
        venv.reset()
        n_before = len(server.chat_requests())
        rewards[name] = [venv.step(np.stack([a, a]))[1] for a in actions]
        infos = venv.step(np.stack([actions[0]] * 2))[3]
        assert all("true_reward" in i for i in infos), name
        assert len(server.chat_requests()) > n_before, name  # the verifier was asked
        venv.close()
    # DummyVecEnv keeps rewards in float32, SubprocVecEnv stacks the workers' Python floats
    np.testing.assert_allclose(rewards["subproc"], rewards["dummy"], rtol=1e-6)
    assert np.all(np.isfinite(rewards["subproc"]))


@pytest.mark.slow
def test_a_reward_on_the_embedded_model_scores_the_same_after_a_round_trip():
    """One real round trip: VerifierReward on the embedded SmolLM2-135M (transformers); the copy
    loads the model again from the recipe and gives the same expected scores."""
    from densereward import Verifier, VerifierConfig

    reward = VerifierReward(
        Verifier(VerifierConfig(granularity=10)), reference_guided=False, injection_penalty=None
    )
    kw = batch(1)
    before = reward(**kw)
    copy = round_trip(reward)
    after = copy(**kw)
    assert copy.verifier.backend is not reward.verifier.backend
    assert all(v is not None for v in before)
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-6)
    copy.close()
    reward.close()


@pytest.mark.slow
def test_rewards_score_in_a_spawned_child_as_trls_async_rollout_worker_runs_them(server):
    """Issue 30 item 3 / 29 item 3: ``trl.experimental.async_grpo``'s rollout worker pickles
    ``reward_funcs`` into a process started with the ``spawn`` context and calls them there.
    The gated reward's function (Math-Verify's verdict and the judge on a served verifier in
    one) is submitted to such a child and return what they return in the parent.
    (The trainer itself cannot run here: it streams weights to its vLLM server over NCCL.)"""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*cannot tokenize.*")
        verifier = scripted_verifier(server.base_url, granularity=20)
        funcs, _ = build_reward_funcs(
            RewardConfig(type="gated", track=False),
            verifier,
            num_generations=2,
            checker=MathChecker(executor="inline"),
        )
        kw = batch()
        want = [f(**kw) for f in funcs]
        with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
            got = [pool.submit(f, **kw).result(timeout=300) for f in funcs]
    assert got == want and all(v is not None for v in want[0])
    verifier.close()
