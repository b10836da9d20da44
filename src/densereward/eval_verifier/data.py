"""Loading labelled response files and earlier scores (``densereward eval-verifier``'s input)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import DataError
from ..io import read_jsonl

__all__ = [
    "GSM8K_GENERATORS",
    "ROW_SHAPES",
    "load_gsm8k_model_solutions",
    "load_responses",
    "load_scores",
    "align_scores",
    "score_coverage",
]

GSM8K_GENERATORS = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")
"""Generators of the GSM8K example model solutions (Cobbe et al. 2021): 6B and 175B GPT-3,
each fine-tuned ("finetuning") and the verification-trained variant ("verification")."""


ROW_SHAPES = (
    "a row is either {problem, response, is_correct, generator} (optional problem_id, family, "
    "reference) or a GSM8K model-solutions line {question, <generator>: {solution, is_correct}, "
    "...}"
)
"""The two row shapes :func:`load_responses` accepts, in words (its errors end with it)."""


def _is_gsm8k(rec: Mapping[str, Any]) -> bool:
    """A GSM8K model-solutions line: ``question`` and a generator object with ``solution``."""
    return "question" in rec and any(
        isinstance(v, Mapping) and "solution" in v for v in rec.values()
    )


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def _label(value: Any, where: str) -> bool:
    """``is_correct`` as a bool: a JSON boolean, or the number 0 or 1.

    A string (``"false"``, ``"true"``) is refused, not read: ``bool("false")`` is true in most
    pipelines, so a quoted label is a classic source of flipped labels, and guessing here would
    hide it from the export that wrote it. The error's advice fits the string: a boolean word or
    0/1 (any case, spaces ignored) is told the JSON to write unquoted; any other string (``"maybe"``)
    is told to relabel the row.

    Raises:
        DataError: ``<where>: is_correct must be ...``, naming the value and the fix.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    shown = json.dumps(value)[:60]
    if isinstance(value, str):
        word = value.strip().lower()
        fix = (
            f"write it as the JSON {word}, unquoted"
            if word in ("true", "false", "0", "1")
            else "relabel the row with true/false or 0/1"
        )
        raise DataError(
            f"{where}: is_correct must be a JSON boolean (true/false) or 0/1, got the string "
            f'{shown}: {fix} (a quoted "false" is true to bool() in most pipelines, so a '
            "string label is refused, not guessed)"
        )
    raise DataError(f"{where}: is_correct must be a JSON boolean (true/false) or 0/1, got {shown}")


class _Copies:
    """Finds a row that repeats an earlier one exactly (every field equal): it would be counted
    twice; and one that repeats it but for ``is_correct``: the same response labelled both
    correct and incorrect, which no verifier can match. Two samples that read alike stay two
    rows when a field tells them apart."""

    def __init__(self, path: str | Path) -> None:
        self.path = path
        self.first: dict[str, tuple[int, Any]] = {}

    def check(self, rec: Mapping[str, Any], line: int, what: str) -> None:
        """Remember ``rec`` (read at ``line``, 1-based) or refuse it as a copy or a conflict.

        Raises:
            DataError: naming both ``file:line``, ``what`` the row is, and the fix.
        """
        label = rec.get("is_correct")
        rest = {k: v for k, v in rec.items() if k != "is_correct"}
        digest = _sha1(json.dumps(rest, sort_keys=True, ensure_ascii=False))
        earlier, label0 = self.first.setdefault(digest, (line, label))
        if earlier == line:
            return
        if label0 == label or "is_correct" not in rec:  # true and 1 are one label
            raise DataError(
                f"{self.path}:{line}: the same row as {self.path}:{earlier} ({what}): it would be "
                "counted twice; remove the copy, or, for two samples that read alike, give each a "
                'field that tells them apart (e.g. "sample": 0 and 1)'
            )
        raise DataError(
            f"{self.path}:{line}: the same row as {self.path}:{earlier} ({what}) but labelled "
            f"is_correct={json.dumps(label)} here and {json.dumps(label0)} there: the same "
            "response cannot be both; keep the right label, or, for two samples that read alike, "
            'give each a field that tells them apart (e.g. "sample": 0 and 1)'
        )


def _text(value: Any, field: str, where: str) -> str:
    """``value`` if it is a string; a null or another type is a broken export, not an empty
    answer (``""`` is one, and is scored as such)."""
    if isinstance(value, str):
        return value
    raise DataError(
        f'{where}: {field} must be a string ("" for an empty one), got {json.dumps(value)[:60]}: '
        "fix the export that wrote this row"
    )


