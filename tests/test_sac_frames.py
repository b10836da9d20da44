"""The SAC path reads camera frames (issue 31 item 2): rendered FetchReach frames reach the
progress function (state frame in shaping, the recent scored frames in the trajectory modes,
the last state's frame through an auto-reset), the cache keys on the frames, frames render at
scored steps only, a text-only verifier is refused at start, and evaluation never renders."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

# the tiny VLM's builder and the scripted OpenAI-compatible server that checks the image_url
# parts and answers with that model's log-probabilities
import test_frames

from densereward import envs
from densereward.envs.describers import FetchDescriber
from densereward.errors import ConfigError
from densereward.progress_fn import check_images, frames_digest
from densereward.trainers import sac
from densereward.trainers.sac_envs import build_envs
from densereward.vec_env import TerminalFrame, VecVerifierProgressReward
from densereward.wrappers import ProgressRewardConfig, VerifierProgressReward

REPO = Path(__file__).resolve().parents[1]


class FrameReader:
    """A progress function that reads frames: progress = the share of red-dominant pixels
    (FetchReach draws its goal as a red sphere) scaled into [0, 1]; records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[str], list[list[np.ndarray]]]] = []

    def __call__(self, tasks, trajectories, images):
        self.calls.append((list(tasks), list(trajectories), [list(f) for f in images]))
        out = []
        for frames in images:
            f = frames[-1].astype(np.int16)
            red = (f[..., 0] > f[..., 1] + 60) & (f[..., 0] > f[..., 2] + 60)
            out.append(float(min(1.0, 50.0 * red.mean())))
        return out


class CountRenders(__import__("gymnasium").Wrapper):
    """Counts ``render()`` calls of the environment inside it."""

    def __init__(self, env):
        super().__init__(env)
        self.n_renders = 0

    def render(self):
        self.n_renders += 1
        return self.env.render()


def fetch(size: int = 64):
    return envs.make_env(
        "FetchReach-v4", monitor=False, render_mode="rgb_array", width=size, height=size
    )


@pytest.mark.slow
@pytest.mark.parametrize("timing", ["online", "episode_end"])
def test_frames_of_the_scored_states_reach_the_reads(timing):
    """Trajectory mode: each read gets the frames of the scored states up to it (oldest
    first, at most max_frames), also when all reads happen at the episode's end; frames are
    rendered at the scored steps only (s_0, 10, 20, ..., 50: 6 renders for 50 steps)."""
    reader = FrameReader()
    inner = CountRenders(fetch())
    env = VerifierProgressReward(
        inner,
        reader,
        FetchDescriber("reach"),
        ProgressRewardConfig(
            mode="progress", timing=timing, render_frames=True, max_frames=3, score_every=10
        ),
        gamma=0.99,
    )
    env.reset(seed=0)
    for _ in range(50):
        env.step(env.action_space.sample())
    env.close()
    assert inner.n_renders == 6 == env.verifier_stats.n_frames
    reads = [frames for call in reader.calls for frames in call[2]]
    assert [len(f) for f in reads] == [1, 2, 3, 3, 3, 3]
    assert all(f.dtype == np.uint8 and f.shape == (64, 64, 3) for r in reads for f in r)
    # the read of step 20 sees s_0, s_10, s_20; the read of step 30 drops s_0
    assert frames_digest(reads[2][1:]) == frames_digest(reads[3][:2])
    assert len({frames_digest(r[-1:]) for r in reads}) == 6  # a new state in each read
    texts = [t for call in reader.calls for t in call[1]]
    assert all("cm" in t for t in texts)  # the describer's text beside the frames


