"""One small registry for every extensible part: name -> lazy ``"module:attr"`` entry point.

Backends, reward kinds, the trainers ``densereward compare`` runs, environment describers and
the offline model names are each a :class:`Registry`. The design follows Gymnasium's
``register(id, entry_point="package.module:Name")`` and lm-eval's task registry:

* an entry is a ``"package.module:attr"`` string (imported on first :meth:`Registry.load`, so
  listing and validating names imports nothing) or the object itself;
* a name is registered once: registering a different entry under a taken name raises
  :class:`~densereward.errors.RegistryError` (the same entry again is a no-op);
* an unknown name is a :class:`~densereward.errors.ConfigError` listing the registered names
  with a did-you-mean (``difflib``), so ``--dry-run`` catches a misspelling;
* third-party packages add entries without importing anything of ours, through the
  entry-point group ``densereward.<kind>`` (``importlib.metadata``; read once, on the first
  lookup), e.g. in the plugin's ``pyproject.toml``::

      [project.entry-points."densereward.backends"]
      mine = "my_pkg.backend:MyBackend"

  after which ``verifier.backend: mine`` works from YAML and the CLI.

Example:
    >>> r = Registry("widget", group=None)
    >>> r.register("json", "json:dumps")
    'json:dumps'
    >>> r.names()
    ['json']
    >>> r.load("json")({"a": 1})
    '{"a": 1}'
    >>> r.check("jsn")
    Traceback (most recent call last):
    ...
    densereward.errors.ConfigError: unknown widget 'jsn'; available: ['json']. Did you mean 'json'?
"""

from __future__ import annotations

import difflib
import importlib
import logging
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any, Generic, TypeVar

from .errors import ConfigError, RegistryError

__all__ = ["Registry", "EntryPoint", "entry_point_group", "instances_of"]

_log = logging.getLogger(__name__)

T = TypeVar("T")
EntryPoint = str | object
"""A ``"package.module:attr"`` string (imported lazily) or the registered object itself."""


def entry_point_group(kind: str) -> str:
    """The ``importlib.metadata`` entry-point group of a registry kind: ``densereward.<kind>``."""
    return f"densereward.{kind}"


def instances_of(cls: type, kind: str, hint: str = "") -> Callable[[str, Any], None]:
    """A :class:`Registry` ``check`` that accepts only instances of ``cls`` (a spec class).

    Args:
        cls: the spec class every entry must be an instance of.
        kind: what the entries are, for the message (``"GRPO reward kind"``).
        hint: a sentence added to the message (how to make one).

    >>> check = instances_of(int, "widget", "use a number")
    >>> check("w", "1")
    Traceback (most recent call last):
    ...
    densereward.errors.RegistryError: widget 'w' must be a builtins.int, got '1'; use a number
    """

    def check(name: str, obj: Any) -> None:
        if not isinstance(obj, cls):
            raise RegistryError(
                f"{kind} {name!r} must be a {cls.__module__}.{cls.__qualname__}, got {obj!r}"
                + (f"; {hint}" if hint else "")
            )

    return check


