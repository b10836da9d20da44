"""Backends by name: thin functions over :data:`densereward.backend_options.BACKENDS`.

The table itself lives in the leaf :mod:`densereward.backend_options` (a
:class:`~densereward.registry.Registry` of ``"module:Class"`` entry points, beside each
backend's options dataclass), so :class:`~densereward.config.VerifierConfig` validates names
and options without importing a backend. Nothing is imported until a backend is asked for
(:func:`get_backend_class`, :func:`create_backend`). A third party adds a backend with
:func:`register_backend` or the entry-point group ``densereward.backends`` (its options
dataclass through ``densereward.backend_options``); a name can be registered once.

Example:
    >>> "openai" in available_backends()
    True
    >>> check_backend_name("opnai")
    Traceback (most recent call last):
    ...
    densereward.errors.ConfigError: unknown verifier backend 'opnai'; available: ['openai', 'sampled', 'transformers', 'vllm']. Did you mean 'openai'?
"""

from __future__ import annotations

from typing import Any

from ..backend_options import BACKEND_OPTIONS, BACKENDS, options_class
from ..registry import EntryPoint

__all__ = [
    "register_backend",
    "available_backends",
    "check_backend_name",
    "get_backend_class",
    "backend_options_class",
    "backend_class_for",
    "create_backend",
]


def register_backend(
    name: str, entry_point: EntryPoint | None = None, *, options: EntryPoint | None = None
) -> Any:
    """Register a backend under ``name``: a ``"module:ClassName"`` string or the class itself.

    Without ``entry_point`` it returns a class decorator (``@register_backend("mine")``).
    The class is called as ``cls(config)`` with a :class:`~densereward.config.VerifierConfig`
    whose ``options`` is an instance of the backend's options dataclass, and must implement
    :class:`~densereward.backends.base.VerifierBackend`. A string entry point is imported only
    when the backend is first created, as Gymnasium's ``entry_point`` is.

    Args:
        name: the name ``verifier.backend`` selects, a non-empty string.
        entry_point: ``"package.module:ClassName"`` or a class; ``None`` = decorator form.
        options: the frozen dataclass of its ``verifier.backend_options`` (a class or a
            ``"module:Class"`` string in a module light enough to import when a config is
            validated); ``None`` = the class attribute ``options_class`` of the backend,
            else no options.

    Returns:
        ``entry_point`` (or, in the decorator form, a decorator returning the class).

    Raises:
        RegistryError: (a ``ConfigError``) if ``name`` is already registered to a different
            entry point (names are never overwritten, built-in or not; the same entry point
            again is a no-op), if ``name`` / ``entry_point`` is malformed, or if a class is not
            a backend (:func:`~densereward.backend_options.check_backend_class`: a string
            entry is checked when first imported).
    """
    if entry_point is None:

        def deco(cls: type) -> type:
            register_backend(name, cls, options=options)
            return cls

        return deco
    BACKENDS.register(name, entry_point)  # a class is checked now, a string when imported
    if options is not None:
        BACKEND_OPTIONS.register(name, options)
    return entry_point


def available_backends() -> list[str]:
    """Names of the registered backends, sorted (imports nothing but entry-point metadata)."""
    return BACKENDS.names()


def check_backend_name(name: str) -> None:
    """Raise unless ``name`` is a registered backend (imports nothing).

    Raises:
        ConfigError: for an unknown name, listing the registered ones and suggesting close
            matches (``difflib``).
    """
    BACKENDS.check(name)


def get_backend_class(name: str) -> Any:
    """The backend class registered under ``name``, importing its module on first use.

    Raises:
        ConfigError: for an unknown name (see :func:`check_backend_name`).
        BackendUnavailableError: when a string entry point's module cannot be imported or
            has no such attribute.
    """
    return BACKENDS.load(name)


def backend_options_class(name: str) -> type:
    """The frozen options dataclass of backend ``name``
    (:func:`densereward.backend_options.options_class`)."""
    return options_class(name)


def backend_class_for(config: Any) -> Any:
    """The class :func:`create_backend` builds for ``config``: the one registered under
    ``config.backend``, except that ``transformers`` on an image-text-to-text model (its
    ``config.json`` has ``vision_config``) is :class:`~.hf_vision.VisionTransformersBackend`.

    Raises:
        ConfigError, BackendUnavailableError: as :func:`get_backend_class`, or when an offline
            model name cannot be prepared (:func:`~.hf.resolve_model_path`).
    """
    cls = get_backend_class(config.backend)
    if config.backend == "transformers":
        from .hf import resolve_model_path
        from .hf_vision import VisionTransformersBackend
        from .models import is_image_text_model

        if is_image_text_model(resolve_model_path(config)):
            return VisionTransformersBackend
    return cls


def create_backend(config: Any) -> Any:
    """Build the backend for ``config``: ``cls(config)`` with ``cls`` from :func:`backend_class_for`.

    Args:
        config: a :class:`~densereward.config.VerifierConfig` (its ``options`` validated).

    Raises:
        ConfigError: for an unknown backend name or an option the backend rejects.
        BackendUnavailableError: when the backend cannot be loaded or reached.
    """
    return backend_class_for(config)(config)
