"""Backends by name: a declarative table of ``"module:ClassName"`` entry points.

Like Gymnasium's ``register(id, entry_point="package.module:Name")``, the table names where
each backend lives and nothing is imported until a backend is asked for
(:func:`get_backend_class`, :func:`create_backend`), so listing or validating names
(:func:`available_backends`, :func:`check_backend_name`) costs no import at all. A third
party adds its own backend with :func:`register_backend`; a name can be registered once.

Example:
    >>> "openai" in available_backends()
    True
    >>> check_backend_name("opnai")
    Traceback (most recent call last):
    ...
    densereward.errors.ConfigError: unknown verifier backend 'opnai'; available: ['openai', 'sampled', 'transformers', 'vllm']. Did you mean 'openai'?
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import BackendUnavailableError, ConfigError, RegistryError

__all__ = [
    "register_backend",
    "available_backends",
    "check_backend_name",
    "get_backend_class",
    "backend_option_types",
    "create_backend",
]

EntryPoint = str | type

_REGISTRY: dict[str, EntryPoint] = {
    "transformers": "densereward.backends.hf:TransformersBackend",
    "vllm": "densereward.backends.vllm_offline:VLLMBackend",
    "openai": "densereward.backends.openai_http:OpenAIBackend",
    "sampled": "densereward.backends.sampled:SampledBackend",
}


def register_backend(name: str, entry_point: EntryPoint | None = None) -> Any:
    """Register a backend under ``name``: a ``"module:ClassName"`` string or the class itself.

    Without ``entry_point`` it returns a class decorator (``@register_backend("mine")``).
    The class is called as ``cls(config, **config.backend_options)`` with a
    :class:`~densereward.config.VerifierConfig` and must implement
    :class:`~densereward.backends.base.VerifierBackend`. A string entry point is imported
    only when the backend is first created, as Gymnasium's ``entry_point`` is.

    Args:
        name: the name ``verifier.backend`` selects, a non-empty string.
        entry_point: ``"package.module:ClassName"`` or a class; ``None`` = decorator form.

    Returns:
        ``entry_point`` (or, in the decorator form, a decorator returning the class).

    Raises:
        RegistryError: if ``name`` is already registered to a different entry point (names
            are never overwritten, built-in or not; registering the same entry point again is
            a no-op), or if ``name`` / ``entry_point`` is malformed.
    """
    if entry_point is None:

        def deco(cls: type) -> type:
            register_backend(name, cls)
            return cls

        return deco
    if not isinstance(name, str) or not name.strip():
        raise RegistryError(f"a backend name must be a non-empty string, got {name!r}")
    if isinstance(entry_point, str):
        module, _, attr = entry_point.partition(":")
        if not module or not attr:
            raise RegistryError(
                f"backend {name!r}: entry point {entry_point!r} must look like "
                "'package.module:ClassName'"
            )
    elif not callable(entry_point):
        raise RegistryError(
            f"backend {name!r}: entry point must be a 'module:ClassName' string or a class, "
            f"got {type(entry_point).__name__}"
        )
    current = _REGISTRY.get(name)
    if current is not None and current != entry_point:
        raise RegistryError(
            f"verifier backend {name!r} is already registered ({_describe(current)}); "
            f"register yours under another name (registered: {sorted(_REGISTRY)})"
        )
    _REGISTRY[name] = entry_point
    return entry_point


def available_backends() -> list[str]:
    """Names of the registered backends, sorted (imports nothing)."""
    return sorted(_REGISTRY)


def check_backend_name(name: str) -> None:
    """Raise unless ``name`` is a registered backend (imports nothing).

    Raises:
        ConfigError: for an unknown name, listing the registered ones and suggesting close
            matches (``difflib``).
    """
    if name in _REGISTRY:
        return
    close = difflib.get_close_matches(str(name), list(_REGISTRY), n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ConfigError(f"unknown verifier backend {name!r}; available: {sorted(_REGISTRY)}.{hint}")


def get_backend_class(name: str) -> Callable[..., Any]:
    """The backend class registered under ``name``, importing its module on first use.

    Raises:
        ConfigError: for an unknown name (see :func:`check_backend_name`).
        BackendUnavailableError: when a string entry point's module cannot be imported or
            has no such attribute.
    """
    check_backend_name(name)
    entry = _REGISTRY[name]
    if not isinstance(entry, str):
        return entry
    module, _, attr = entry.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise BackendUnavailableError(
            f"verifier backend {name!r}: cannot load {entry!r} ({type(e).__name__}: {e})"
        ) from e


def backend_option_types(name: str) -> tuple[dict[str, Any], bool]:
    """The keyword options the backend's constructor takes besides the config.

    Read from the constructor signatures along the class's MRO: a ``**kwargs`` that a
    subclass passes on to its parent's ``__init__`` (``sampled`` -> ``openai``) adds the
    parent's options; one that reaches no further ``__init__`` (``vllm``'s
    ``**engine_kwargs``, passed to ``vllm.LLM``) accepts any name.

    Returns:
        ``(types, open)``: option name -> annotated type (``Any`` when unannotated), and
        whether names outside ``types`` are passed through.

    Raises:
        ConfigError, BackendUnavailableError: as :func:`get_backend_class`.
    """
    cls = get_backend_class(name)
    types: dict[str, Any] = {}
    classes = [c for c in getattr(cls, "__mro__", (cls,)) if "__init__" in vars(c)]
    for c in classes:
        if c is object:
            return types, True
        init = vars(c)["__init__"]
        try:
            hints = typing.get_type_hints(init)
        except Exception:  # noqa: BLE001 - an unresolvable annotation: fall back to Any
            hints = {}
        params = list(inspect.signature(init).parameters.values())[2:]  # self, config
        for p in params:
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD):
                types.setdefault(p.name, hints.get(p.name, Any))
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return types, False
    return types, True


def create_backend(config: Any) -> Any:
    """Build the backend named by ``config.backend``: ``cls(config, **config.backend_options)``.

    Args:
        config: a :class:`~densereward.config.VerifierConfig`.

    Raises:
        ConfigError: for an unknown backend name or an option the backend rejects.
        BackendUnavailableError: when the backend cannot be loaded or reached.
    """
    options: Mapping[str, Any] = config.backend_options or {}
    return get_backend_class(config.backend)(config, **options)


def _describe(entry: EntryPoint) -> str:
    if isinstance(entry, str):
        return entry
    return f"{getattr(entry, '__module__', '?')}:{getattr(entry, '__qualname__', entry)!s}"
