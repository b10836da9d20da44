"""Math task data for GRPO: MATH / GSM8K from a JSONL path or the Hub, reasoning-gym offline.

Every loader returns a :class:`datasets.Dataset` in TRL's conversational prompt format with
the columns the reward functions read (TRL passes every extra column to them):

* ``prompt`` -- ``[{"role": "system", ...}, {"role": "user", "content": problem}]``;
* ``problem`` -- the problem text (what the verifier sees);
* ``answer`` -- the reference final answer (MATH's ``answer``, the last ``\\boxed{}`` of its
  ``solution``, GSM8K's ``#### N``, or reasoning-gym's answer);
* ``level`` -- MATH difficulty 1-5 (``None`` for GSM8K; reasoning-gym's ``difficulty`` if an
  integer, else ``None``);
* ``source`` -- where the row came from.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import DataError

__all__ = [
    "DataConfig",
    "SYSTEM_PROMPT",
    "check_source",
    "load_tasks",
    "looks_like_path",
    "to_conversational",
]

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a careful mathematician. Solve the problem step by step, then give the final "
    "answer in the form \\boxed{answer}."
)
"""System prompt of every GRPO task: reason, then put the final answer in ``\\boxed{}``."""

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class DataConfig:
    """Where the GRPO tasks come from (YAML section ``data:``)."""

    source: str = "reasoning_gym"
    """A ``.jsonl`` path (MATH or GSM8K fields), a Hub id (e.g. ``DigitalLearningGmbH/MATH-lighteval``),
    or ``reasoning_gym`` (procedurally generated, verifiable, no network)."""
    path: str | None = None
    """Alias of ``source`` for local files (``data.path=../shared/data/math500/test.jsonl``); wins over it."""
    split: str = "train"
    """Hub split (ignored for local files)."""
    subset: str | None = None
    """Hub config name (e.g. ``main`` for ``openai/gsm8k``, a subject for ``EleutherAI/hendrycks_math``)."""
    limit: int | None = None
    """Keep the first ``limit`` rows (after shuffling when ``shuffle``); ``None`` = all."""
    shuffle: bool = False
    """Shuffle rows with ``seed`` before ``limit``."""
    seed: int = 0
    """Seed of shuffling and of reasoning-gym generation."""
    levels: tuple[int, ...] | None = None
    """Keep only these MATH levels (e.g. ``[1, 2]`` for a weak policy); ``None`` = all."""
    task: str = "basic_arithmetic"
    """reasoning-gym task name (``basic_arithmetic``, ``chain_sum``, ``gsm_symbolic``, ...)."""
    size: int = 256
    """reasoning-gym: number of generated problems."""
    task_config: dict[str, Any] | None = None
    """reasoning-gym: keyword arguments of the task's dataset config (difficulty knobs), e.g.
    ``{min_terms: 2, max_terms: 2, max_digits: 1}`` for ``basic_arithmetic``; unknown keys
    raise :class:`DataError`."""
    system_prompt: str | None = SYSTEM_PROMPT
    """System message; ``None`` = user message only."""

    def __post_init__(self) -> None:
        if self.limit is not None and self.limit < 1:
            raise DataError(f"data.limit must be >= 1 or null, got {self.limit}")
        if self.size < 1:
            raise DataError(f"data.size must be >= 1, got {self.size}")
        if isinstance(self.levels, list):
            object.__setattr__(self, "levels", tuple(int(v) for v in self.levels))

    @property
    def kind(self) -> str:
        """``"jsonl"``, ``"hub"`` or ``"reasoning_gym"`` (raises :class:`DataError` otherwise)."""
        src = self.path or self.source
        if src in ("reasoning_gym", "reasoning-gym"):
            return "reasoning_gym"
        if src.endswith((".jsonl", ".json")) or Path(src).exists():
            return "jsonl"
        if looks_like_path(src):
            raise DataError(
                f"data {src!r} looks like a local path (not a Hub id owner/name) but is not an "
                "existing .jsonl file; fix the path, e.g. --data ../shared/data/math500/test.jsonl"
            )
        if _HUB_ID.match(src):
            return "hub"
        raise DataError(
            f"data.source={src!r} is neither a .jsonl file, a Hub id (owner/name) nor 'reasoning_gym'"
        )


def looks_like_path(src: str) -> bool:
    """A value a user meant as a file: ``./x``, ``../x``, ``/x``, ``~/x``, more than one ``/``, a
    backslash, or a first component that is a local directory (``data/math500``)."""
    if src.startswith((".", "/", "~")) or "\\" in src or src.count("/") > 1:
        return True
    return "/" in src and Path(src.split("/", 1)[0]).is_dir()


def check_source(cfg: DataConfig) -> tuple[str | None, str | None]:
    """Check the data source of a dry run without the network: what a run would load.

    Local sources (a JSONL file, reasoning-gym) are loaded with :func:`load_tasks`, so a
    missing file, a malformed row or an empty filter result fails here. A Hub id is not
    downloaded; with ``HF_HUB_OFFLINE`` set it is looked up in the local datasets cache, else
    the Hub is asked as for a model id (one request, a 3 s timeout:
    :func:`densereward.backends.models.hub_unreachable`) and one that does not answer is a
    problem (:func:`_hub_data_problem`), as the run's start would stop on it.

    Returns:
        ``(description, problem)``: ``problem`` is ``None``, or why the run would fail here
        although the config is valid (a Hub id that cannot be reached offline: then
        ``description`` is ``None``, one line per check), or how many rows a local source drops
        and why (rows without a reference answer). ``description`` says how many problems
        there are and, when ``data.levels`` or ``data.limit`` kept fewer, of how many and how
        they were chosen (``"data: jsonl 'x.jsonl': 64 of 500 problems loaded (data.limit=64:
        the first 64 after shuffling with data.seed=0)"``).

    Raises:
        DataError: for a missing or malformed local file, a path-looking value that is not
            a ``.jsonl`` file, or no usable rows.
    """
    kind = cfg.kind
    src = cfg.path or cfg.source
    if kind != "hub":
        rows, dropped, capped = _load_rows(cfg)
        made = (
            f" (data.size={cfg.size}, generated with data.seed={cfg.seed})"
            if kind == "reasoning_gym" and not capped
            else ""
        )
        return f"data: {_what(cfg)}: {capped or f'{len(rows)} problems loaded{made}'}", dropped
    line = f"data: Hub id {src!r} (split {cfg.split!r}) -- NOT downloaded"
    from huggingface_hub import constants

    if not constants.HF_HUB_OFFLINE:
        from .backends.models import hub_unreachable

        why = hub_unreachable()
        if why is not None:
            return None, _hub_data_problem(cfg, why)
        return line + ", the Hub answers: downloaded when the run starts", None
    try:
        import datasets

        datasets.load_dataset_builder(src, cfg.subset)
    except Exception:  # noqa: BLE001 - any failure means: not in the offline cache
        return None, (
            f"the Hub id {src!r} cannot be reached offline (HF_HUB_OFFLINE=1) and is not in the "
            "local datasets cache: the run would fail here. Run where the Hub is reachable (and "
            "unset HF_HUB_OFFLINE), or point data.path at a local JSONL copy, or use "
            "data.source=reasoning_gym"
        )
    return line + ", found in the local cache", None


def _hub_data_problem(cfg: DataConfig, why: str) -> str:
    """One line: the Hub data set of ``cfg`` cannot be reached (``why``), and the ways out.

    The dry run lists it under ``!!`` and a run's start stops with it at once, instead of
    waiting through huggingface_hub's retries (about 30 s).
    """
    src = cfg.path or cfg.source
    return (
        f"data: the Hub data set {src!r} cannot be reached ({why}): point data.path at a local "
        "JSONL copy (e.g. data.path=../shared/data/math500/test.jsonl), or use "
        "data.source=reasoning_gym (offline generated tasks), or, with a copy in the local "
        "datasets cache, set HF_HUB_OFFLINE=1 so that nothing waits for the Hub"
    )


def _level(value: Any) -> int | None:
    """MATH level as an int: ``3`` or ``"Level 3"`` -> 3; anything else -> None."""
    if value is None:
        return None
    if isinstance(value, int):
        return value
    m = re.search(r"\d+", str(value))
    return int(m.group()) if m else None


def _why_no_answer(row: dict[str, Any]) -> str:
    """Why a row has no reference answer, naming the field (and a misspelt one it does have)."""
    if "answer" not in row and "solution" not in row:
        near = [k for k in row if str(k).strip().lower() in ("answer", "solution")]
        why = "no 'answer' field (nor a 'solution' ending in \\boxed{})"
        if near:
            why += (
                f"; they have {', '.join(repr(k) for k in near)}: field names are case-sensitive, "
                "rename it 'answer'"
            )
        return why
    if row.get("answer") is None or not str(row.get("answer")).strip():
        if row.get("solution"):
            return "an empty 'answer' and no \\boxed{} answer in 'solution'"
        return "an empty 'answer'"
    return "no final answer in 'answer'"


def _normalise(row: dict[str, Any], source: str) -> dict[str, Any]:
    """Map one MATH / GSM8K / reasoning-gym record to ``problem``, ``answer``, ``level``."""
    from .rewards.math import reference_answer

    problem = row.get("problem") or row.get("question")
    if not problem:
        raise DataError(
            f"{source}: a row has neither 'problem' (MATH) nor 'question' (GSM8K): keys {sorted(row)}"
        )
    answer = reference_answer(row.get("answer"), row.get("solution"))
    return {
        "problem": str(problem),
        "answer": answer,
        "level": _level(row.get("level")),
        "source": source,
    }


def to_conversational(
    problem: str, system_prompt: str | None = SYSTEM_PROMPT
) -> list[dict[str, str]]:
    """The TRL conversational prompt for one problem.

    >>> to_conversational("1+1?", None)
    [{'role': 'user', 'content': '1+1?'}]
    """
    msgs = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return msgs + [{"role": "user", "content": problem}]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise DataError(
            f"data file not found: {path} (use e.g. data.path=../shared/data/math500/test.jsonl)"
        )
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}:{i}: not valid JSON ({exc.msg})") from None
    return rows


def _read_hub(cfg: DataConfig) -> list[dict[str, Any]]:
    import datasets
    from huggingface_hub import constants

    from .backends.models import hub_unreachable

    src = cfg.path or cfg.source
    offline = bool(constants.HF_HUB_OFFLINE)
    if not offline and (why := hub_unreachable()) is not None:  # at once, not after retries
        raise DataError(_hub_data_problem(cfg, why))
    try:
        ds = datasets.load_dataset(src, cfg.subset, split=cfg.split)
    except Exception as exc:  # offline, unknown id, missing config: all surface as DataError
        splits = re.search(r"[Ss]hould be one of \[([^\]]*)\]", str(exc))
        fix = (
            f"set data.split to one of its splits ({splits.group(1)})"
            if splits
            else (
                "connect to the Hub and unset HF_HUB_OFFLINE (it is set)"
                if offline
                else "check the id (and data.subset, data.split)"
            )
        )
        raise DataError(
            f"could not load Hub data set {src!r} (split {cfg.split!r}"
            + (f", subset {cfg.subset!r}" if cfg.subset else "")
            + f"): {type(exc).__name__}: {str(exc)[:300]}. Fix: {fix}, or point data.path at a "
            "local JSONL copy (e.g. data.path=../shared/data/math500/test.jsonl), or use "
            "data.source=reasoning_gym for the offline generated tasks."
        ) from exc
    return [dict(r) for r in ds]


def _read_reasoning_gym(cfg: DataConfig) -> list[dict[str, Any]]:
    try:
        import reasoning_gym
    except ImportError as exc:
        raise DataError(
            "data.source=reasoning_gym needs the package: pip install reasoning-gym"
        ) from exc
    try:
        ds = reasoning_gym.create_dataset(
            cfg.task, size=cfg.size, seed=cfg.seed, **dict(cfg.task_config or {})
        )
    except Exception as exc:
        raise DataError(f"reasoning-gym task {cfg.task!r} could not be created: {exc}") from exc
    rows = []
    for item in ds:
        meta = item.get("metadata") or {}
        diff = meta.get("difficulty")
        rows.append(
            {
                "question": item["question"],
                "answer": str(item["answer"]),
                "level": diff if isinstance(diff, int) else None,
            }
        )
    return rows


def _what(cfg: DataConfig) -> str:
    """The source in the data line's words: ``jsonl 'x.jsonl'``, ``reasoning_gym task 'y'``."""
    kind = cfg.kind
    if kind == "reasoning_gym":
        return f"reasoning_gym task {cfg.task!r}"
    return f"{'jsonl' if kind == 'jsonl' else 'Hub id'} {cfg.path or cfg.source!r}"