def _generator(value: Any, where: str) -> str:
    """``value`` if it is a non-empty string: a null, a number or a blank name is a broken
    export (``str()`` would make a null the generator "None", a model of its own)."""
    if isinstance(value, str) and value.strip():
        return value
    raise DataError(
        f"{where}: generator must be a non-empty string (the name of the model that wrote the "
        f"response), got {json.dumps(value)[:60]}: fix the export that wrote this row"
    )


def load_gsm8k_model_solutions(
    path: str | Path, *, limit: int | None = None, allow_unlabelled: bool = False
) -> list[dict[str, Any]]:
    """Rows of the GSM8K example model solutions (``gsm8k/model_solutions_dev.jsonl``).

    Each input line is one problem with four generators (:data:`GSM8K_GENERATORS`); it
    becomes four rows ``{problem_id, problem, response, is_correct, generator, family,
    reference}`` with ``problem_id = "gsm8k-dev-<line>"`` and ``family`` the model size
    (``6b``/``175b``). The responses keep GSM8K's ``<<a*b=c>>`` calculator annotations.

    Args:
        path: the JSONL file.
        limit: keep the first ``limit`` problems (``None`` = all).

    Raises:
        DataError: naming the file and line: a line that is not a JSON object (a cut-off last
            line included), or one that lacks ``question`` or a generator's
            ``solution``/``is_correct``, or whose ``solution`` is not a string (a null), or
            that repeats an earlier line exactly (both lines named).
    """
    rows: list[dict[str, Any]] = []
    copies = _Copies(path)
    for i, rec in enumerate(read_jsonl(path, strict=True)):
        if limit is not None and i >= limit:
            break
        if "question" not in rec:
            raise DataError(
                f"{path}:{i + 1}: GSM8K model-solutions row lacks 'question' (has "
                f"{sorted(rec)}); {ROW_SHAPES}"
            )
        gens = [g for g in rec if isinstance(rec[g], Mapping) and "solution" in rec[g]]
        if not gens:
            raise DataError(
                f"{path}:{i + 1}: no generator object with 'solution' and 'is_correct' (has "
                f"{sorted(rec)}); {ROW_SHAPES}"
            )
        copies.check(rec, i + 1, "the same question and solutions")
        for g in gens:
            sol = rec[g]
            if sol.get("is_correct") is None and not allow_unlabelled:
                raise DataError(f"{path}:{i + 1}: generator {g!r} lacks 'is_correct'")
            rows.append(
                {
                    "problem_id": f"gsm8k-dev-{i}",
                    "problem": rec["question"],
                    "response": _text(sol["solution"], "solution", f"{path}:{i + 1}:{g}"),
                    "is_correct": None
                    if sol.get("is_correct") is None
                    else _label(sol["is_correct"], f"{path}:{i + 1}:{g}"),
                    "generator": g,
                    "family": g.split("_", 1)[0],
                    "reference": rec.get("ground_truth"),
                    "source": f"{path}:{i + 1}",
                }
            )
    return rows


