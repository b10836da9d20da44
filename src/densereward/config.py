"""The verifier's configuration: :class:`VerifierConfig` (``verifier:`` of every config file),
its accept threshold (:func:`resolve_threshold`) and the model-name checks.

The config-file machinery every command shares (YAML, dotted overrides, typed sections) is
:mod:`densereward.config_files`; its functions are importable from here too, as before.
"""

from __future__ import annotations

import dataclasses
import numbers
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .backend_options import (
    BACKEND_OPTIONS,
    BACKENDS,
    DEFAULT_BACKEND,
    FrozenOptions,
    answer_options,
    check_dtype,
    options_class,
)
from .config_files import (
    _coerce,
    add_override_arguments,
    apply_overrides,
    from_dict,
    load_yaml,
    overrides_from,
    parse_override,
)
from .errors import ConfigError
from .frames import FrameConfig
from .sections import check_sections, field_names, unknown_key_hints

# from_dict ... overrides_from (config_files) and check_sections (sections) are importable from
# here too, as before the split

__all__ = [
    "VerifierConfig",
    "resolve_threshold",
    "from_dict",
    "load_yaml",
    "apply_overrides",
    "parse_override",
    "check_sections",
    "check_model_name",
    "check_model_and_dtype",
    "add_override_arguments",
    "overrides_from",
]