class Registry(Generic[T]):
    """Names -> lazily imported objects of one kind, with plugins from an entry-point group.

    Args:
        kind: what the entries are, singular, for messages (``"verifier backend"``).
        group: the entry-point group read for plugins (``"densereward.backends"``), or
            ``None`` for a registry without plugins.
        builtins: the built-in entries, ``{name: "module:attr"}``.
        error: the exception class for an entry that cannot be imported (default
            :class:`~densereward.errors.ConfigError`; backends raise
            ``BackendUnavailableError``).
        check: ``check(name, obj)`` raises :class:`~densereward.errors.RegistryError` when
            ``obj`` is not what this registry holds; run on an object when it is registered,
            on a ``"module:attr"`` entry when it is first imported (:meth:`load`).

    Thread-safety: registration is meant for import time; lookups are read-only.
    """

    def __init__(
        self,
        kind: str,
        *,
        group: str | None,
        builtins: dict[str, EntryPoint] | None = None,
        error: type[Exception] = ConfigError,
        check: Callable[[str, Any], None] | None = None,
    ) -> None:
        self.kind = kind
        self.group = group
        self._error = error
        self._check = check
        self._entries: dict[str, EntryPoint] = {}
        self._plugins_loaded = group is None
        for name, entry in (builtins or {}).items():
            self.register(name, entry)

    # -- registration ---------------------------------------------------------------------------
    def register(self, name: str, entry: EntryPoint | None = None) -> Any:
        """Register ``entry`` under ``name``; without ``entry``, a decorator.

        Args:
            name: a non-empty string.
            entry: ``"package.module:attr"`` or the object; ``None`` = decorator form
                (``@registry.register("mine")``).

        Returns:
            ``entry`` (decorator form: a decorator returning its argument unchanged).

        Raises:
            RegistryError: ``name`` is taken by a different entry, ``name`` / ``entry`` is
                malformed, or the registry's ``check`` refuses the object.
        """
        if entry is None:

            def deco(obj: Any) -> Any:
                self.register(name, obj)
                return obj

            return deco
        if not isinstance(name, str) or not name.strip():
            raise RegistryError(f"a {self.kind} name must be a non-empty string, got {name!r}")
        if isinstance(entry, str):
            module, _, attr = entry.partition(":")
            if not module or not attr:
                raise RegistryError(
                    f"{self.kind} {name!r}: entry point {entry!r} must look like "
                    "'package.module:attr'"
                )
        current = self._entries.get(name)
        if current is not None and not _same(current, entry):
            raise RegistryError(
                f"{self.kind} {name!r} is already registered ({describe(current)}); register "
                f"yours under another name (registered: {sorted(self._entries)})"
            )
        if self._check is not None and not isinstance(entry, str):
            self._check(name, entry)
        self._entries[name] = entry
        return entry

    # -- lookup ---------------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Registered names, sorted (built-ins, plugins, runtime registrations; imports nothing
        but the entry-point metadata)."""
        self._load_plugins()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self._load_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def check(self, name: str) -> None:
        """Raise unless ``name`` is registered (imports nothing).

        Raises:
            ConfigError: naming the registered entries and the closest matches.
        """
        if name in self:
            return
        close = difflib.get_close_matches(str(name), list(self._entries), n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ConfigError(f"unknown {self.kind} {name!r}; available: {self.names()}.{hint}")

    def entry(self, name: str) -> EntryPoint:
        """The registered entry of ``name`` as given (the string is not imported)."""
        self.check(name)
        return self._entries[name]

    def load(self, name: str) -> T:
        """The object registered under ``name``, importing its module on first use.

        Raises:
            ConfigError: for an unknown name.
            RegistryError: when the registry's ``check`` refuses the imported object.
            Exception: this registry's ``error`` class when the entry cannot be imported or
                the module has no such attribute.
        """
        entry = self.entry(name)
        if not isinstance(entry, str):
            return entry  # type: ignore[return-value]
        module, _, attr = entry.partition(":")
        try:
            obj: Any = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as e:
            raise self._error(
                f"{self.kind} {name!r}: cannot load {entry!r} ({type(e).__name__}: {e})"
            ) from e
        if self._check is not None:
            self._check(name, obj)
        return obj

    def items(self) -> list[tuple[str, EntryPoint]]:
        """``(name, entry)`` pairs, sorted by name (entries not imported)."""
        self._load_plugins()
        return sorted(self._entries.items())

    # -- plugins --------------------------------------------------------------------------------
    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for ep in _entry_points(self.group or ""):
            try:
                self.register(ep.name, ep.value)
            except RegistryError as e:
                _log.warning("densereward: plugin entry point %s ignored: %s", ep, e)

    def reload_plugins(self) -> None:
        """Read the entry-point group again (after installing a plugin in a running process)."""
        self._plugins_loaded = self.group is None
        self._load_plugins()

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, group={self.group!r}, names={sorted(self._entries)})"


def _entry_points(group: str) -> list[Any]:
    if not group:
        return []
    return list(metadata.entry_points(group=group))


def _same(a: EntryPoint, b: EntryPoint) -> bool:
    if a is b or (isinstance(a, str) and a == b):
        return True
    if isinstance(a, str) != isinstance(b, str):  # "mod:Cls" vs the class it names
        s, o = (a, b) if isinstance(a, str) else (b, a)
        return s == describe(o)
    return False


def describe(entry: EntryPoint) -> str:
    """``"module:qualname"`` of an entry, for messages."""
    if isinstance(entry, str):
        return entry
    qual: Callable[..., Any] | Any = getattr(entry, "__qualname__", None) or type(entry).__name__
    return f"{getattr(entry, '__module__', '?')}:{qual}"
