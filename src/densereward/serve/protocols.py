"""The HTTP contracts ``densereward serve`` speaks, one :class:`ServeProtocol` spec each.

A protocol is a path (or several), a ``parse`` of the request into the items to score and a
``respond`` that turns their rewards into the answer the client expects. :func:`make_app
<densereward.serve.app.make_app>` serves every protocol of :data:`SERVE_PROTOCOLS` (or those
``serve.protocols`` names) through the same micro-batcher, refusal handling, abstention
header and Prometheus counters (labelled with the protocol's name). Built in (the shapes and
their sources are in :mod:`densereward.serve.contracts`):

* ``get_reward`` (``POST /get_reward`` and ``POST /``): OpenRLHF's remote reward model;
* ``slime`` (``POST /slime``): slime's ``--rm-url`` (the answer is a JSON number);
* ``score`` (``POST /score``): the plain JSON API;
* ``rank`` (``POST /rank``): the verifier's ranking of candidates (no reward, nothing flagged).

A new trainer's contract is one file plus one line, without editing ``make_app``: a
:class:`ServeProtocol` in your module, and ``SERVE_PROTOCOLS.register("mine",
"my_pkg.protocol:PROTOCOL")`` or an entry point of the group ``densereward.serve_protocols``::

    [project.entry-points."densereward.serve_protocols"]
    mine = "my_pkg.protocol:PROTOCOL"
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, RegistryError
from ..registry import Registry, entry_point_group, instances_of
from .contracts import (
    Item,
    as_floats,
    parse_openrlhf,
    parse_rank,
    parse_score,
    parse_slime,
    slime_details,
)

__all__ = ["SERVE_PROTOCOLS", "ServeProtocol", "Item"]


@dataclass(frozen=True)
class ServeProtocol:
    """One HTTP contract of the reward server.

    The server decodes the body (UTF-8 JSON, bounded by ``serve.max_body_bytes``), then calls
    ``parse(body, query, config) -> (items, state)``; with ``serve.require_labels`` it refuses
    items without a label (naming ``label_field``); it scores ``items`` in the next micro-batch
    (or calls ``score``), and answers ``respond(rewards, state, config) -> (json, n_abstained)``
    with status 200 and the ``X-Densereward-Abstained`` header. A ``RequestError``
    (:mod:`densereward.serve.contracts`) raised by ``parse`` or ``respond`` is answered with its
    4xx status and message and counted under its reason.

    Example (an answer of ``{"values": [...]}``, abstentions as ``null``):

    >>> from densereward.serve.contracts import parse_score
    >>> P = ServeProtocol(
    ...     paths=("/values",),
    ...     parse=lambda body, query, cfg: (parse_score(body, cfg.max_items), None),
    ...     respond=lambda rewards, state, cfg: ({"values": list(rewards)},
    ...                                          sum(r is None for r in rewards)),
    ...     label_field="references")
    """

    paths: tuple[str, ...]
    """The ``POST`` paths it answers, each starting with ``/`` (one path per protocol across
    the server: a clash is a ``ConfigError`` when the app is built)."""
    parse: Callable[[Any, Mapping[str, str], Any], tuple[Sequence[Item], Any]]
    """``parse(body, query_params, serve_config) -> (items, state)``: the decoded JSON body, the
    query parameters and the :class:`~densereward.serve.app.ServeConfig`; ``state`` is anything
    ``respond`` needs (``None`` if nothing)."""
    respond: Callable[[Sequence[float | None], Any, Any], tuple[Any, int | None]]
    """``respond(rewards, state, serve_config) -> (json_body, n_abstained)``: ``rewards`` has one
    entry per item (``None`` = every reward function abstained); ``n_abstained`` is counted
    and sent in the header (``None``: not a reward answer, nothing to flag)."""
    label_field: str | None = None
    """The request field that carries the reference answers, named when
    ``serve.require_labels`` refuses an item without one; ``None``: labels are not checked."""
    score: Callable[[Any, Sequence[Item], Any], Awaitable[Any]] | None = None
    """``await score(service, items, state)`` instead of the micro-batched reward (``rank``
    asks the verifier directly); ``None``: ``await service.submit(items)``."""

    def __post_init__(self) -> None:
        paths = (self.paths,) if isinstance(self.paths, str) else tuple(self.paths)
        object.__setattr__(self, "paths", paths)
        if not paths or not all(isinstance(p, str) and p.startswith("/") for p in paths):
            raise RegistryError(
                f"ServeProtocol.paths must be paths starting with '/', got {paths!r}"
            )
        for name in ("parse", "respond"):
            if not callable(getattr(self, name)):
                raise RegistryError(f"ServeProtocol.{name} must be callable")
        if self.score is not None and not callable(self.score):
            raise RegistryError("ServeProtocol.score must be callable or None")


# -- the built-in contracts --------------------------------------------------------------------
def _openrlhf_parse(body: Any, query: Any, cfg: Any) -> tuple[list[Item], None]:
    return parse_openrlhf(body, cfg.max_items), None


def _openrlhf_respond(values: Sequence[float | None], state: Any, cfg: Any) -> tuple[Any, int]:
    rewards = as_floats(values, cfg.abstain_reward)
    abstained = [float(v is None) for v in values]
    return {
        "rewards": rewards,
        "scores": rewards,
        "extra_logs": {"densereward_abstained": abstained},
    }, int(sum(abstained))


def _slime_parse(body: Any, query: Any, cfg: Any) -> tuple[list[Item], bool]:
    details = slime_details(query)  # slime --reward-key reward: the flag travels with it
    return [parse_slime(body)], details


def _slime_respond(values: Sequence[float | None], details: bool, cfg: Any) -> tuple[Any, int]:
    (value,) = values
    reward = cfg.abstain_reward if value is None else float(value)
    if details:
        return {"reward": reward, "abstained": value is None}, int(value is None)
    return reward, int(value is None)


def _score_parse(body: Any, query: Any, cfg: Any) -> tuple[list[Item], None]:
    return parse_score(body, cfg.max_items), None


def _score_respond(values: Sequence[float | None], state: Any, cfg: Any) -> tuple[Any, int]:
    abstained = [v is None for v in values]
    return {"rewards": values, "abstained": abstained}, sum(abstained)


def _rank_parse(body: Any, query: Any, cfg: Any) -> tuple[list[Item], Any]:
    return [], parse_rank(body, cfg.max_items)


async def _rank_score(service: Any, items: Any, state: Any) -> Any:
    problem, candidates, pivots = state
    return await asyncio.to_thread(service.rank, problem, candidates, pivots)


def _rank_respond(result: Any, state: Any, cfg: Any) -> tuple[Any, None]:
    return result, None


OPENRLHF = ServeProtocol(("/get_reward", "/"), _openrlhf_parse, _openrlhf_respond, "labels")
SLIME = ServeProtocol(("/slime",), _slime_parse, _slime_respond, "label")
SCORE = ServeProtocol(("/score",), _score_parse, _score_respond, "references")
RANK = ServeProtocol(("/rank",), _rank_parse, _rank_respond, score=_rank_score)


SERVE_PROTOCOLS: Registry[ServeProtocol] = Registry(
    "serve protocol",
    group=entry_point_group("serve_protocols"),
    builtins={"get_reward": OPENRLHF, "slime": SLIME, "score": SCORE, "rank": RANK},
    check=instances_of(ServeProtocol, "serve protocol"),
)
"""Name (the ``endpoint`` label of the server's metrics, ``serve.protocols``) -> its
:class:`ServeProtocol` (plugins: entry-point group ``densereward.serve_protocols``)."""


def served_protocols(names: Sequence[str] | None) -> list[tuple[str, ServeProtocol]]:
    """``(name, protocol)`` of each protocol to serve: ``names`` in order, or every registered one.

    Raises:
        ConfigError: an unknown name (did-you-mean), or two protocols claiming one path.
    """
    chosen = list(names) if names is not None else SERVE_PROTOCOLS.names()
    out: list[tuple[str, ServeProtocol]] = []
    owner: dict[str, str] = {}
    for name in chosen:
        try:
            protocol = SERVE_PROTOCOLS.load(name)
        except ConfigError as e:
            raise ConfigError(f"serve.protocols: {e}") from None
        for path in protocol.paths:
            if path in owner:
                raise ConfigError(
                    f"serve protocols {owner[path]!r} and {name!r} both answer POST {path}; "
                    "leave one out of serve.protocols"
                )
            owner[path] = name
        out.append((name, protocol))
    return out