def load_responses(
    path: str | Path, *, limit: int | None = None, allow_unlabelled: bool = False
) -> list[dict[str, Any]]:
    """Load a labelled response file, detecting the GSM8K model-solutions format.

    Generic rows need ``problem``, ``response``, ``is_correct``, ``generator``; ``problem_id``
    defaults to a hash of the problem text, ``family`` to ``None``, ``reference`` to ``None``.
    The file is GSM8K model solutions when its first row has ``question`` and a generator
    object with ``solution`` (:data:`ROW_SHAPES`); any other row is read as a generic one.

    Args:
        path: JSONL file.
        limit: keep the responses of the first ``limit`` distinct problems.
        allow_unlabelled: accept rows without ``is_correct`` (it becomes ``None``; label them
            with :func:`label_with_sparse_reward`).

    Returns:
        Rows ``{problem_id, problem, response, is_correct, generator, family, reference,
        source}`` (``source`` is ``file:line``, for messages).

    Raises:
        DataError: naming the file and line: the file is missing or empty, a line is not a
            JSON object (a cut-off last line included: no row is dropped), or a row lacks a
            required field (the message names the missing fields and the accepted shapes), or
            its ``problem``/``response`` is not a string (a ``null`` is a broken export, not an
            empty answer; ``""`` is one), its ``generator`` not a non-empty string (a null
            would become a generator "None"), or its ``is_correct`` not a JSON boolean or 0/1
            (a string such as ``"false"`` included), or a row repeats an earlier one exactly
            (every field equal: it would be counted twice; both lines named) or but for a
            different ``is_correct`` (conflicting labels; both lines named). Rows past
            ``limit`` are not read.
    """
    p = Path(path)
    if not p.is_file():
        raise DataError(f"response file not found: {p}")
    first = next(read_jsonl(p, strict=True), None)
    if first is None:
        raise DataError(f"{p} holds no rows")
    if _is_gsm8k(first) and "response" not in first:
        return load_gsm8k_model_solutions(p, limit=limit, allow_unlabelled=allow_unlabelled)
    rows: list[dict[str, Any]] = []
    copies = _Copies(p)
    seen: set[str] = set()
    need = ("problem", "response", "generator") + (() if allow_unlabelled else ("is_correct",))
    for i, rec in enumerate(read_jsonl(p, strict=True)):
        missing = [k for k in need if k not in rec]
        if missing:
            sparse = (
                "; rows with a 'reference' but no 'is_correct' can be labelled by the sparse "
                "reward: pass --label-with-sparse"
                if missing == ["is_correct"]
                else ""
            )
            raise DataError(
                f"{p}:{i + 1}: missing field(s) {missing} (the row has {sorted(rec)}); "
                f"{ROW_SHAPES}{sparse}"
            )
        pid = str(rec.get("problem_id") or _sha1(str(rec["problem"])))
        if pid not in seen:
            if limit is not None and len(seen) >= limit:
                continue
            seen.add(pid)
        row = {
            "problem_id": pid,
            "problem": _text(rec["problem"], "problem", f"{p}:{i + 1}"),
            "response": _text(rec["response"], "response", f"{p}:{i + 1}"),
            "is_correct": None
            if rec.get("is_correct") is None and allow_unlabelled
            else _label(rec.get("is_correct"), f"{p}:{i + 1}"),
            "generator": _generator(rec["generator"], f"{p}:{i + 1}"),
            "family": rec.get("family"),
            "reference": rec.get("reference"),
            "source": f"{p}:{i + 1}",
        }
        copies.check(rec, i + 1, f"problem_id {pid!r}, generator {rec['generator']!r}")
        rows.append(row)
    return rows


def _keys(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, int]]:
    """``(problem_id, generator, k)`` with k the occurrence of that pair (several samples per generator)."""
    seen: dict[tuple[str, str], int] = {}
    out = []
    for r in rows:
        pair = (str(r["problem_id"]), str(r["generator"]))
        out.append((*pair, seen.get(pair, 0)))
        seen[pair] = seen.get(pair, 0) + 1
    return out


def load_scores(path: str | Path) -> list[dict[str, Any]]:
    """Read a ``scores.jsonl`` (as written by this command).

    Returns:
        Its records, each with ``source`` added: ``file:line``, for messages.

    Raises:
        DataError: naming the file and line: the file is missing, a line is not a JSON object,
            or a row lacks ``problem_id``/``generator``/``score``.
    """
    p = Path(path)
    if not p.is_file():
        raise DataError(f"scores file not found: {p}")
    recs = list(read_jsonl(p, strict=True))  # written whole (atomically): no torn line
    with open(p, encoding="utf-8") as f:  # read_jsonl skips blank lines: the records' lines
        lines = [i + 1 for i, line in enumerate(f) if line.strip()]
    for line, r in zip(lines, recs, strict=True):
        if not {"problem_id", "generator", "score"} <= set(r):
            raise DataError(f"{p}:{line}: a score row needs problem_id, generator and score")
        r["source"] = f"{p}:{line}"
    return recs


CHANGED_RESPONSE_FIX = (
    "score it again without --scores, or pass the responses file the scores were made from"
)
"""The fix :func:`align_scores` names for a response that is not the one scored, by default."""


