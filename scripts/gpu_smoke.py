"""GPU smoke test of the Qwen3-8B path: speed on one GPU, no network, under 10 minutes.

Random weights with Qwen3-8B's exact configuration (bf16) and the real Qwen3 tokenizer
(``../shared/models/qwen3-tokenizer``) give real speed and memory, NOT quality: every score
and reward printed here is noise. Phases (each GPU phase in its own process, so memory is
returned between them):

1. build two random 8B checkpoints (``scripts/qwen3_random.py``, on the GPU): the policy
   (purely random) and the verifier (score-letter rows of lm_head boosted, so the letters are
   in the server's top-20 log-probabilities and reads do not abstain). Reused when present.
2. serve the verifier with vLLM's OpenAI-compatible server on loopback (as the 8B config's
   comment tells users to), named ``Qwen/Qwen3-8B`` like the config expects.
3. verifier scoring throughput through that server: direct style, G = 20, prompts of about
   ``--prompt-tokens`` tokens; prints sequences/s and prompt tokens/s.
4. 3 GRPO steps of ``configs/grpo_math_qwen3_8b.yaml`` with TRL's colocated vLLM generation
   and the served verifier (dense reward), scaled only as far as one GPU needs (printed);
   prints seconds per step, the reward's share of the step and peak GPU memory.

Usage (from the repository root; ``scripts/gpu_smoke.sh`` sets the offline environment)::

    bash scripts/gpu_smoke.sh                 # the whole smoke test on one GPU
    bash scripts/gpu_smoke.sh --dry-run       # CPU: parse, build and validate the configs only
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))  # qwen3_random
sys.path.insert(0, str(REPO))  # trainers

import qwen3_random  # noqa: E402

SERVED_NAME = "Qwen/Qwen3-8B"
NOTICE = (
    "random weights: these numbers measure speed and memory of the Qwen3-8B path, "
    "not the quality of any reward or policy"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="validate arguments and configs on CPU")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/densereward-gpu-smoke"))
    p.add_argument("--tokenizer-dir", type=Path, default=qwen3_random.TOKENIZER_DIR)
    p.add_argument("--config", type=Path, default=REPO / "configs/grpo_math_qwen3_8b.yaml")
    p.add_argument("--data", default=str(REPO.parent / "shared/data/math500/test.jsonl"),
                   help="MATH JSONL (no network); falls back to reasoning_gym when missing")  # fmt: skip
    p.add_argument("--port", type=int, default=8001)
    p.add_argument("--verifier-mem", type=float, default=0.15,
                   help="GPU memory fraction of the verifier server")  # fmt: skip
    p.add_argument("--n-score", type=int, default=512, help="prompts in the throughput phase")
    p.add_argument("--prompt-tokens", type=int, default=500)
    p.add_argument("--steps", type=int, default=3)
    # the scaling that makes the 8B config fit one GPU beside the verifier server
    p.add_argument("--vllm-mem", type=float, default=0.25,
                   help="training.vllm_gpu_memory_utilization (the 8B config: 0.3)")  # fmt: skip
    p.add_argument("--per-device-batch", type=int, default=4,
                   help="per_device_train_batch_size; gradient_accumulation_steps grows to keep "
                   "the completions per step of the 8B config")  # fmt: skip
    p.add_argument("--no-sleep-mode", action="store_true",
                   help="keep vLLM's weights and KV cache on the GPU during the optimizer step")  # fmt: skip
    p.add_argument("--phase", choices=["build", "grpo"], help=argparse.SUPPRESS)
    p.add_argument("--base-url", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("verifier_mem", "vllm_mem"):
        if not 0.0 < getattr(args, name) < 1.0:
            p.error(f"--{name.replace('_', '-')} must be in (0, 1)")
    if args.verifier_mem + args.vllm_mem >= 0.9:
        p.error("--verifier-mem + --vllm-mem must leave room for training (< 0.9)")
    if args.steps < 1 or args.n_score < 1 or args.prompt_tokens < 64:
        p.error("--steps, --n-score >= 1 and --prompt-tokens >= 64")
    return args


def model_dirs(args: argparse.Namespace) -> tuple[Path, Path]:
    return args.workdir / "qwen3-8b-policy", args.workdir / "qwen3-8b-verifier"


# ------------------------------------------------------------------------------ configs


def grpo_config(
    args: argparse.Namespace, policy_dir: Path, base_url: str
) -> tuple[dict, list[str]]:
    """The 8B config with the smoke test's changes; returns (config, what was changed and why)."""
    from densereward.config import load_yaml

    config = copy.deepcopy(load_yaml(args.config))
    t = config["training"]
    scaled: list[str] = []
    per_step = t["per_device_train_batch_size"] * t["gradient_accumulation_steps"]
    if args.per_device_batch != t["per_device_train_batch_size"]:
        if per_step % args.per_device_batch:
            raise SystemExit(f"--per-device-batch must divide {per_step} (completions per step)")
        scaled.append(
            f"per_device_train_batch_size {t['per_device_train_batch_size']} -> {args.per_device_batch}, "
            f"gradient_accumulation_steps {t['gradient_accumulation_steps']} -> {per_step // args.per_device_batch} "
            f"(same {per_step} completions per step; half the activation memory)"
        )
        t["per_device_train_batch_size"] = args.per_device_batch
        t["gradient_accumulation_steps"] = per_step // args.per_device_batch
    if args.vllm_mem != t.get("vllm_gpu_memory_utilization"):
        scaled.append(
            f"vllm_gpu_memory_utilization {t.get('vllm_gpu_memory_utilization')} -> {args.vllm_mem} "
            f"(the verifier server shares the GPU with {args.verifier_mem})"
        )
        t["vllm_gpu_memory_utilization"] = args.vllm_mem
    if not args.no_sleep_mode:
        t["vllm_enable_sleep_mode"] = True
        scaled.append(
            "vllm_enable_sleep_mode true (vLLM's memory is released during the optimizer step)"
        )
    t["max_steps"] = args.steps
    t["save_strategy"] = "no"
    t["warmup_steps"] = 0
    scaled.append(
        f"max_steps {args.steps}, no checkpoints (a 16 GB model + optimizer state per save)"
    )
    config["model"]["name"] = str(policy_dir)
    if Path(args.data).is_file():
        config["data"] = {"path": str(args.data), "shuffle": True, "seed": 0}
    else:
        config["data"] = {"source": "reasoning_gym", "task": "basic_arithmetic", "size": 256}
    scaled.append(f"data {config['data'].get('path') or 'reasoning_gym'} (no network)")
    verifier = config["verifier"]
    verifier["backend_options"] = {**(verifier.get("backend_options") or {}), "base_url": base_url}
    config["wandb"] = {**config.get("wandb", {}), "name": "gpu-smoke", "group": "gpu-smoke"}
    return config, scaled


