"""The verifier backends by name, and the options each one owns, as frozen dataclasses.

A leaf of the layer map (it imports only :mod:`dataclasses`, :mod:`densereward.registry` and
:mod:`densereward.errors`): :class:`~densereward.config.VerifierConfig` validates
``verifier.backend`` and ``verifier.backend_options`` against these tables at load time, so
``--dry-run`` catches a misspelt option, a bad dtype or a missing ``base_url`` without
importing torch, vLLM or httpx.

* :data:`BACKENDS`: name -> ``"module:Class"`` of the backend (imported when one is built);
  plugins through the entry-point group ``densereward.backends``.
* :data:`BACKEND_OPTIONS`: name -> ``"module:Class"`` of its options dataclass; plugins through
  the group ``densereward.backend_options``. A backend with no entry here takes the class
  attribute ``options_class`` of the backend class (imported to read it), and one without
  that takes no options. An options class with the class attribute ``loads_model = True``
  marks a backend that loads ``verifier.model`` in this process, so ``--dry-run`` checks that
  the model is there (:func:`loads_model`); the HTTP backends send it to a server as a name.

In YAML (every option of a backend, shown for ``openai``)::

    verifier:
      backend: openai
      backend_options: {base_url: http://127.0.0.1:8000/v1, timeout_s: 30, top_logprobs: 20}

Example:
    >>> TransformersOptions(dtype="bfloat16").dtype
    'bfloat16'
    >>> OpenAIOptions()
    Traceback (most recent call last):
    ...
    densereward.errors.ConfigError: verifier.backend_options.base_url is required by this backend: set verifier.backend_options.base_url=http://127.0.0.1:8000/v1 (the server's /v1 URL, or a list of replicas)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .errors import BackendUnavailableError, ConfigError, RegistryError
from .registry import Registry, entry_point_group

__all__ = [
    "BACKENDS",
    "BACKEND_OPTIONS",
    "BACKEND_METHODS",
    "check_backend_class",
    "DTYPES",
    "NoOptions",
    "TransformersOptions",
    "VLLMOptions",
    "OpenAIOptions",
    "SampledOptions",
    "options_class",
    "answer_options",
    "check_dtype",
    "loads_model",
]

DTYPES = ("float32", "bfloat16", "float16")
"""The dtype names the local backends' ``dtype`` option accepts besides ``auto``."""

_P = "verifier.backend_options."

_BUILTINS = {  # name: (the backend class, its options class in this module)
    "transformers": ("densereward.backends.hf:TransformersBackend", "TransformersOptions"),
    "vllm": ("densereward.backends.vllm_offline:VLLMBackend", "VLLMOptions"),
    "openai": ("densereward.backends.openai_http:OpenAIBackend", "OpenAIOptions"),
    "sampled": ("densereward.backends.sampled:SampledBackend", "SampledOptions"),
}

BACKEND_METHODS = (
    "tokenize",
    "next_token_logprobs",
    "anext_token_logprobs",
    "generate",
    "agenerate",
    "close",
)
"""The methods of :class:`densereward.backends.base.VerifierBackend` a backend class must have."""


def check_backend_class(name: str, obj: Any) -> None:
    """Refuse ``obj`` as backend ``name`` unless it is a class with :data:`BACKEND_METHODS`.

    Raises:
        RegistryError: (a :class:`ConfigError`) naming what is missing.
    """
    if not isinstance(obj, type):
        raise RegistryError(
            f"verifier backend {name!r}: {obj!r} is not a backend: register a "
            "'module:ClassName' string or a class (called as cls(config)), not an instance or "
            "a function"
        )
    missing = [m for m in BACKEND_METHODS if not callable(getattr(obj, m, None))]
    if missing:
        raise RegistryError(
            f"verifier backend {name!r}: {obj.__module__}.{obj.__qualname__} is not a backend: "
            f"it lacks {', '.join(missing)} (densereward.backends.base.VerifierBackend; "
            "LocalAsyncMixin adds the async pair to a class computing in this process)"
        )


DEFAULT_BACKEND = "transformers"
"""``verifier.backend`` when a config sets none."""