@pytest.mark.slow
def test_the_cache_keys_on_the_frames_and_frames_only_drops_the_text():
    """Shaping reads the state's own frame; the same start state (same seed) renders the same
    pixels, so its second read is a cache hit, while other frames are read again."""
    reader = FrameReader()
    env = VerifierProgressReward(
        fetch(),
        reader,
        FetchDescriber("reach"),
        ProgressRewardConfig(render_frames=True, frames_with_text=False, score_every=5),
        gamma=0.99,
    )
    for _ in range(2):
        env.reset(seed=3)
        for _ in range(5):
            env.step(env.action_space.sample())
    env.close()
    stats = env.verifier_stats
    # reads: s_0, s_5 per episode; the second s_0 is the same frame and text: a hit
    assert stats.n_queries == 4 and stats.n_cache_hits == 1 and len(reader.calls) == 3
    assert all(len(frames) == 1 for call in reader.calls for frames in call[2])
    assert {t for call in reader.calls for t in call[1]} == {""}  # frames only: no text


@pytest.mark.slow
def test_the_vec_wrapper_reads_the_last_state_through_an_auto_reset():
    """DummyVecEnv resets an environment in the step that ends its episode; the last state's
    frame comes from TerminalFrame (installed by the wrapper), not the next episode's s_0."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    reader = FrameReader()
    venv = DummyVecEnv([fetch, fetch])
    venv.seed(0)
    wrapped = VecVerifierProgressReward(
        venv,
        reader,
        FetchDescriber("reach"),
        ProgressRewardConfig(render_frames=True, score_every=25),
        gamma=0.99,
    )
    assert all(isinstance(e, TerminalFrame) for e in venv.envs)
    wrapped.reset()
    for _ in range(50):
        _, _, dones, infos = wrapped.step(np.stack([venv.action_space.sample()] * 2))
    wrapped.close()
    assert dones.all() and all("terminal_frame" not in i for i in infos)
    assert wrapped.verifier_stats.n_frames == 8 and wrapped.verifier_stats.render_seconds > 0
    # calls: s_0 (reset), step 25, step 50 (last states), s_0 of the next episodes
    assert [len(c[2]) for c in reader.calls] == [2, 2, 2, 2]
    s25, last, s0_next = (reader.calls[k][2][0][0] for k in (1, 2, 3))
    assert frames_digest([last]) not in {frames_digest([s25]), frames_digest([s0_next])}


def test_a_text_only_verifier_is_refused_at_start_naming_its_backend():
    class TextOnly:
        class config:  # a VerifierConfig's two fields
            backend, model = "transformers", "HuggingFaceTB/SmolLM2-135M-Instruct"

        def progress_batch(self, *, tasks, trajectories, criteria=None):
            raise AssertionError("not called")

    with pytest.raises(ConfigError, match=r"backend 'transformers' \(model .*SmolLM2.*images"):
        check_images(TextOnly())
    from densereward.wrappers import verifier_progress_fn

    with pytest.raises(ConfigError, match="cannot read frames"):
        VerifierProgressReward(
            fetch(),
            verifier_progress_fn(TextOnly()),
            FetchDescriber("reach"),
            ProgressRewardConfig(render_frames=True),
            gamma=0.99,
        )


@pytest.mark.slow
def test_the_embedded_text_verifier_is_refused_before_any_frame(default_model_dir):
    """A real text-only verifier (transformers backend, SmolLM2-135M) with render_frames: the
    wrapper refuses it at construction, naming backend and model, before anything renders."""
    from densereward.config import VerifierConfig
    from densereward.verifier import Verifier
    from densereward.wrappers import verifier_progress_fn

    inner = CountRenders(fetch())
    refused = pytest.raises(ConfigError, match=r"backend 'transformers' \(model .*SmolLM2")
    with Verifier(VerifierConfig(model=str(default_model_dir))) as verifier, refused:
        VerifierProgressReward(
            inner,
            verifier_progress_fn(verifier),
            FetchDescriber("reach"),
            ProgressRewardConfig(render_frames=True),
            gamma=0.99,
        )
    inner.close()
    assert inner.n_renders == 0


def test_the_evaluation_env_never_renders_for_the_verifier():
    """Training environments render rgb_array frames (TerminalFrame inside) for the verifier;
    the evaluation environment is made without render_mode and without the verifier."""
    cfg = sac.parse_config(
        {
            "env": {"id": "FetchReach-v4", "reward": "verifier", "n_envs": 2, "render_size": 64},
            "reward": {"render_frames": True},
            "training": {"eval_every": 100},
        }
    )
    venv, eval_venv = build_envs(cfg, progress_fn=FrameReader(), gamma=0.99, monitor_dir=None)
    try:
        assert isinstance(venv.venv, VecVerifierProgressReward)
        assert venv.venv.venv.render_mode == "rgb_array"
        assert venv.venv.venv.get_attr("width") == [64, 64]
        assert all(isinstance(e, TerminalFrame) for e in venv.venv.venv.envs)
        inner = eval_venv.venv  # VecMonitor(DummyVecEnv)
        assert type(inner).__name__ == "DummyVecEnv" and inner.render_mode is None
        assert inner.get_attr("render_mode") == [None, None]
        assert not any(isinstance(e, TerminalFrame) for e in inner.envs)
    finally:
        venv.close()
        eval_venv.close()


def test_render_size_is_bounded():
    with pytest.raises(ConfigError, match="env.render_size"):
        sac.parse_config({"env": {"render_size": 8}})


_SAC_ON_FRAMES = """
import sys, time, numpy as np
from stable_baselines3 import SAC
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor
from densereward import envs
from densereward.envs.describers import FetchDescriber
from densereward.vec_env import VecVerifierProgressReward
from densereward.wrappers import ProgressRewardConfig

