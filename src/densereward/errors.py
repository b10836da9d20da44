"""Exception hierarchy of densereward.

Every error the library raises on purpose derives from :class:`DenseRewardError`,
so callers can catch the library's errors without catching programming errors.
"""

from __future__ import annotations

__all__ = [
    "DenseRewardError",
    "ConfigError",
    "ScoreTokenError",
    "BackendError",
    "BackendUnavailableError",
    "AbstentionError",
    "DataError",
    "RegistryError",
]


class DenseRewardError(Exception):
    """Base class of every error densereward raises on purpose."""


class ConfigError(DenseRewardError, ValueError):
    """A configuration value is invalid; the message names the field and the fix."""


class ScoreTokenError(DenseRewardError, ValueError):
    """A score token does not map to exactly one token id in the verifier's tokenizer."""


class BackendError(DenseRewardError, RuntimeError):
    """A verifier backend failed to answer (after its retries)."""


class BackendUnavailableError(BackendError):
    """A verifier backend could not be reached or loaded at start-up."""


class AbstentionError(DenseRewardError, RuntimeError):
    """The verifier abstained and the configuration asked to raise (``on_error='raise'``)."""


class DataError(DenseRewardError, ValueError):
    """A data set could not be loaded or has the wrong fields."""


class RegistryError(DenseRewardError, ValueError):
    """A registry refused a registration: the name is taken, or the entry point is malformed."""
