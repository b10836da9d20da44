"""A verl ``custom_reward_function`` that asks a running ``densereward serve`` for the reward.

Standalone on purpose (standard library only, no relative import): verl loads this file by
path. In the verl config::

    custom_reward_function:
      path: /path/to/site-packages/densereward/serve/verl_reward.py   # densereward serve --verl-path prints it
      name: compute_score            # or compute_score_batch with reward_model.reward_manager=batch
      reward_kwargs:
        url: http://127.0.0.1:5000   # or set DENSEREWARD_SERVE_URL

Signatures as verl calls them (verl b178a3c, Jan 2026): the naive reward manager
(``verl/workers/reward_manager/naive.py``) calls ``compute_score(data_source=...,
solution_str=..., ground_truth=..., extra_info=..., **reward_kwargs)`` once per response and
takes a float (or a dict with ``score``); the batch manager (``batch.py``) calls
``compute_score(data_sources=..., solution_strs=..., ground_truths=..., extra_infos=...,
**reward_kwargs)`` once and takes a list. verl passes only the decoded response, not the
prompt: the problem text comes from ``extra_info["question"]`` (verl's GSM8K and MATH
preprocessing put it there), else ``extra_info["problem"]`` or ``extra_info["prompt"]``.

**Without the problem.** A response whose ``extra_info`` holds none of them is not sent to the
verifier (it would read the response with no problem): it abstains (``abstain_reward``,
``"abstained": 1.0``), and one warning per process says how many and the fix (put the question
into ``extra_info`` in verl's data preprocessing, as verl's ``examples/data_preprocess/gsm8k.py``
puts ``question`` and ``index`` there). ``missing_problem="score"`` (a ``reward_kwargs``) scores
such responses without the problem instead, as asked.

**Abstentions.** verl's reward tensor takes numbers only: an abstained reward comes back as
``abstain_reward`` (default 0.0), so each result is a dict ``{"score": reward, "abstained": 1.0
or 0.0}``, which verl's naive, batch and DAPO managers and its reward loop accept (the score
from ``"score"``, the other keys into ``reward_extra_info``, logged per data source at
validation: ``abstained/mean`` is the abstention rate). ``return_dict=False`` (a
``reward_kwargs``) returns the bare floats, for managers that take numbers only (PRIME).

**Retries.** A server that is restarting (a rolling restart: connection refused or reset, 502,
503 from a draining server, 504, 408, 429) is retried ``max_retries`` times (default 8) with
exponential backoff from ``retry_base_s`` (1 s, doubling, at most ``retry_max_s`` = 30 s, with
jitter; a ``Retry-After`` is honoured), about two minutes in all, each attempt bounded by
``timeout_s``; any other 4xx is raised at once with the server's message. All three are
``reward_kwargs``.

**Unknown keywords.** A keyword that is neither verl's own (the ones above, plus ``tokenizer``,
``reward_router_address`` and ``reward_model_tokenizer`` that newer verl reward loops may pass)
nor one of this module's ``reward_kwargs`` (``url``, ``abstain_reward``, ``timeout_s``,
``max_retries``, ``retry_base_s``, ``retry_max_s``, ``return_dict``, ``missing_problem``) is
ignored with one warning per process per key, naming it, the closest valid one and the list (a
misspelt ``reward_kwargs`` would otherwise do nothing silently; raising would crash verl's
reward worker).

**Pickling.** verl loads this file by path under the module name ``custom_module`` and Ray
pickles the function to its workers; a second load replaces that module. When the
``densereward`` package is importable, the functions loaded by path *are* the package's
(``densereward.serve.verl_reward.compute_score``), so they pickle by reference however often
and under whatever name the file was loaded; without the package (the file copied alone),
cloudpickle, when present, is told to pickle them by value.
"""

from __future__ import annotations

import difflib
import http.client
import json
import logging
import os
import random
import sys
import time
import urllib.error
import urllib.request
from typing import Any

__all__ = ["compute_score", "compute_score_batch"]


logger = logging.getLogger(__name__)