def brightness(tasks, trajectories, images):
    return [float(f[-1].mean() / 255.0) for f in images]

def fetch():
    return envs.make_env("FetchReach-v4", reward="sparse", monitor=False, render_mode="rgb_array",
                         width=48, height=48)

venv = DummyVecEnv([fetch, fetch])
wrapped = VecVerifierProgressReward(venv, brightness, FetchDescriber("reach"),
                                    ProgressRewardConfig(render_frames=True, score_every=10), gamma=0.99)
model = SAC("MultiInputPolicy", VecMonitor(wrapped), learning_starts=100, batch_size=32, seed=0)
t0 = time.perf_counter()
model.learn(200)
print("steps", model.num_timesteps, "reads", wrapped.verifier_stats.n_queries, "triton", "triton" in sys.modules)
print("seconds per step", (time.perf_counter() - t0) / 200)
"""


@pytest.mark.slow
def test_sac_trains_on_rendered_frames_in_a_fresh_process():
    """SB3's SAC loads triton (through torch) at its first gradient step; after an offscreen
    frame was rendered with Mesa's llvmpipe that killed the process (SIGSEGV) until the
    wrapper loaded triton before rendering (progress_fn.load_triton_before_gl)."""
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _SAC_ON_FRAMES], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    # 200 steps over 2 envs = 2 episodes each: s_0, 10, ..., 50 per episode, + 2 s_0 at the end
    assert "steps 200 reads 26 triton True" in done.stdout, done.stdout


# ---------------------------------------------------------------------------------------------
# SAC with the tiny random-weight Qwen2-VL reading the frames: in process and over HTTP
# ---------------------------------------------------------------------------------------------

VLM_FRAMES = {"max_frames": 2, "max_side": 56}
SAC_STEPS = 300


@pytest.fixture(scope="module")
def tiny_vlm() -> Path:
    """The tiny random-weight Qwen2-VL (scripts/qwen2vl_random.py; ~10 s once per machine)."""
    if not (test_frames.TOKENIZER / "tokenizer.json").is_file():
        pytest.skip(f"the Qwen3 tokenizer is not at {test_frames.TOKENIZER}")
    return test_frames._builder().build()


def _frames_run_config(verifier: dict, *, frames: bool) -> dict:
    """configs/sac_fetchreach_frames.yaml made small: 300 steps, 56x56 frames, a tiny SAC."""
    from densereward.config import load_yaml

    config = load_yaml(REPO / "configs" / "sac_fetchreach_frames.yaml")
    config["env"]["render_size"] = 56
    config["reward"]["render_frames"] = frames
    config["verifier"] = {**verifier, "frames": VLM_FRAMES, "threshold": "auto"}
    config["sac"].update(
        learning_starts=100, batch_size=32, buffer_size=1000, policy_kwargs={"net_arch": [32, 32]}
    )
    config["training"].update(
        total_timesteps=SAC_STEPS,
        eval_every=SAC_STEPS,
        eval_episodes=2,
        checkpoint_every=0,
        log_interval=1,
        curve_every=100,
        seed=0,
    )
    config["wandb"] = {"enabled": False}
    return config


def _check_run(summary: dict, label: str, *, frames: bool) -> float:
    """The run trained SAC_STEPS steps with every progress read scored; returns s/step."""
    stats = summary["verifier_stats"]
    # 300 steps over 2 envs = 3 episodes each: s_0, 10, 20, ..., 50 (6 reads) + 2 s_0 at the end
    assert summary["env_steps"] == SAC_STEPS and stats["n_queries"] == 38, stats
    assert stats["n_frames"] == (38 if frames else 0)  # one rendered frame per read, no more
    assert stats["n_scored"] + stats["n_cache_hits"] == 38 and stats["n_abstained"] == 0, stats
    assert [p["step"] for p in summary["curve"]] == [0, SAC_STEPS]  # evaluation ran
    per_step = summary["seconds"] / summary["env_steps"]
    print(
        f"\nSAC {label}: {per_step:.3f} s/step ({summary['seconds']:.1f} s for {SAC_STEPS} "
        f"steps), verifier {stats['seconds']:.1f} s in {stats['n_calls']} calls "
        f"({stats['seconds'] / max(stats['n_scored'], 1):.3f} s/read), rendering "
        f"{stats['render_seconds']:.1f} s for {stats['n_frames']} frames"
    )
    return per_step


@pytest.mark.slow
@pytest.mark.parametrize("frames", [True, False], ids=["frames", "text"])
def test_sac_trains_with_the_tiny_vlm_in_process(frames, tiny_vlm, tmp_path, monkeypatch):
    """300 SAC steps on FetchReach with the transformers backend: the tiny Qwen2-VL reads each
    state's rendered 56x56 frame beside the describer's text, or (for the cost) text only."""
    from densereward.backends.hf_vision import VisionTransformersBackend

    seen: list[list[tuple[int, ...]]] = []
    encode = VisionTransformersBackend._encode

    def spy(self, prompts):
        seen.extend([np.asarray(f).shape for f in p.images] for p in prompts)
        return encode(self, prompts)

    monkeypatch.setattr(VisionTransformersBackend, "_encode", spy)
    local = {"backend": "transformers", "model": str(tiny_vlm)}
    summary = sac.run(_frames_run_config(local, frames=frames), output_dir=tmp_path)
    label = "frames + text" if frames else "text only"
    _check_run(summary, f"{label}, in process", frames=frames)
    # one prompt per read the cache did not answer, each with its state's one frame (or none);
    # the first prompt is the calibration read at start, text only
    n = summary["verifier_stats"]["n_scored"]
    assert seen == [[]] + [[(56, 56, 3)] if frames else []] * n


@pytest.mark.slow
def test_sac_trains_with_the_tiny_vlm_reading_frames_over_http(tiny_vlm, tmp_path):
    """The same run with the openai backend: each frame goes as an image_url part (base64
    PNG) to a loopback OpenAI-compatible server answering with the tiny Qwen2-VL's
    log-probabilities (vLLM's CPU build cannot serve Qwen2-VL here: no torchvision)."""
    from densereward.config import VerifierConfig
    from densereward.verifier import Verifier

    with Verifier(VerifierConfig(model=str(tiny_vlm), frames=VLM_FRAMES)) as model:
        server = test_frames.VisionServer(model.backend)
        try:
            served = {
                "backend": "openai",
                "model": server.model,
                "backend_options": {"base_url": server.base_url, "top_logprobs": 40},
                "calibrate": False,
            }
            summary = sac.run(_frames_run_config(served, frames=True), output_dir=tmp_path)
        finally:
            server.close()
    _check_run(summary, "frames + text, over HTTP", frames=True)
    # every request of a read carried its state's frame as one image_url part (PNG, 56x56)
    with_images = [s for s in server.frames_seen if s]
    assert len(with_images) >= summary["verifier_stats"]["n_scored"]
    assert all(shapes == [(56, 56, 3)] for shapes in with_images)
