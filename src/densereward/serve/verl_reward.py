"""A verl ``custom_reward_function`` that asks a running ``densereward serve`` for the reward.

Standalone on purpose (standard library only, no relative import): verl loads this file by
path. In the verl config::

    custom_reward_function:
      path: /path/to/site-packages/densereward/serve/verl_reward.py   # python -c "import densereward.serve.verl_reward as m; print(m.__file__)"
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
preprocessing put it there), else ``extra_info["prompt"]``, else is empty.

An abstained reward comes back as ``abstain_reward`` (default 0.0): verl's reward tensor
takes numbers only.
"""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any

__all__ = ["compute_score", "compute_score_batch"]


def _problem(extra_info: Any) -> str:
    if isinstance(extra_info, dict):
        for key in ("question", "problem", "prompt"):
            value = extra_info.get(key)
            if isinstance(value, str):
                return value
            if isinstance(value, list):  # chat messages
                return "\n\n".join(str(m.get("content", "")) for m in value if isinstance(m, dict))
    return ""


def _post(url: str, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    req = urllib.request.Request(
        url.rstrip("/") + "/score",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - the user's URL
        return json.loads(resp.read())


def compute_score_batch(
    data_sources: list[Any],
    solution_strs: list[str],
    ground_truths: list[Any],
    extra_infos: list[Any] | None = None,
    *,
    url: str | None = None,
    abstain_reward: float = 0.0,
    timeout_s: float = 300.0,
    **kwargs: Any,
) -> list[float]:
    """Rewards of ``solution_strs`` from ``densereward serve`` (verl's batch reward manager).

    Returns:
        ``(B,)`` floats: the served reward, ``abstain_reward`` where it abstained.
    """
    url = url or os.environ.get("DENSEREWARD_SERVE_URL", "http://127.0.0.1:5000")
    extras = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    payload = {
        "problems": [_problem(e) for e in extras],
        "responses": [str(s) for s in solution_strs],
        "references": [None if g is None else str(g) for g in ground_truths],
    }
    rewards = _post(url, payload, timeout_s)["rewards"]
    return [float(abstain_reward) if r is None else float(r) for r in rewards]


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    **kwargs: Any,
) -> float:
    """The reward of one response (verl's naive reward manager); see :func:`compute_score_batch`."""
    return compute_score_batch(
        [data_source], [solution_str], [ground_truth], [extra_info], **kwargs
    )[0]