def _capped(cfg: DataConfig, usable: int, of_levels: int, kept: int) -> str | None:
    """When ``data.levels`` / ``data.limit`` kept fewer than the ``usable`` rows (those with a
    reference answer; ``of_levels`` of them of those levels), of how many and how the ``kept``
    ones were chosen: ``"64 of 500 problems loaded (data.limit=64: the first 64 after
    shuffling with data.seed=0)"``; ``None`` when all were kept."""
    if kept == usable:
        return None
    why = []
    if of_levels < usable:
        why.append(
            f"data.levels={list(cfg.levels)}"
            + (f": {of_levels} of them" if kept < of_levels else "")
        )
    if kept < of_levels:
        order = f"after shuffling with data.seed={cfg.seed}" if cfg.shuffle else "in file order"
        those = " of those" if of_levels < usable else ""
        why.append(f"data.limit={cfg.limit}: the first {kept}{those} {order}")
    return f"{kept} of {usable} problems loaded ({'; '.join(why)})"


def _load_rows(cfg: DataConfig) -> tuple[list[dict[str, Any]], str | None, str | None]:
    """The normalised rows after the filters, a note on the rows dropped (``None``: none) and
    one on the rows the filters left out (:func:`_capped`; ``None``: none).

    Raises:
        DataError: when no row is left, naming why (the missing field, or the level filter).
    """
    kind = cfg.kind
    src = cfg.path or cfg.source
    if kind == "jsonl":
        raw = _read_jsonl(Path(src))
    elif kind == "hub":
        raw = _read_hub(cfg)
    else:
        raw = _read_reasoning_gym(cfg)
        src = f"reasoning_gym/{cfg.task}"
    if not raw:
        raise DataError(f"no rows in {src!r}: it is empty")

    rows, why_dropped = [], Counter()
    for r in raw:
        row = _normalise(r, str(src))
        if row["answer"]:
            rows.append(row)
        else:
            why_dropped[_why_no_answer(r)] += 1
    reasons = "; ".join(f"{n} with {why}" for why, n in why_dropped.most_common())
    if not rows:
        raise DataError(
            f"no usable rows in {src!r}: none of its {len(raw)} rows has a reference answer: {reasons}"
        )
    dropped = None
    if why_dropped:
        n_dropped = sum(why_dropped.values())
        dropped = f"{src}: {n_dropped} of {len(raw)} rows dropped (no reference answer): {reasons}"
    usable = len(rows)
    if cfg.levels is not None:
        levels = sorted({r["level"] for r in rows}, key=lambda v: (v is None, v))
        rows = [r for r in rows if r["level"] in cfg.levels]
        if not rows:
            raise DataError(
                f"no rows of data.levels={list(cfg.levels)} in {src!r}: the levels there are "
                f"{levels} (null = no level field)"
            )
    of_levels = len(rows)
    if cfg.shuffle:
        import random

        random.Random(cfg.seed).shuffle(rows)
    if cfg.limit is not None:
        rows = rows[: cfg.limit]
    return rows, dropped, _capped(cfg, usable, of_levels, len(rows))