def align_scores(
    rows: Sequence[Mapping[str, Any]],
    score_records: Sequence[Mapping[str, Any]],
    *,
    changed_fix: str = CHANGED_RESPONSE_FIX,
) -> list[dict[str, Any]]:
    """Match pre-computed score records to rows by ``(problem_id, generator, response_index)``.

    Extra score records (e.g. from a run without ``--limit``) are ignored here;
    :func:`score_coverage` counts them (the command says so).

    Args:
        rows: as :func:`load_responses` returns them (``source``: ``file:line``).
        score_records: as :func:`load_scores` returns them.
        changed_fix: what the error for a changed response says to do (the command names the
            responses file the scores were made from, when their ``metrics.json`` records it).

    Returns:
        One record per row ``{score, mass, abstained}`` (and ``reason`` where the file records
        it), aligned with ``rows``.

    Raises:
        DataError: if a row has no score record, or the stored ``response_sha1`` shows the
            record was computed for a different response text (naming the row's and the score
            record's ``file:line``, the key and ``changed_fix``), or two score records are for
            one response (an exact copy or two different scores: naming both lines,
            the key, the two scores and the fix: one score row per response).
    """
    index = _score_index(score_records)
    out = []
    for key, row in zip(_keys(rows), rows, strict=True):
        rec = index.get(key)
        if rec is None:
            raise DataError(
                f"no score for problem_id={key[0]!r} generator={key[1]!r} #{key[2]} in the scores file"
            )
        sha = rec.get("response_sha1")
        if sha is not None and sha != _sha1(row["response"]):
            where = f"{row['source']}: t" if row.get("source") else "T"
            scored = rec.get("source") or "the scores file"
            raise DataError(
                f"{where}his response (problem_id={key[0]!r} generator={key[1]!r} #{key[2]}) is "
                f"not the one scored at {scored} (its response_sha1 differs): {changed_fix}"
            )
        score = rec.get("score")
        if score is not None and not (isinstance(score, (int, float)) and math.isfinite(score)):
            scored = rec.get("source") or "the scores file"
            raise DataError(
                f"{scored}: invalid score {score!r} for problem_id={key[0]!r} "
                f"generator={key[1]!r} #{key[2]}: a score is a finite number, or null for an "
                "abstention"
            )
        out.append(
            {
                "score": None if score is None else float(score),
                "mass": rec.get("mass"),
                "abstained": score is None,
                **({"reason": rec["reason"]} if "reason" in rec else {}),
            }
        )
    return out


def _score_index(
    score_records: Sequence[Mapping[str, Any]],
) -> dict[tuple[str, str, int], Mapping[str, Any]]:
    """Score records by ``(problem_id, generator, response_index)`` (the occurrence of the pair
    when a record has no ``response_index``).

    Raises:
        DataError: two records for one response (:func:`_second_score_row`).
    """
    index: dict[tuple[str, str, int], Mapping[str, Any]] = {}
    for key, rec in zip(_keys(score_records), score_records, strict=True):
        key = (key[0], key[1], int(rec.get("response_index", key[2])))
        if key in index:
            raise _second_score_row(key, index[key], rec)
        index[key] = rec
    return index


def _second_score_row(
    key: tuple[str, str, int], first: Mapping[str, Any], second: Mapping[str, Any]
) -> DataError:
    """The error for a second score record of the response ``key``: which of the two is meant
    is not known (read in file order, the later would win unsaid), so neither is taken. An exact
    copy is named as one (as :func:`load_responses` names a copied row); two that differ name
    the two scores, or the fields they differ in."""
    here = second.get("source") or "the scores file"
    there = first.get("source") or "the scores file"
    what = f"problem_id={key[0]!r} generator={key[1]!r} #{key[2]}"
    a = {k: v for k, v in first.items() if k != "source"}
    b = {k: v for k, v in second.items() if k != "source"}
    if a == b:
        return DataError(
            f"{here}: the same score row as {there} ({what}): remove the copy (one score row per "
            "response; a scores.jsonl written by eval-verifier has one)"
        )

    def shown(score: Any) -> str:
        return "null (abstained)" if score is None else repr(score)

    if a.get("score") != b.get("score"):
        differ = f"score {shown(a.get('score'))} there and {shown(b.get('score'))} here"
    else:
        fields = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        differ = f"score {shown(a.get('score'))} in both but another {', '.join(fields)}"
    return DataError(
        f"{here}: a second score row for {what}, which has one at {there} already: {differ}; "
        "which is meant is not known, so neither is used: keep one score row per response (a "
        "scores.jsonl written by eval-verifier has one; two runs' scores joined into one file "
        "hold each response twice)"
    )


def score_coverage(
    rows: Sequence[Mapping[str, Any]], score_records: Sequence[Mapping[str, Any]]
) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int]]]:
    """Which rows have no score record, and which score records match no row, by the key
    :func:`align_scores` matches on (``(problem_id, generator, response_index)``).

    Returns:
        ``(missing, unmatched)``: the ``(problem_id, generator, index)`` keys of the rows without
        a score record, and of the score records without a row, each in file order.

    Raises:
        DataError: two score records for one response, as :func:`align_scores`.
    """
    index = _score_index(score_records)
    keys = _keys(rows)
    have = set(keys)
    return [k for k in keys if k not in index], [k for k in index if k not in have]