@dataclass(frozen=True)
class VerifierConfig:
    """How the verifier reward is computed (Kwok et al. 2026: granularity, repeats, criteria).

    Every field can be set in YAML under ``verifier:`` or on the command line as
    ``verifier.<field>=<value>``.
    """

    backend: str = DEFAULT_BACKEND
    """Backend name: ``transformers`` | ``vllm`` | ``openai`` | ``sampled``, or a name a third
    party registered (:func:`densereward.backends.register_backend` or the entry-point group
    ``densereward.backends``)."""
    backend_options: Mapping[str, Any] | None = None
    """The backend's own settings, validated at load into its frozen options dataclass
    (:attr:`options`; :mod:`densereward.backend_options`): ``{base_url:
    http://127.0.0.1:8000/v1, timeout_s: 30, top_logprobs: 20}`` for ``openai``
    (:class:`~densereward.backend_options.OpenAIOptions`; ``sampled`` adds ``n_samples``,
    ``use_n``), ``{dtype: bfloat16, device: cpu, share_prefix: false}`` for ``transformers``,
    ``{dtype: auto, gpu_memory_utilization: 0.3, max_model_len: 2048}`` for ``vllm``. An
    unknown name (with the closest one), a value of the wrong type, a bad dtype or a missing
    ``base_url`` is a :class:`~densereward.errors.ConfigError` here, before anything loads.
    Kept as given (values coerced); ``None`` = the backend's defaults."""
    model: str | None = None
    """Hugging Face id or local path of the verifier; ``None`` = embedded SmolLM2-135M-Instruct."""
    granularity: int = 20
    """G, the number of score tokens (letters ``A``..); in ``[2, 26]``."""
    n_repeats: int = 1
    """K, repeated evaluations averaged into one reward (pairwise repeats alternate A/B slots)."""
    criteria: tuple[str, ...] | Mapping[str, str] | None = None
    """C criteria: names, or name -> description. ``None`` = one overall-correctness criterion."""
    style: Literal["direct", "reasoning"] = "direct"
    """``direct``: read the score right after the prompt; ``reasoning``: sample an analysis first."""
    max_reasoning_tokens: int = 256
    """Length bound of the analysis in the reasoning style (tokens)."""
    reasoning_temperature: float = 0.7
    """Sampling temperature of the analysis in the reasoning style."""
    chat_template_kwargs: Mapping[str, Any] | None = None
    """Extra variables for the verifier's chat template, passed to every backend
    (``apply_chat_template(**kwargs)`` for transformers and vLLM, the request's
    ``chat_template_kwargs`` for the HTTP backends, which then need a vLLM / SGLang server).
    ``None`` = the style decides Qwen3's ``enable_thinking``: off in the direct style (the
    prompt ends ``<think>\n\n</think>\n\n<score>``); in the reasoning style on when the
    template has the switch (local backends read it; over HTTP set ``{enable_thinking: true}``),
    and the score is read after the model's ``</think>`` and the prefill. Templates ignore
    variables they do not use. Set values win over the style's default."""
    beta: float = 10.0
    """Bradley-Terry inverse temperature: p(a > b) = sigmoid(beta * (R_a - R_b)), rewards in [0, 1]."""
    min_mass: float = 0.5
    """Floor on the probability mass of the score tokens at a read, in ``[0, 1)``: a read below it
    abstains (``value=None``, reason names the mass and the floor, counted in
    ``stats.n_low_mass``) instead of renormalising stray probability into a confident score.
    Applies to every read (pointwise, each pairwise read, progress) on every backend. For
    top-k HTTP reads the mass is a lower bound (only the returned top-k tokens are summed), so
    the floor may reject a read whose true mass is above it, never the reverse; restricted reads
    (``restrict_to_candidates``) have no pre-restriction mass and are not floored. Default
    0.5: below it the model's most likely next token is *not* a score, so the read is not the
    model's grade. Measured with the embedded model: the shipped prompts put 0.78-0.98 of the
    mass on the score tokens (minimum over 151 reads, G = 10 and 20, reference-free,
    answer_match and progress); a thinking model answering in prose at the score position
    leaves ~1e-6; a prompt without the ``<score>`` prefill 0.06-0.23 (docs/where_the_score_is_read.md,
    "Score-token mass"). ``0`` disables the floor."""
    calibrate: bool = True
    """At start-up, read the score once on the prompt's own first demonstration and refuse to
    start (:class:`~densereward.errors.ScoreTokenError` naming the model, the mass and where the
    score is read) when that read puts less than ``min_mass`` on the score letters: every later
    read would abstain. Runs whenever the mass can be measured: on backends that cannot tokenize
    too (an OpenAI-compatible server without ``/tokenize``), skipped only when ``min_mass`` is 0
    or the read is restricted (``restrict_to_candidates``). A server that refuses the read (a
    4xx: more ``top_logprobs`` than it allows, a parameter it does not take) is a
    :class:`~densereward.errors.ConfigError` naming its message and the setting to change; so is
    a refusal of the first read when this is off. A transient failure (5xx, timeout) is logged
    and the start goes on. Costs one read."""
    threshold: float | str = "auto"
    """Accept threshold on the [0, 1] score for TPR / TNR / precision (:func:`resolve_threshold`):
    ``auto`` (Youden's J on the labelled scores seen so far in training, or on the file's scores in
    eval-verifier), a number in ``[0, 1]``, or the path of an earlier eval-verifier
    ``metrics.json`` (its calibrated threshold)."""
    max_response_chars: int = 6000
    """Longer candidate texts are truncated (head and tail kept, marker in the middle)."""
    batch_size: int = 8
    """Prompts per backend call: the engine reads in chunks of this many (chunks of one
    request run concurrently on the async path), >= 1."""
    cache_dir: str | None = None
    """Persistent score cache directory; ``None`` disables the cache."""
    on_error: Literal["abstain", "raise"] = "abstain"
    """When a backend fails after retries: return ``None`` (counted) or raise."""
    seed: int = 0
    """Seed of sampled analyses, PPT cycles and samples."""
    frames: FrameConfig = dataclasses.field(default_factory=FrameConfig)
    """Camera frames per read (count, size, stride; :class:`~densereward.frames.FrameConfig`),
    for a verifier that sees (``images=`` of ``progress_batch`` / ``score_batch``)."""

    def __post_init__(self) -> None:
        BACKENDS.check(self.backend)
        given = self._checked_backend_options()
        if self.backend_options is not None:
            object.__setattr__(self, "backend_options", FrozenOptions(given))
        for f in dataclasses.fields(self):  # from_dict coerces; VerifierConfig(...) is checked
            v = getattr(self, f.name)
            if f.type == "int" and (isinstance(v, bool) or not isinstance(v, numbers.Integral)):
                raise ConfigError(f"verifier.{f.name} must be an integer, got {v!r}")
        if not 2 <= self.granularity <= 26:
            raise ConfigError(f"verifier.granularity must be in [2, 26], got {self.granularity}")
        if self.n_repeats < 1:
            raise ConfigError(f"verifier.n_repeats must be >= 1, got {self.n_repeats}")
        if self.style not in ("direct", "reasoning"):
            raise ConfigError(f"verifier.style must be 'direct' or 'reasoning', got {self.style!r}")
        if self.on_error not in ("abstain", "raise"):
            raise ConfigError(
                f"verifier.on_error must be 'abstain' or 'raise', got {self.on_error!r}"
            )
        if self.beta <= 0:
            raise ConfigError(f"verifier.beta must be > 0, got {self.beta}")
        if not 0.0 <= self.min_mass < 1.0:
            raise ConfigError(f"verifier.min_mass must be in [0, 1), got {self.min_mass}")
        if isinstance(self.threshold, str):
            if self.threshold != "auto" and not self.threshold.endswith(".json"):
                raise ConfigError(
                    f"verifier.threshold={self.threshold!r}; use auto, a number in [0, 1], or the "
                    "path of an eval-verifier metrics.json"
                )
        elif not 0.0 <= self.threshold <= 1.0:
            raise ConfigError(f"verifier.threshold must be in [0, 1], got {self.threshold}")
        self._check_ranges()
        object.__setattr__(self, "frames", FrameConfig.coerce(self.frames))
        if isinstance(self.criteria, list):
            object.__setattr__(self, "criteria", tuple(self.criteria))
        if self.chat_template_kwargs is not None and (
            not isinstance(self.chat_template_kwargs, Mapping)
            or not all(isinstance(k, str) for k in self.chat_template_kwargs)
        ):
            raise ConfigError(
                "verifier.chat_template_kwargs must be a mapping of template variable names to "
                f"values, e.g. {{enable_thinking: false}}; got {self.chat_template_kwargs!r}"
            )

    def _check_ranges(self) -> None:
        """The model name, counts and limits: a value the engine would clamp or fail on later.

        Raises:
            ConfigError: naming the field and what it takes.
        """
        check_model_name("verifier.model", self.model)
        at_least = {"batch_size": 1, "max_reasoning_tokens": 1, "max_response_chars": 1}
        for name, low in at_least.items():
            if getattr(self, name) < low:
                raise ConfigError(f"verifier.{name} must be >= {low}, got {getattr(self, name)}")

    def _checked_backend_options(self) -> dict[str, Any]:
        """``backend_options`` with values coerced; sets :attr:`options`.

        Raises:
            ConfigError: for a non-mapping, an option the backend does not own (with the
                closest name and the list it does own), a value of the wrong type, or one
                the options dataclass refuses (a bad dtype, a missing ``base_url``, a range).
        """
        opts = self.backend_options if self.backend_options is not None else {}
        if not isinstance(opts, Mapping) or not all(isinstance(k, str) for k in opts):
            raise ConfigError(
                "verifier.backend_options must be a mapping of option names to values, e.g. "
                f"{{top_logprobs: 20}}; got {opts!r}"
            )
        cls = options_class(self.backend)
        known = field_names(cls)
        unknown = sorted(set(opts) - set(known))
        if unknown:
            shared = sorted(set(unknown) & set(field_names(VerifierConfig)))
            hint = f" ({', '.join(shared)}: shared, set verifier.<name>)" if shared else ""
            owners = _owners(set(unknown) - set(shared), self.backend)
            if owners:  # e.g. a file's transformers options with verifier.backend=openai
                hint += (
                    f" (options of {', '.join(owners)}: switching backends, set "
                    "verifier.backend_options={...} anew)"
                )
            raise ConfigError(
                f"unknown verifier.backend_options for backend {self.backend!r}: "
                f"{unknown_key_hints(unknown, known, prefix='verifier.backend_options.')}"
                f"{hint}; it takes {', '.join(known) or 'none'}"
            )
        hints = typing.get_type_hints(cls)
        given = {k: _coerce(hints[k], v, f"verifier.backend_options.{k}") for k, v in opts.items()}
        try:
            object.__setattr__(self, "_options", cls(**given))
        except (ConfigError, TypeError) as e:  # TypeError: a plugin's required field
            raise ConfigError(f"verifier.backend={self.backend!r}: {e}") from None
        return given

    @property
    def options(self) -> Any:
        """The backend's validated, frozen options (an instance of its options dataclass, e.g.
        :class:`~densereward.backend_options.OpenAIOptions`): ``backend_options`` with every
        default filled in."""
        return self._options  # type: ignore[attr-defined]

    def options_as(self, cls: type, **overrides: Any) -> Any:
        """The options as an instance of ``cls`` (a backend's options dataclass), with
        ``overrides`` applied: what a backend class built directly (``OpenAIBackend(config,
        top_logprobs=5)``) runs with. Fields of :attr:`options` that ``cls`` has carry over.

        Raises:
            ConfigError: for an override ``cls`` does not have, or a value it refuses.
        """
        base = self.options
        if type(base) is not cls:
            have = {f.name for f in dataclasses.fields(cls)}
            carried = {
                f.name: getattr(base, f.name)
                for f in dataclasses.fields(base)
                if f.name in have and f.name not in overrides
            }
            try:
                return cls(**carried, **overrides)
            except TypeError as e:
                raise ConfigError(f"{cls.__name__}: {e}") from None
        try:
            return dataclasses.replace(base, **overrides) if overrides else base
        except TypeError as e:
            raise ConfigError(f"{cls.__name__}: {e}") from None

    @staticmethod
    def refuse_unknown_keys(unknown: list[str], prefix: str, names: set[str]) -> None:
        """:func:`~densereward.config_files.from_dict`'s hook: a former ``verifier.<name>``
        field each backend owns now gets its new spelling.

        Raises:
            ConfigError: when ``unknown`` holds one of them (else returns).
        """
        moved = sorted(set(unknown) & _MOVED_TO_OPTIONS)
        if not moved:
            return
        spell = ", ".join(f"{prefix}backend_options.{k}" for k in moved)
        rest = [k for k in unknown if k not in moved]
        also = f"; unknown key(s): {unknown_key_hints(rest, names)}" if rest else ""
        raise ConfigError(
            f"{', '.join(prefix + k for k in moved)} moved into the backend's options: "
            f"set {spell} (e.g. {prefix}backend_options: {{{moved[0]}: ...}}){also}"
        )

    def answer_options(self) -> dict[str, Any]:
        """The options this config set that change a read's answer (for the score cache's
        key; transport settings such as URLs, timeouts and dtype are left out)."""
        return answer_options(self.options, self.backend_options or {})


