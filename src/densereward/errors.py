"""Exception hierarchy of densereward.

Every error the library raises on purpose derives from :class:`DenseRewardError`,
so callers can catch the library's errors without catching programming errors.
:class:`ConfigError` is for configuration only (a field, an argument that configures an
object, a command-line choice); faults met while running have their own types: the model
(:class:`BackendError`), data and values handed over at run time (:class:`DataError`), a call
in the wrong state (:class:`StateError`), the verifier's abstention (:class:`AbstentionError`).
"""

from __future__ import annotations

__all__ = [
    "DenseRewardError",
    "ConfigError",
    "ScoreTokenError",
    "BackendError",
    "BackendUnavailableError",
    "BackendRefusedError",
    "AbstentionError",
    "DataError",
    "StateError",
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


class BackendRefusedError(BackendError):
    """A verifier server refused a request (HTTP 4xx other than 408/409/425/429): the request is
    wrong for that server, and retrying it will not help.

    Attributes:
        status: the HTTP status.
        detail: the server's message.
        setting: the setting to change (e.g. ``verifier.backend_options.top_logprobs``), or
            ``None`` when the server's message names none.
        item_dependent: the refusal depends on the item (a prompt longer than the model's
            context), not on the configuration.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        detail: str = "",
        setting: str | None = None,
        item_dependent: bool = False,
    ):
        super().__init__(message)
        self.status = status
        self.detail = detail
        self.setting = setting
        self.item_dependent = item_dependent


class AbstentionError(DenseRewardError, RuntimeError):
    """The verifier abstained and the configuration asked to raise (``on_error='raise'``)."""


class DataError(DenseRewardError, ValueError):
    """Data handed to the library is malformed: a data set that cannot be loaded or has the
    wrong fields, or a value met at run time that breaks its contract (a progress function's
    value outside ``[0, 1]`` or wrong count, an observation of another environment, inputs of
    mismatched lengths or shapes)."""


class StateError(DenseRewardError, RuntimeError):
    """A call came in a state that does not allow it (an environment stepped before
    ``reset()``, ``step_wait()`` before ``step_async()``)."""


class RegistryError(ConfigError):
    """A registry refused a registration: the name is taken, the entry point is malformed, or
    the entry is not what the registry holds (a backend that is not a backend). A
    :class:`ConfigError`: registering an entry configures the library."""