def scoring_batch(
    tokenizer_dir: Path, n: int, prompt_tokens: int
) -> tuple[list[str], list[str], int]:
    """``n`` problems and responses whose direct-style verifier prompts are ~``prompt_tokens`` long.

    Returns:
        ``(problems, responses, tokens)``, ``tokens`` the rendered length of the first prompt.
    """
    from transformers import AutoTokenizer

    from densereward.backends.hf import render_prompt_ids
    from densereward.prompts import pointwise_prompt
    from densereward.scale import ScoreScale

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    scale = ScoreScale.letters(20)
    criterion = (
        "Is the final answer of the response correct, and is the reasoning that leads to it valid?"
    )

    def length(problem: str, response: str) -> int:
        p = pointwise_prompt(scale, problem, response, criterion)
        return len(
            render_prompt_ids(tok, p.__class__(p.messages, p.prefill, {"enable_thinking": False}))
        )

    filler = (
        "We expand the product, collect like terms and check each case against the constraint; "
        "the remaining case gives the value below. "
    )
    problems, responses = [], []
    for i in range(n):
        problem = f"Problem {i}: find the sum of all integers k with 1 <= k <= {100 + i} and k divisible by 7."
        base = length(problem, "")
        words = filler.split()
        budget = max(0, prompt_tokens - base)
        text_ids = tok.encode(" ".join(words * (budget // 20 + 2)), add_special_tokens=False)[
            :budget
        ]
        responses.append(tok.decode(text_ids) + f" The answer is \\boxed{{{7 * i}}}.")
        problems.append(problem)
    return problems, responses, length(problems[0], responses[0])


# ------------------------------------------------------------------------------ phases


class GpuMemoryPeak:
    """Device-wide GPU memory in use (NVML), sampled every 0.2 s in a thread; ``peak_gib``."""

    def __init__(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            used = self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used
            self.peak = max(self.peak, used)
            time.sleep(0.2)

    @property
    def peak_gib(self) -> float:
        return self.peak / 2**30

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(timeout=2)
        return self.peak_gib


def phase_build(args: argparse.Namespace) -> None:
    policy, verifier = model_dirs(args)
    for out, boost in ((policy, 1.0), (verifier, 10.0)):
        t0 = time.monotonic()
        qwen3_random.build(
            out, size="8b", device="cuda", letter_boost=boost, tokenizer_dir=args.tokenizer_dir
        )
        print(f"[build] {out} ready in {time.monotonic() - t0:.0f} s", flush=True)


def phase_grpo(args: argparse.Namespace) -> None:
    """3 GRPO steps in this process; prints one ``RESULT {json}`` line."""
    import torch
    from trl.extras import profiling

    from densereward.trainers.grpo import run

    timings: dict[str, list[float]] = {}
    log_metrics = profiling.ProfilingContext._log_metrics

    def record(self, duration: float) -> None:  # TRL's own step profiling, kept for the summary
        timings.setdefault(self.name, []).append(duration)
        log_metrics(self, duration)

    profiling.ProfilingContext._log_metrics = record
    policy, _ = model_dirs(args)
    config, _ = grpo_config(args, policy, args.base_url)
    memory = GpuMemoryPeak()
    out = args.workdir / f"grpo-{time.strftime('%H%M%S')}"
    t0 = time.monotonic()
    result = run(config, output_dir=out)
    wall = time.monotonic() - t0
    state = json.loads((out / "trainer_state.json").read_text())
    steps = [h["step_time"] for h in state["log_history"] if "step_time" in h]
    reward_s = sum(v for k, vs in timings.items() for v in vs if "verifier" in k.lower())
    print("RESULT " + json.dumps({
        "wall_s": wall, "steps": result["steps"], "step_s": steps,
        "reward_s": reward_s, "timings": {k: sum(v) for k, v in timings.items()},
        "peak_gpu_gib_device": memory.stop(),
        "peak_torch_gib_trainer": torch.cuda.max_memory_allocated() / 2**30,
    }), flush=True)  # fmt: skip


def start_server(
    args: argparse.Namespace, verifier_dir: Path, log: Path
) -> tuple[subprocess.Popen, float]:
    import httpx

    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(verifier_dir),
        "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(args.port),
        "--dtype", "bfloat16", "--gpu-memory-utilization", str(args.verifier_mem),
        "--max-model-len", "4096", "--max-logprobs", "40", "--enforce-eager",
    ]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{args.port}/v1/models"
    while time.monotonic() - t0 < 300:
        if proc.poll() is not None:
            raise SystemExit(f"the verifier server exited; log {log}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return proc, time.monotonic() - t0
        except httpx.HTTPError:
            pass
        time.sleep(1)
    proc.terminate()
    raise SystemExit(f"the verifier server did not start in 300 s; log {log}")


def throughput(args: argparse.Namespace, base_url: str) -> dict[str, Any]:
    from densereward import Verifier
    from densereward.config import VerifierConfig, from_dict, load_yaml

    section = dict(load_yaml(args.config)["verifier"])
    section["backend_options"] = {**(section.get("backend_options") or {}), "base_url": base_url}
    cfg: VerifierConfig = from_dict(VerifierConfig, section, prefix="verifier.")
    problems, responses, tokens = scoring_batch(
        args.tokenizer_dir, args.n_score, args.prompt_tokens
    )
    v = Verifier(cfg)
    asyncio.run(v.ascore_batch(problems=problems[:16], responses=responses[:16]))  # warm-up
    before = v.backend.usage.n_prompt_tokens
    t0 = time.monotonic()
    results = asyncio.run(v.ascore_batch(problems=problems, responses=responses))
    dt = time.monotonic() - t0
    n_tok = v.backend.usage.n_prompt_tokens - before
    v.close()
    return {
        "n": len(results), "seconds": dt, "seq_per_s": len(results) / dt, "tok_per_s": n_tok / dt,
        "prompt_tokens": tokens, "abstained": sum(r.value is None for r in results),
        "style": cfg.style, "granularity": cfg.granularity,
    }  # fmt: skip


def self_cmd(args: argparse.Namespace, phase: str, *extra: str) -> list[str]:
    return [sys.executable, __file__, "--phase", phase, "--workdir", str(args.workdir),
            "--tokenizer-dir", str(args.tokenizer_dir), "--config", str(args.config),
            "--data", args.data, "--steps", str(args.steps), "--vllm-mem", str(args.vllm_mem),
            "--verifier-mem", str(args.verifier_mem), "--per-device-batch", str(args.per_device_batch),
            *(["--no-sleep-mode"] if args.no_sleep_mode else []), *extra]  # fmt: skip


def dry_run(args: argparse.Namespace) -> int:
    """Everything that needs no GPU: model spec, prompt length, the GRPO config's validation."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from densereward.trainers.grpo import run

    with torch.device("meta"):
        n_params = sum(
            p.numel() for p in Qwen3ForCausalLM(Qwen3Config(**qwen3_random.QWEN3_8B)).parameters()
        )
    print(
        f"model: Qwen3-8B configuration, {n_params / 1e9:.2f} B parameters ({2 * n_params / 2**30:.1f} GiB in bf16)"
    )
    _, _, tokens = scoring_batch(args.tokenizer_dir, 2, args.prompt_tokens)
    print(f"verifier prompt: {tokens} tokens (target {args.prompt_tokens}), direct style, G=20")
    policy, _ = model_dirs(args)
    config, scaled = grpo_config(args, policy, f"http://127.0.0.1:{args.port}/v1")
    # The real run writes the policy's random weights first; the dry run's model check needs a
    # directory that exists, so the configuration alone stands in for them.
    with tempfile.TemporaryDirectory() as spec:
        Qwen3Config(**qwen3_random.QWEN3_8B).save_pretrained(spec)
        config["model"]["name"] = spec
        checks = run(config, dry_run=True)["checks"]
    print("GRPO config (dry run of trainers/grpo.py):")
    for c in checks:
        print("  ok  " + c)
    print("scaled to fit one GPU:")
    for s in scaled:
        print("  - " + s)
    print(f"NOTE: {NOTICE}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.phase == "build":
        phase_build(args)
        return 0
    if args.phase == "grpo":
        phase_grpo(args)
        return 0
    if args.dry_run:
        return dry_run(args)
    t_all = time.monotonic()
    print(f"NOTE: {NOTICE}", flush=True)
    args.workdir.mkdir(parents=True, exist_ok=True)
    subprocess.run(self_cmd(args, "build"), check=True)
    _, verifier_dir = model_dirs(args)
    proc, startup = start_server(args, verifier_dir, args.workdir / "verifier-server.log")
    base_url = f"http://127.0.0.1:{args.port}/v1"
    print(f"[server] vLLM OpenAI-compatible server up in {startup:.0f} s at {base_url}", flush=True)
    try:
        tp = throughput(args, base_url)
        print(f"[verifier] {tp['n']} prompts of ~{tp['prompt_tokens']} tokens, {tp['style']} style, "
              f"G={tp['granularity']}: {tp['seq_per_s']:.1f} sequences/s, {tp['tok_per_s']:.0f} prompt "
              f"tokens/s ({tp['seconds']:.1f} s; {tp['abstained']} abstained)", flush=True)  # fmt: skip
        out = subprocess.run(
            self_cmd(args, "grpo", "--base-url", base_url), capture_output=True, text=True
        )
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if out.returncode != 0 or line is None:
            print(out.stdout[-4000:], out.stderr[-4000:], sep="\n")
            raise SystemExit(f"the GRPO phase failed (exit {out.returncode})")
        g = json.loads(line[len("RESULT ") :])
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    _, scaled = grpo_config(args, model_dirs(args)[0], base_url)
    step_s = g["step_s"] or [g["wall_s"] / max(1, g["steps"])]
    total = sum(step_s)
    print(f"[grpo] {g['steps']} steps of {args.config.name}, vLLM colocated generation: "
          f"seconds per step {[round(s, 1) for s in step_s]} (mean {total / len(step_s):.1f})")  # fmt: skip
    print(
        f"[grpo] reward (served verifier) {g['reward_s']:.1f} s = {100 * g['reward_s'] / total:.1f} % of the step time"
    )
    print(
        f"[grpo] TRL timings (s): {json.dumps({k: round(v, 1) for k, v in g['timings'].items()})}"
    )
    print(f"[memory] peak GPU memory in use (device, trainer + verifier server): {g['peak_gpu_gib_device']:.1f} GiB; "
          f"trainer torch peak {g['peak_torch_gib_trainer']:.1f} GiB")  # fmt: skip
    print("[scaled] " + "; ".join(scaled))
    print(f"total {time.monotonic() - t_all:.0f} s. NOTE: {NOTICE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