MISSING_PROBLEM = ("abstain", "score")
"""What ``missing_problem`` may say of a response whose ``extra_info`` holds no problem."""

_said: set[str] = set()  # the once-per-process warnings already given


def _problem(extra_info: Any) -> str | None:
    """The problem text of ``extra_info`` (``question``, ``problem`` or ``prompt``), or ``None``."""
    if isinstance(extra_info, dict):
        for key in ("question", "problem", "prompt"):
            value = extra_info.get(key)
            if isinstance(value, list):  # chat messages
                value = "\n\n".join(str(m.get("content", "")) for m in value if isinstance(m, dict))
            if isinstance(value, str) and value.strip():
                return value
    return None


def _say_missing_problem(n: int, total: int, missing_problem: str) -> None:
    """Warn once per process that responses came without the problem, and what was done."""
    if "missing_problem" in _said:
        return
    _said.add("missing_problem")
    done = (
        "scored without it (reward_kwargs missing_problem: score)"
        if missing_problem == "score"
        else "not scored: they abstained (abstain_reward, abstained 1.0)"
    )
    logger.warning(
        "densereward verl_reward: %d of %d responses came without the problem (extra_info has "
        "no 'question', 'problem' or 'prompt'; verl passes only the response), so the verifier "
        "would read them with no problem; %s. Fix: put the question into extra_info in verl's "
        "data preprocessing, as verl's examples/data_preprocess/gsm8k.py puts 'question' and "
        "'index' into each row's extra_info. Said once per process",
        n,
        total,
        done,
    )


REWARD_KWARGS = (
    "url",
    "abstain_reward",
    "timeout_s",
    "max_retries",
    "retry_base_s",
    "retry_max_s",
    "return_dict",
    "missing_problem",
)
"""The ``reward_kwargs`` this module reads (see the module docstring)."""

VERL_KWARGS = (
    "data_source",
    "solution_str",
    "ground_truth",
    "extra_info",
    "data_sources",
    "solution_strs",
    "ground_truths",
    "extra_infos",
    "tokenizer",
    "reward_router_address",
    "reward_model_tokenizer",
)
"""Keywords verl itself may pass besides ``reward_kwargs``: accepted and not used."""


def _say_unknown_kwargs(kwargs: dict[str, Any]) -> None:
    """Warn once per process per key of ``kwargs`` that is neither verl's nor ours."""
    for key in kwargs:
        if key in VERL_KWARGS or f"kwarg:{key}" in _said:
            continue
        _said.add(f"kwarg:{key}")
        close = difflib.get_close_matches(key, REWARD_KWARGS + VERL_KWARGS, n=1)
        logger.warning(
            "densereward verl_reward: unknown keyword %r ignored%s. Valid reward_kwargs: %s. "
            "Fix: correct it in custom_reward_function.reward_kwargs. Said once per process",
            key,
            f" (did you mean {close[0]!r}?)" if close else "",
            ", ".join(REWARD_KWARGS),
        )


RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
"""HTTP statuses worth another attempt (a server restarting, draining or overloaded)."""