def load_tasks(config: DataConfig | dict[str, Any] | None = None):
    """Load GRPO tasks as a conversational :class:`datasets.Dataset`.

    Args:
        config: A :class:`DataConfig` or the YAML ``data:`` mapping (unknown keys raise).

    Returns:
        A ``datasets.Dataset`` with columns ``prompt``, ``problem``, ``answer``, ``level``,
        ``source`` (see the module docstring); rows whose reference answer cannot be found
        are dropped, with a warning that counts them and names the missing field; when
        ``levels`` / ``limit`` keep fewer rows, an INFO line says of how many and how chosen.

    Raises:
        DataError: for a missing file, a malformed row, an unreachable Hub id (the message
            names the fix), or an empty result (naming why: the missing answer field, or the
            levels the file has).
    """
    import datasets

    from .config_files import from_dict

    if config is None:
        cfg = DataConfig()
    elif isinstance(config, DataConfig):
        cfg = config
    else:
        cfg = from_dict(DataConfig, config, prefix="data.")
    rows, dropped, capped = _load_rows(cfg)
    if dropped:
        logger.warning("%s", dropped)
    if capped:  # data.levels / data.limit kept fewer than the source has: said once
        logger.info("data: %s: %s", _what(cfg), capped)
    for r in rows:
        r["prompt"] = to_conversational(r["problem"], cfg.system_prompt)
    features = datasets.Features(
        {
            "prompt": [{"role": datasets.Value("string"), "content": datasets.Value("string")}],
            "problem": datasets.Value("string"),
            "answer": datasets.Value("string"),
            "level": datasets.Value("int64"),
            "source": datasets.Value("string"),
        }
    )
    return datasets.Dataset.from_list(rows, features=features)
