"""A verifier that sees (issue 31): camera frames through the engine into an image-text-to-text model.

Real parts: a tiny random-weight Qwen2-VL built on demand from the Qwen3 tokenizer in
``../shared/models/qwen3-tokenizer`` (``scripts/qwen2vl_random.py``, ~10 s once per machine,
cached under ``~/.cache/densereward/models/``), run in process by the ``transformers`` backend.
Random weights show the plumbing, not quality.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import numpy as np
import pytest

from densereward.backends.base import ChatPrompt
from densereward.backends.images import FrameConfig, FramePrep, png_data_url
from densereward.cache import ScoreCache
from densereward.config import VerifierConfig, from_dict
from densereward.errors import ConfigError, DataError

REPO = Path(__file__).resolve().parents[1]
TOKENIZER = REPO.parent / "shared" / "models" / "qwen3-tokenizer"


def _builder():
    spec = importlib.util.spec_from_file_location(
        "qwen2vl_random", REPO / "scripts/qwen2vl_random.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scene(seed: int, size: tuple[int, int] = (120, 160)) -> np.ndarray:
    """A smooth synthetic camera frame (a gradient and a disc that moves with ``seed``)."""
    h, w = size
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([xx * 255 // w, yy * 255 // h, np.full_like(xx, 80)], axis=-1).astype(np.uint8)
    cy, cx = h // 2, (seed * 23) % w
    img[(yy - cy) ** 2 + (xx - cx) ** 2 < (h // 6) ** 2] = (220, 30, 30)
    return img


@pytest.fixture(scope="module")
def vlm_dir() -> Path:
    if not (TOKENIZER / "tokenizer.json").is_file():
        pytest.skip(f"the Qwen3 tokenizer is not at {TOKENIZER}")
    return _builder().build()


@pytest.fixture(scope="module")
def vlm(vlm_dir, tmp_path_factory):
    from densereward.verifier import Verifier

    cache = ScoreCache(tmp_path_factory.mktemp("frames-cache"))
    v = Verifier(
        VerifierConfig(model=str(vlm_dir), frames=FrameConfig(max_frames=4, max_side=112)),
        cache=cache,
    )
    yield v
    v.close()
    cache.close()


# ------------------------------------------------------------------ bounds and identity


def test_frame_settings_are_bounded_at_config_load():
    assert VerifierConfig().frames == FrameConfig()
    for bad in (
        {"max_frames": 0},
        {"max_frames": 33},
        {"max_side": 10},
        {"stride": 0},
        {"stride": 1.5},
    ):
        with pytest.raises(ConfigError, match="verifier.frames"):
            VerifierConfig(frames=bad)
    with pytest.raises(ConfigError, match="verifier.frames"):
        from_dict(VerifierConfig, {"frames": {"max_frames": 64}}, prefix="verifier.")
    with pytest.raises(ConfigError, match="unknown key"):
        VerifierConfig(frames={"n_frames": 2})
    cfg = from_dict(VerifierConfig, {"frames": {"max_frames": 2, "stride": 3}})
    assert cfg.frames == FrameConfig(max_frames=2, stride=3)


def test_frames_enter_the_prompt_key_by_content():
    text = ({"role": "user", "content": "How far along?"},)
    a, b = scene(1), scene(2)
    key = ChatPrompt(text, "<score>", images=(a,)).key()
    assert key == ChatPrompt(text, "<score>", images=(a.copy(),)).key()  # bytes, not id()
    assert key != ChatPrompt(text, "<score>", images=(b,)).key()
    assert key != ChatPrompt(text, "<score>", images=(a, a)).key()
    assert key != ChatPrompt(text, "<score>").key()
    assert ChatPrompt(text, "<score>").key() == (((("user", "How far along?"),), "<score>"))
    from PIL import Image

    assert ChatPrompt(text, "<score>", images=(Image.fromarray(a),)).key() == key
    assert ChatPrompt(text, images=(a,)) == ChatPrompt(text, images=(a.copy(),))


def test_frame_prep_stride_cut_resize(caplog):
    prep = FramePrep(FrameConfig(max_frames=2, max_side=80, stride=2))
    frames = [scene(i) for i in range(5)]  # 120 x 160
    with caplog.at_level(logging.WARNING, logger="densereward.backends.images"):
        out = prep(frames)  # every 2nd counting back from the last: 0, 2, 4 -> the last two
        prep(frames)
    assert [f.shape for f in out] == [(60, 80, 3), (60, 80, 3)]  # longest side 80, aspect kept
    assert all(f.dtype == np.uint8 for f in out)
    assert prep.n_cut == 2 and sum("said once" in r.message for r in caplog.records) == 1
    assert FramePrep(FrameConfig(max_side=448))([scene(0)])[0].shape == (
        120,
        160,
        3,
    )  # never enlarged
    with pytest.raises(DataError, match="uint8"):
        prep([np.zeros((8, 8, 3), dtype=np.float32)])
    with pytest.raises(DataError, match="one list of frames"):
        prep(scene(0))
    assert png_data_url(scene(0)).startswith("data:image/png;base64,")


# ------------------------------------------------------------------ the tiny VLM in process


def test_progress_batch_with_frames_reads_the_score_letters(vlm):
    assert type(vlm.backend).__name__ == "VisionTransformersBackend" and vlm.backend.supports_images
    assert vlm.read_plan.back == ">"  # the Qwen tokenizer's boundary: '>T' is one token
    frames = [scene(i) for i in range(6)]
    results = vlm.progress_batch(
        tasks=["Move the gripper to the red disc."] * 4,
        trajectories=["", "gripper 0.1 m from the disc", "", "gripper at the disc"],
        images=[frames[:1], [], frames, frames[2:4]],
    )
    for r in results:
        assert r.value is not None and 0.0 <= r.value <= 1.0, r.reason
        assert r.mass is not None and r.mass > vlm.config.min_mass
    assert vlm.frames.n_cut == 1  # six frames, max_frames 4: cut, warned once


def test_frames_key_the_cache_and_change_the_read(vlm):
    task = ["Move the gripper to the red disc."]
    n0, hits0 = len(vlm.cache), vlm.stats.n_cache_hits
    first = vlm.progress_batch(tasks=task, trajectories=[""], images=[[scene(10)]])[0]
    other = vlm.progress_batch(tasks=task, trajectories=[""], images=[[scene(30)]])[0]
    assert len(vlm.cache) == n0 + 2 and vlm.stats.n_cache_hits == hits0  # two frames, two keys
    again = vlm.progress_batch(tasks=task, trajectories=[""], images=[[scene(10).copy()]])[0]
    assert vlm.stats.n_cache_hits == hits0 + 1 and again.value == first.value
    assert first.distribution is not None and other.distribution is not None
    # the model saw the frame (random weights: the letters' relative odds move, slightly)
    log_ratio = np.log(first.distribution[:-1]) - np.log(other.distribution[:-1])
    assert np.abs(log_ratio).max() > 1e-3


def test_progress_curve_and_score_take_frames(vlm):
    frames = [scene(i) for i in range(3)]
    curve = vlm.progress_curve(problem="Reach the disc.", steps=["", "", ""], images=frames)
    assert len(curve) == 3 and all(c is not None for c in curve)
    per_checkpoint = vlm.progress_curve(
        problem="Reach the disc.", steps=["a", "b", "c"], checkpoints=[2], images=[frames]
    )
    assert len(per_checkpoint) == 1 and per_checkpoint[0] is not None
    assert (
        vlm.score(problem="Reach the disc.", response="done", images=[frames[-1]]).value is not None
    )
    with pytest.raises(DataError, match="one frame per step"):
        vlm.progress_curve(problem="x", steps=["a", "b"], images=frames)


def test_a_text_backend_refuses_frames(default_model_dir):
    from densereward.verifier import Verifier

    with Verifier(VerifierConfig(model=str(default_model_dir), calibrate=False)) as v:
        assert not v.backend.supports_images
        with pytest.raises(
            ConfigError, match="'transformers' verifier backend .* cannot take camera frames"
        ):
            v.progress_batch(tasks=["t"], trajectories=["s"], images=[[scene(0)]])
        assert v.progress_batch(tasks=["t"], trajectories=["s"], images=[[]])[0].value is not None