def _owners(names: set[str], backend: str) -> list[str]:
    """The other built-in backends whose options include every one of ``names``."""
    out = []
    for other, entry in BACKEND_OPTIONS.items():
        if other == backend or not isinstance(entry, str) or not entry.startswith("densereward."):
            continue
        if names and names <= set(field_names(BACKEND_OPTIONS.load(other))):
            out.append(repr(other))
    return out


_MOVED_TO_OPTIONS = frozenset(
    {
        "base_url",
        "api_key_env",
        "dtype",
        "device",
        "n_samples",
        "max_concurrency",
        "requests_per_minute",
        "timeout_s",
        "max_retries",
        "gpu_memory_utilization",
    }
)
"""Former ``verifier.<name>`` fields each backend owns now (``verifier.backend_options.<name>``):
a config that still sets one gets a :class:`ConfigError` with the new spelling."""


def resolve_threshold(threshold: float | str) -> tuple[float | None, str]:
    """The accept threshold ``VerifierConfig.threshold`` stands for, and how it was chosen.

    Args:
        threshold: ``"auto"``, a number in ``[0, 1]``, or the path of an eval-verifier
            ``metrics.json`` (its ``threshold_calibration.threshold``: Youden's J on that file).

    Returns:
        ``(value, source)``: ``value`` is ``None`` for ``auto`` (the caller calibrates on its
        labelled scores), else the threshold; ``source`` says which, for reports and plots.

    Raises:
        ConfigError: for another string, a number outside ``[0, 1]``, or a ``metrics.json``
            that is missing or holds no calibrated threshold.

    >>> resolve_threshold(0.4), resolve_threshold("auto")[0]
    ((0.4, 'fixed 0.4'), None)
    """
    import json
    import math

    if threshold == "auto":
        return None, "auto (Youden's J)"
    if isinstance(threshold, str):
        path = Path(threshold)
        try:
            value = json.loads(path.read_text())["threshold_calibration"]["threshold"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"verifier.threshold={threshold!r}: cannot read a calibrated threshold from it "
                f"({type(exc).__name__}: {exc}); give an eval-verifier metrics.json, a number, or auto"
            ) from None
        if value is None or not 0.0 <= float(value) <= 1.0 or math.isnan(float(value)):
            raise ConfigError(
                f"{path}: threshold_calibration.threshold is {value!r}, not a number in [0, 1]"
            )
        return float(value), f"{float(value):.10g} from {path}"
    if not 0.0 <= float(threshold) <= 1.0:
        raise ConfigError(f"threshold must be in [0, 1], got {threshold}")
    return float(threshold), f"fixed {float(threshold):.10g}"


def check_model_name(field: str, model: str | None) -> None:
    """Refuse an empty model name (``None`` = the embedded model is fine).

    Raises:
        ConfigError: naming ``field``.
    """
    if model is not None and not str(model).strip():
        raise ConfigError(
            f"{field} is empty: leave it unset (null) for the embedded model, or give a "
            "Hugging Face id, an offline model name or a local path"
        )


def check_model_and_dtype(
    model_field: str, model: str | None, dtype_field: str, dtype: str
) -> None:
    """:func:`check_model_name`, and :func:`~densereward.backend_options.check_dtype`.

    Raises:
        ConfigError: naming the field (and the closest dtype name).
    """
    check_model_name(model_field, model)
    check_dtype(dtype, dtype_field)