BACKENDS: Registry[Any] = Registry(
    "verifier backend",
    group=entry_point_group("backends"),
    builtins={name: backend for name, (backend, _) in _BUILTINS.items()},
    error=BackendUnavailableError,
    check=check_backend_class,
)
"""Backend name -> ``"module:Class"``; the class is called as ``cls(config)``. A class is
checked (:func:`check_backend_class`) when registered, a ``"module:Class"`` entry when it is
first imported (a config validating its options, or the backend being built)."""

BACKEND_OPTIONS: Registry[type] = Registry(
    "verifier backend options",
    group=entry_point_group("backend_options"),
    builtins={name: f"{__name__}:{options}" for name, (_, options) in _BUILTINS.items()},
)
"""Backend name -> ``"module:Class"`` of its frozen options dataclass."""


def _transport(default: Any) -> Any:
    """A field that changes how a read is made, not its answer: left out of the cache key.

    Every other field is in the key (:func:`answer_options`), a plugin's unmarked ones too: a
    setting wrongly kept costs a cache miss, one wrongly left out a wrong answer."""
    return dataclasses.field(default=default, metadata={"transport": True})


@dataclass(frozen=True)
class NoOptions:
    """The options of a backend that registered none: there are none to set."""


def check_dtype(dtype: str, field: str = f"{_P}dtype") -> str:
    """``dtype`` if it is ``auto`` or a :data:`DTYPES` name: the one check of every dtype
    setting (``model.dtype``, each local backend's ``dtype``, :mod:`densereward.backends.dtype`).

    Raises:
        ConfigError: naming ``field`` and the closest name.

    >>> check_dtype("bf16", "model.dtype")
    Traceback (most recent call last):
    ...
    densereward.errors.ConfigError: model.dtype: 'bf16' (did you mean 'bfloat16'?); use auto | float32 | bfloat16 | float16
    """
    if dtype != "auto" and dtype not in DTYPES:
        import difflib

        close = difflib.get_close_matches(str(dtype), ["auto", *DTYPES], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{field}: {dtype!r}{hint}; use auto | {' | '.join(DTYPES)}")
    return dtype


def _at_least(obj: Any, low: Mapping[str, float]) -> None:
    for name, bound in low.items():
        value = getattr(obj, name)
        if value is not None and value < bound:
            raise ConfigError(f"{_P}{name} must be >= {bound:g}, got {value}")


@dataclass(frozen=True)
class TransformersOptions:
    """Options of the ``transformers`` backend (a Hugging Face model in this process).

    Attributes:
        dtype: ``auto``, ``float32``, ``bfloat16``, ``float16``. ``auto`` is bfloat16 where the
            device multiplies bf16 matrices faster than fp32 (a GPU with
            ``torch.cuda.is_bf16_supported()``, a CPU with AMX tiles), float32 elsewhere
            (:func:`densereward.backends.dtype.resolve_dtype`; measurements in
            ``docs/`` "Verifier cost").
        device: ``auto`` (CUDA if available, else CPU), ``cpu``, ``cuda``, ``cuda:1``, ...
        share_prefix: run a batch's shared prompt prefix once and reuse its key/value cache.
        prefix_cache_size: shared-prefix caches kept between calls (LRU), >= 0; 0 keeps none.

    Raises:
        ConfigError: for an unknown dtype (with the closest name) or a negative cache size.
    """

    loads_model: ClassVar[bool] = True  # verifier.model is loaded in this process
    dtype: str = _transport("auto")
    device: str = _transport("auto")
    share_prefix: bool = True
    prefix_cache_size: int = _transport(4)

    def __post_init__(self) -> None:
        check_dtype(self.dtype)
        _at_least(self, {"prefix_cache_size": 0})


@dataclass(frozen=True)
class VLLMOptions:
    """Options of the ``vllm`` backend (a ``vllm.LLM`` offline engine in this process).

    Attributes:
        dtype: as :class:`TransformersOptions`.
        device: ``auto`` or ``cpu`` (``cpu`` keeps the engine off a visible GPU).
        gpu_memory_utilization: fraction of GPU memory (on CPU: of the NUMA node's RAM,
            weights included) the engine reserves, in ``(0, 1]``.
        max_model_len: context length in tokens the engine reserves for, >= 1; ``None`` =
            4096 or the model's own limit if smaller.
        kv_cache_bytes: explicit KV-cache size in bytes (overrides
            ``gpu_memory_utilization``; e.g. ``536870912`` on a shared CPU machine).
        enforce_eager: skip ``torch.compile`` / CUDA graphs; ``None`` = on CPU only.
        engine_kwargs: further keyword arguments of ``vllm.LLM`` (e.g. ``{swap_space: 1}``).

    Raises:
        ConfigError: for an unknown dtype or an out-of-range number.
    """

    loads_model: ClassVar[bool] = True  # verifier.model is loaded in this process
    dtype: str = _transport("auto")
    device: str = _transport("auto")
    gpu_memory_utilization: float = _transport(0.3)
    max_model_len: int | None = _transport(None)
    kv_cache_bytes: int | None = _transport(None)
    enforce_eager: bool | None = None
    engine_kwargs: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        check_dtype(self.dtype)
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError(
                f"{_P}gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        _at_least(self, {"max_model_len": 1, "kv_cache_bytes": 1})
        if self.engine_kwargs is not None and not isinstance(self.engine_kwargs, Mapping):
            raise ConfigError(f"{_P}engine_kwargs must be a mapping, got {self.engine_kwargs!r}")


@dataclass(frozen=True)
class OpenAIOptions:
    """Options of the ``openai`` backend (an OpenAI-compatible server: vLLM, SGLang, OpenAI).

    Attributes:
        base_url: required; the server's base URL, e.g. ``http://127.0.0.1:8000/v1`` (one
            server, or a router in front of many), or a list of replicas serving the same
            model (also a comma-separated string): reads of one GRPO group go to one replica,
            the least-loaded healthy replica takes the rest, and a replica that dies is taken
            out and its reads fail over (:mod:`densereward.backends.replicas`). One URL is
            kept as a string, several as a tuple.
        api_key_env: the environment variable (or ``.env`` entry) holding the API key; keys
            never go in configs.
        max_concurrency: requests in flight at once per server, >= 1.
        requests_per_minute: rate limit, > 0; ``None`` = unlimited.
        timeout_s: per-request timeout in seconds, > 0.
        max_retries: retries with exponential backoff (``Retry-After`` honoured), >= 0.
        retry_base_s: first backoff wait in seconds (doubles each retry, with jitter), >= 0.
        retry_max_s: cap of one backoff wait (and of an honoured ``Retry-After``), >= 0.
        health_timeout_s: timeout of a health check (``GET {base_url}/models``), seconds.
        health_interval_s: with several replicas, seconds between health checks, > 0.
        max_imbalance: with several replicas, reads the group's replica may hold beyond the
            least-loaded one before reads leave it, >= 0; ``None`` = ``max_concurrency``.
        restrict_to_candidates: send vLLM's ``allowed_token_ids`` with the score-token ids,
            so the distribution is over the candidates only.
        top_logprobs: alternatives asked for per request, >= 1 (at most 20 for OpenAI; a
            vLLM server started with ``--max-logprobs K`` accepts up to ``K``).
        server_extensions: send ``continue_final_message`` / ``add_generation_prompt``
            (vLLM, SGLang); ``None`` = detect from the ``owned_by`` field of ``/models``.

    Raises:
        ConfigError: for a missing ``base_url`` (naming the setting to add) or an
            out-of-range number.
    """

    loads_model: ClassVar[bool] = False  # verifier.model is a name sent to the server
    base_url: tuple[str, ...] | str | None = _transport(None)
    api_key_env: str = _transport("OPENAI_API_KEY")
    max_concurrency: int = _transport(8)
    requests_per_minute: float | None = _transport(None)
    timeout_s: float = _transport(60.0)
    max_retries: int = _transport(4)
    retry_base_s: float = _transport(0.5)
    retry_max_s: float = _transport(30.0)
    health_timeout_s: float = _transport(5.0)
    health_interval_s: float = _transport(5.0)
    max_imbalance: int | None = _transport(None)
    restrict_to_candidates: bool = False
    top_logprobs: int = 20
    server_extensions: bool | None = None

    def __post_init__(self) -> None:
        url = self.base_url
        if url is not None and not isinstance(url, str):
            try:
                urls = tuple(str(u) for u in url)
            except TypeError:
                raise ConfigError(
                    f"{_P}base_url must be a URL or a list of URLs, got {url!r}"
                ) from None
            object.__setattr__(self, "base_url", urls[0] if len(urls) == 1 else (urls or None))
        if not self.base_url or not str(self.base_url).strip():
            raise ConfigError(
                f"{_P}base_url is required by this backend: set "
                f"{_P}base_url=http://127.0.0.1:8000/v1 (the server's /v1 URL, or a list of "
                "replicas)"
            )
        _at_least(
            self,
            {
                "max_concurrency": 1,
                "max_retries": 0,
                "retry_base_s": 0,
                "retry_max_s": 0,
                "top_logprobs": 1,
                "max_imbalance": 0,
            },
        )
        positive = {
            "timeout_s": self.timeout_s,
            "health_timeout_s": self.health_timeout_s,
            "health_interval_s": self.health_interval_s,
            "requests_per_minute": self.requests_per_minute,
        }
        for name, value in positive.items():
            if value is not None and value <= 0:
                raise ConfigError(f"{_P}{name} must be > 0, got {value}")


@dataclass(frozen=True)
class SampledOptions(OpenAIOptions):
    """Options of the ``sampled`` backend (score distribution from samples, no log-probs):
    every option of :class:`OpenAIOptions`, and these.

    Attributes:
        n_samples: samples per prompt for the empirical distribution, >= 1.
        max_score_tokens: new tokens per sample (room for markup before the score), >= 1.
        use_n: ask for all samples in one request with the ``n`` parameter (vLLM, OpenAI);
            missing choices are topped up one by one. ``False`` = ``n_samples`` requests.

    Raises:
        ConfigError: as :class:`OpenAIOptions`, or for a count below 1.
    """

    n_samples: int = 16
    max_score_tokens: int = 4
    use_n: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        _at_least(self, {"n_samples": 1, "max_score_tokens": 1})


def options_class(backend: str) -> type:
    """The options dataclass of ``backend`` (imports no backend when one is registered in
    :data:`BACKEND_OPTIONS`; else the backend class's ``options_class``, else
    :class:`NoOptions`).

    Raises:
        ConfigError: for an unknown backend name (did-you-mean).
        BackendUnavailableError: when a plugin's entry cannot be imported.
    """
    BACKENDS.check(backend)
    if backend in BACKEND_OPTIONS:
        return BACKEND_OPTIONS.load(backend)
    return getattr(BACKENDS.load(backend), "options_class", None) or NoOptions


def loads_model(backend: str) -> bool:
    """Whether ``backend`` loads ``verifier.model`` in this process: its options class says
    ``loads_model = True`` (``transformers``, ``vllm``: read without importing the backend),
    else the backend class's own ``loads_model`` (a plugin's; default ``False``).

    Raises:
        ConfigError, BackendUnavailableError: as :func:`options_class`.
    """
    flag = getattr(options_class(backend), "loads_model", None)
    if flag is None:
        flag = getattr(BACKENDS.load(backend), "loads_model", False)
    return bool(flag)


def answer_options(options: Any, given: Mapping[str, Any]) -> dict[str, Any]:
    """The options of ``given`` (the ones a config set) that change a read's answer.

    The fields marked transport are left out: URL, key variable, concurrency, rate limit,
    timeouts, retries and backoff, health checks, replica balancing, memory and context
    reservations, dtype and device (the dtype an in-process model runs in is keyed on its own).
    So a score cache is shared across replicas and machines, and a changed timeout still hits
    it. What stays changes the distribution read: ``top_logprobs``, ``restrict_to_candidates``,
    ``server_extensions``, ``share_prefix``, the vLLM engine's ``enforce_eager`` and
    ``engine_kwargs``, the sampled backend's sampling settings.
    """
    transport = {f.name for f in dataclasses.fields(options) if f.metadata.get("transport")}
    return {k: v for k, v in given.items() if k not in transport}


class FrozenOptions(dict):
    """``verifier.backend_options`` as given: a read-only ``dict`` that hashes by its items, so a
    :class:`~densereward.config.VerifierConfig` stays hashable (it keys caches). Equal to the
    plain ``dict``."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(_freeze(dict(self)))

    def __reduce__(self) -> Any:
        return (FrozenOptions, (dict(self),))

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("verifier.backend_options is read-only; use dataclasses.replace")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _read_only  # type: ignore[assignment]


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple | set | frozenset):
        return tuple(_freeze(v) for v in value)
    return value
