"""The request and answer shapes ``densereward serve`` speaks, parsed and checked.

Each parser takes the decoded JSON body and returns :class:`Item` s (one per reward to
compute) or raises :class:`RequestError` (the server answers it with its ``status`` and the
message). Sources of the external contracts (read at the commits named):

* **OpenRLHF** remote reward model (``--remote_rm_url http://HOST:PORT/get_reward``):
  ``openrlhf/utils/agent.py`` (``SingleTurnAgentExecutor._fetch_rewards_via_http``,
  OpenRLHF 3c3be62, Aug 2026) POSTs ``{"query": [str], "prompts": [str], "labels": [...]}``
  where ``query`` is the prompt plus the response decoded with ``skip_special_tokens=False``
  (so it holds the chat template's markup and the end-of-sequence token), and reads
  ``rewards`` (the reward), ``scores`` (falling back to ``rewards``) and ``extra_logs`` (each
  value turned into a logged tensor) of the JSON answer; its own server
  (``openrlhf/cli/serve_rm.py``) answers ``{"rewards": [...], "scores": [...],
  "extra_logs": {name: [...]}}``, one entry per query.
* **slime** ``--rm-type remote_rm --rm-url URL``: ``slime/rollout/rm_hub/__init__.py``
  (``remote_rm``, slime 624b824, Aug 2026) POSTs ``{"prompt": ..., "response": str,
  "label": ...}`` for one sample and uses the JSON answer itself as the reward: a number.
* the plain API: ``/score`` ``{"problems": [str], "responses": [str], "references":
  [str | null]}`` -> ``{"rewards": [float | null], ...}`` and ``/rank`` ``{"problem": str,
  "candidates": [str]}``.

The body itself (:func:`parse_body`) must be UTF-8 JSON nested at most :data:`MAX_DEPTH` deep,
with no lone surrogate in a string (400 otherwise). Every refusal carries a ``reason`` the
server counts it under (``densereward_refusals_total{endpoint,reason}``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Item",
    "RequestError",
    "parse_openrlhf",
    "parse_slime",
    "slime_details",
    "parse_score",
    "parse_rank",
    "parse_body",
    "check_labels",
    "split_query",
    "strip_end_markers",
]

from .split import SplitError, clean_prompt, split_query, strip_end_markers

MAX_DEPTH = 32
"""Deepest nesting of arrays and objects a body may have (the contracts need 4)."""


class RequestError(ValueError):
    """A request the server refuses; ``status`` is the HTTP status (4xx), ``reason`` the
    label it is counted under (``body``, ``too_large``, ``invalid``, ``split``, ``labels``)."""

    def __init__(self, message: str, status: int = 422, reason: str = "invalid"):
        super().__init__(message)
        self.status = status
        self.reason = reason


def parse_body(raw: bytes) -> Any:
    """The decoded JSON body.

    Raises:
        RequestError: 400 (reason ``body``) for a body that is not UTF-8 JSON, is nested
            deeper than :data:`MAX_DEPTH`, or holds a string with a lone surrogate (it could
            not be sent on to the verifier).
    """
    try:
        body = json.loads(raw)
    except RecursionError:
        raise RequestError(
            f"the body is nested too deeply to parse; at most {MAX_DEPTH} levels", 400, "body"
        ) from None
    except ValueError as e:
        raise RequestError(f"the body is not JSON: {e}", 400, "body") from None
    stack = [(body, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise RequestError(
                    "the body holds a string with a lone surrogate (\\ud800-\\udfff), not text",
                    400,
                    "body",
                ) from None
        elif isinstance(value, (list, dict)):
            if depth > MAX_DEPTH:
                raise RequestError(
                    f"the body is nested more than {MAX_DEPTH} levels deep", 400, "body"
                )
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, depth + 1) for v in items)
            if isinstance(value, dict):
                stack.extend((k, depth + 1) for k in value)
    return body


def check_labels(items: Sequence[Item], field: str, why: str) -> None:
    """Refuse ``items`` when one has no label (``serve.require_labels``).

    Raises:
        RequestError: 422 (reason ``labels``) naming the first item without one.
    """
    missing = [i for i, it in enumerate(items) if it.label is None]
    if missing:
        raise RequestError(
            f"{len(missing)} of {len(items)} items have no {field!r} (first: item {missing[0]}): "
            f"serve.require_labels is on ({why}), so the reward is not computed without the "
            "reference answer (the reference-free judge is the mode docs/reward_hacking.md "
            f"measures as easy to game); send {field!r}, or start the server with "
            "serve.require_labels=false to score without it",
            422,
            "labels",
        )


@dataclass(frozen=True)
class Item:
    """One reward to compute: the problem (prompt text), the response and the reference."""

    problem: str
    response: str
    label: str | None = None


def _list_of_str(body: Mapping[str, Any], key: str, *, required: bool = True) -> list[str] | None:
    value = body.get(key)
    if value is None:
        if required:
            raise RequestError(f"field {key!r} is missing: a list of strings")
        return None
    if not isinstance(value, list):
        raise RequestError(f"field {key!r} must be a list of strings, got {type(value).__name__}")
    for i, v in enumerate(value):
        if not isinstance(v, str):
            raise RequestError(
                f"field {key!r} must be a list of strings; item {i} is {type(v).__name__} "
                f"({_short(v)})"
            )
    return value


def _short(value: Any, limit: int = 40) -> str:
    """``repr(value)``, cut to ``limit`` characters (a message never echoes a whole body)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _labels(body: Mapping[str, Any], key: str, n: int, like: str) -> list[str | None]:
    value = body.get(key)
    if value is None:
        return [None] * n
    if not isinstance(value, list):
        raise RequestError(f"field {key!r} must be a list, got {type(value).__name__}")
    if len(value) != n:
        raise RequestError(f"field {key!r} has {len(value)} items, {like} has {n}")
    return [None if v is None else str(v) for v in value]