def _retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` of delta-seconds (what ``densereward serve`` sends), else ``None``."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _post(
    url: str,
    payload: dict[str, Any],
    timeout_s: float,
    max_retries: int = 8,
    retry_base_s: float = 1.0,
    retry_max_s: float = 30.0,
) -> dict[str, Any]:
    """POST ``payload`` to ``{url}/score``, retrying as the module docstring says.

    Raises:
        RuntimeError: naming the URL and the last error, when the retries are spent or the
            server refused the request (a 4xx other than 408 / 429).
    """
    body = json.dumps(payload).encode()
    target = url.rstrip("/") + "/score"
    for attempt in range(int(max_retries) + 1):
        req = urllib.request.Request(
            target, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        wait: float | None = None
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - the user's URL
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", "replace")[:300]
            error = f"HTTP {e.code} from {target}: {detail}"
            if e.code not in RETRY_STATUS:
                raise RuntimeError(f"densereward serve refused the request: {error}") from None
            wait = _retry_after(e.headers.get("Retry-After"))
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
            error = f"{type(e).__name__}: {e} ({target})"
        if attempt == int(max_retries):
            break
        backoff = min(retry_base_s * 2**attempt * (1 + 0.25 * random.random()), retry_max_s)
        time.sleep(min(wait, retry_max_s) if wait is not None else backoff)
    raise RuntimeError(
        f"densereward serve did not answer after {int(max_retries)} retries: {error} "
        "(is it running? reward_kwargs.url / DENSEREWARD_SERVE_URL)"
    )


def compute_score_batch(
    data_sources: list[Any],
    solution_strs: list[str],
    ground_truths: list[Any],
    extra_infos: list[Any] | None = None,
    *,
    url: str | None = None,
    abstain_reward: float = 0.0,
    timeout_s: float = 300.0,
    max_retries: int = 8,
    retry_base_s: float = 1.0,
    retry_max_s: float = 30.0,
    return_dict: bool = True,
    missing_problem: str = "abstain",
    **kwargs: Any,
) -> list[dict[str, float]] | list[float]:
    """Rewards of ``solution_strs`` from ``densereward serve`` (verl's batch reward manager).

    Returns:
        ``(B,)`` dicts ``{"score": reward, "abstained": 1.0 or 0.0}``, the reward being
        ``abstain_reward`` where the server abstained, or where ``extra_info`` held no problem
        (with ``missing_problem="abstain"``, the default; see the module docstring); with
        ``return_dict=False`` the floats.

    Raises:
        ValueError: for a ``missing_problem`` other than ``abstain`` / ``score``.
        RuntimeError: when the server refused the request or did not answer after the retries.
    """
    if kwargs:
        _say_unknown_kwargs(kwargs)
    if missing_problem not in MISSING_PROBLEM:
        raise ValueError(
            f"reward_kwargs missing_problem={missing_problem!r}; use abstain (default) or score"
        )
    url = url or os.environ.get("DENSEREWARD_SERVE_URL", "http://127.0.0.1:5000")
    extras = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    problems = [_problem(e) for e in extras]
    n_missing = sum(p is None for p in problems)
    if n_missing:
        _say_missing_problem(n_missing, len(problems), missing_problem)
    send = [i for i, p in enumerate(problems) if p is not None or missing_problem == "score"]
    rewards: list[Any] = [None] * len(problems)
    if send:
        payload = {
            "problems": [problems[i] or "" for i in send],
            "responses": [str(solution_strs[i]) for i in send],
            "references": [
                None if ground_truths[i] is None else str(ground_truths[i]) for i in send
            ],
        }
        got = _post(url, payload, timeout_s, max_retries, retry_base_s, retry_max_s)["rewards"]
        for i, r in zip(send, got, strict=True):
            rewards[i] = r
    scores = [float(abstain_reward) if r is None else float(r) for r in rewards]
    if not return_dict:
        return scores
    return [
        {"score": s, "abstained": float(r is None)} for s, r in zip(scores, rewards, strict=True)
    ]


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    **kwargs: Any,
) -> dict[str, float] | float:
    """The reward of one response (verl's naive reward manager), ``{"score", "abstained"}`` (a
    float with ``return_dict=False``); see :func:`compute_score_batch`."""
    return compute_score_batch(
        [data_source], [solution_str], [ground_truth], [extra_info], **kwargs
    )[0]


def _share_the_installed_functions() -> None:
    """Loaded by path (``custom_module``), use the installed package's functions, so they pickle
    by reference to ``densereward.serve.verl_reward`` (see the module docstring)."""
    here = sys.modules.get(__name__)
    try:
        from densereward.serve import verl_reward as installed
    except Exception:  # noqa: BLE001 - any failure to import the package: stay standalone
        installed = None
    if installed is not None and installed is not here:
        for name in __all__:
            globals()[name] = getattr(installed, name)
        return
    if installed is None and here is not None:
        try:
            import cloudpickle
        except ImportError:
            return
        cloudpickle.register_pickle_by_value(here)


if __name__ != "densereward.serve.verl_reward":
    _share_the_installed_functions()