def parse_openrlhf(body: Any, max_items: int) -> list[Item]:
    """Items of an OpenRLHF ``{"query", "prompts", "labels"}`` request (``prompts``, ``labels`` optional)."""
    body = _mapping(body)
    queries = _list_of_str(body, "query") or []
    _check_count(len(queries), max_items, "query")
    prompts = _list_of_str(body, "prompts", required=False)
    if prompts is not None and len(prompts) != len(queries):
        raise RequestError(f"field 'prompts' has {len(prompts)} items, 'query' has {len(queries)}")
    labels = _labels(body, "labels", len(queries), "'query'")
    items = []
    for i, q in enumerate(queries):
        try:
            problem, response = split_query(q, prompts[i] if prompts else None)
        except SplitError as e:
            raise RequestError(f"query[{i}]: {e}", 422, "split") from None
        items.append(Item(problem, response, labels[i]))
    return items


def _prompt_text(prompt: Any) -> str:
    """slime's ``sample.prompt``: a string, or chat messages (the user turns are the problem)."""
    if isinstance(prompt, str):
        return clean_prompt(prompt)
    if isinstance(prompt, list) and all(isinstance(m, Mapping) for m in prompt):
        users = [str(m.get("content", "")) for m in prompt if m.get("role") == "user"]
        return "\n\n".join(users) if users else str(prompt[-1].get("content", "")) if prompt else ""
    raise RequestError("field 'prompt' must be a string or a list of chat messages")


def parse_slime(body: Any) -> Item:
    """The item of a slime ``{"prompt", "response", "label"}`` request."""
    body = _mapping(body)
    response = body.get("response")
    if not isinstance(response, str):
        raise RequestError("field 'response' must be a string")
    label = body.get("label")
    return Item(
        _prompt_text(body.get("prompt", "")),
        strip_end_markers(response),
        None if label is None else str(label),
    )


def slime_details(query: Mapping[str, str]) -> bool:
    """Whether ``/slime`` answers ``{"reward", "abstained"}`` (``?details=1`` or ``?details``,
    for slime's ``--reward-key reward``) rather than the bare number.

    Raises:
        RequestError: 422 (reason ``invalid``) for a ``details`` that is not a boolean.
    """
    value = str(query.get("details", "0")).strip().lower()
    if value not in ("0", "1", "true", "false", ""):
        raise RequestError(f"query parameter 'details' must be 1/true or 0/false, got {value!r}")
    return value in ("1", "true", "")  # a bare ?details asks for them


def parse_score(body: Any, max_items: int) -> list[Item]:
    """Items of a ``/score`` ``{"problems", "responses", "references"}`` request."""
    body = _mapping(body)
    problems = _list_of_str(body, "problems") or []
    responses = _list_of_str(body, "responses") or []
    if len(problems) != len(responses):
        raise RequestError(
            f"field 'problems' has {len(problems)} items, 'responses' has {len(responses)}"
        )
    _check_count(len(problems), max_items, "responses")
    refs = _labels(body, "references", len(problems), "'responses'")
    return [
        Item(p, strip_end_markers(r), ref)
        for p, r, ref in zip(problems, responses, refs, strict=True)
    ]


def parse_rank(body: Any, max_items: int) -> tuple[str, list[str], int]:
    """``(problem, candidates, pivots)`` of a ``/rank`` request (``pivots`` default 2)."""
    body = _mapping(body)
    problem = body.get("problem")
    if not isinstance(problem, str):
        raise RequestError("field 'problem' must be a string")
    candidates = _list_of_str(body, "candidates") or []
    if len(candidates) < 2:
        raise RequestError(f"field 'candidates' needs at least 2 items, got {len(candidates)}")
    _check_count(len(candidates), max_items, "candidates")
    pivots = body.get("pivots", 2)
    if not isinstance(pivots, int) or isinstance(pivots, bool) or pivots < 1:
        raise RequestError(f"field 'pivots' must be an integer >= 1, got {pivots!r}")
    if pivots > len(candidates):
        raise RequestError(
            f"field 'pivots' must be at most the number of candidates ({len(candidates)}), "
            f"got {pivots}"
        )
    return problem, candidates, pivots


def _mapping(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise RequestError(f"the body must be a JSON object, got {type(body).__name__}")
    return body


def _check_count(n: int, max_items: int, key: str) -> None:
    if n == 0:
        raise RequestError(f"field {key!r} is empty")
    if n > max_items:
        raise RequestError(
            f"{n} items in {key!r}; at most {max_items} per request (serve.max_items)",
            413,
            "too_large",
        )


def as_floats(values: Sequence[float | None], fallback: float) -> list[float]:
    """Numbers for the contracts that take only numbers: an abstention becomes ``fallback``."""
    return [fallback if v is None else float(v) for v in values]
