"""Run directories, atomic file writes, append-only JSONL, W&B set-up and secrets.

Everything a run writes goes through these helpers so a crash never leaves a
half-written result, cache or metrics file: whole files are written to a temporary file
in the same directory and ``os.replace``-d into place; JSONL is append-only with one
``write`` of one complete line, flushed and fsync-ed, and readers skip a torn last line.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "atomic_write_text",
    "atomic_write_json",
    "append_jsonl",
    "read_jsonl",
    "drop_rows_after",
    "make_run_dir",
    "check_run_dir",
    "replace_earlier_files",
    "earlier_wandb_runs",
    "wandb_run_id",
    "reuse_words",
    "configure_wandb",
    "wandb_key_configured",
    "get_api_key",
    "redact",
    "to_jsonable",
]

_SECRET_ENV_PATTERN = re.compile(r"(API_KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)


def to_jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays, Paths, dataclasses and NaN to JSON-safe values (NaN -> None)."""
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):
        return to_jsonable(obj.tolist())
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    return obj


def _read_umask() -> int:
    mask = os.umask(0)  # the only portable way to read it: set and restore at once
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once, at import: os.umask() is process-wide and not thread-safe


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (temp file in the same dir, fsync, ``os.replace``).

    The file gets the permissions a plain ``open(path, "w")`` would give (``0o666`` minus the
    umask), not the private ``0o600`` of the temporary file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | Path, obj: Any, *, indent: int = 2) -> Path:
    """Atomically write ``obj`` as JSON (numpy values converted, NaN written as null)."""
    return atomic_write_text(
        path, json.dumps(to_jsonable(obj), indent=indent, allow_nan=False) + "\n"
    )


def append_jsonl(path: str | Path, record: Mapping[str, Any]) -> None:
    """Append one JSON line to ``path`` with a single write, flushed and fsync-ed.

    A crash can at worst leave a torn *last* line, which :func:`read_jsonl` skips.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(to_jsonable(record), allow_nan=False) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: str | Path, *, strict: bool = False) -> Iterator[dict[str, Any]]:
    """Yield the records of a JSONL file (blank lines skipped).

    A file this package appends to (:func:`append_jsonl`: curves, trackers) may end in a line
    torn by a crash; by default that last line is skipped. ``strict=True`` is for a file a user
    hands over (``eval-verifier --responses``): there a cut-off last line is an error too (rows
    must not vanish), and every line must be a JSON object.

    Raises:
        DataError: naming the file and the line (1-based): a line that is not valid JSON (other
            than a torn last line without ``strict``), or with ``strict`` one that is not an
            object.
    """
    from .errors import DataError

    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line.rstrip())  # error columns on this line, not the next
        except json.JSONDecodeError as exc:
            last = i == len(lines) - 1
            if last and not strict:
                return  # torn last line from a crash
            cut = " (the last line looks cut off: is the file complete?)" if last else ""
            raise DataError(
                f"{path}:{i + 1}: not valid JSON ({exc.msg}: column {exc.colno}){cut}"
            ) from None
        if strict and not isinstance(record, dict):
            raise DataError(
                f"{path}:{i + 1}: a row must be a JSON object {{...}}, got {type(record).__name__}"
            )
        yield record


def rows_after(path: str | Path, step: int, *, key: str = "step") -> int:
    """How many rows of the JSONL file ``path`` have a ``key`` above ``step``: the rows
    :func:`drop_rows_after` would drop (a dry run's count; the file is not changed). A missing
    file has none; a torn last line is not counted."""
    path = Path(path)
    if not path.is_file():
        return 0
    return sum(_after(r, step, key) for r in read_jsonl(path))


def _after(row: dict[str, Any], step: int, key: str) -> bool:
    """Whether ``row``'s ``key`` is a number above ``step`` (a row without one is kept)."""
    return isinstance(row.get(key), (int, float)) and row[key] > step


def drop_rows_after(path: str | Path, step: int, *, key: str = "step") -> int:
    """Keep only the rows of the JSONL file ``path`` whose ``key`` is at most ``step``.

    For a run resumed from the checkpoint at ``step``: the rows its stopped predecessor
    appended after that checkpoint would otherwise be counted twice (once more by the resumed
    run). The file is rewritten atomically (a torn last line goes too); rows without ``key``
    are kept. A missing file drops nothing.

    Returns:
        How many rows were dropped.
    """
    path = Path(path)
    if not path.is_file():
        return 0
    rows = list(read_jsonl(path))
    kept = [r for r in rows if not _after(r, step, key)]
    text = "".join(json.dumps(r, allow_nan=False) + "\n" for r in kept)
    if len(kept) != len(rows) or text != path.read_text(encoding="utf-8"):
        atomic_write_text(path, text)
    return len(rows) - len(kept)


def make_run_dir(
    output_root: str | Path, run_name: str | None = None, *, exist_ok: bool = False
) -> Path:
    """Create exactly one run directory ``<output_root>/<run_name or timestamp>``.

    Raises:
        FileExistsError: if it exists and ``exist_ok`` is False (use ``--resume`` to continue a run).
    """
    name = run_name or _dt.datetime.now().strftime("run-%Y%m%d-%H%M%S")
    d = Path(output_root) / name
    d.mkdir(parents=True, exist_ok=exist_ok)
    return d


def check_run_dir(
    run_dir: str | Path,
    *,
    resume: bool,
    checkpoints: Sequence[Path],
    finished: Path | None = None,
    flag: str = "--output-dir",
) -> str:
    """Decide whether a run may use ``run_dir``, before anything is created or loaded.

    A new run may use a directory that does not exist, is empty, or holds neither a checkpoint
    nor ``finished`` (the leftovers of a start that failed before its first checkpoint: rerun
    the same command and it is reused). ``resume`` needs a checkpoint.

    Args:
        run_dir: The run directory.
        resume: Whether the run continues from a checkpoint.
        checkpoints: The checkpoints found in ``run_dir`` (trainer-specific layout).
        finished: The file a finished run leaves (``result.json``, ``summary.json``).
        flag: The option that chooses the directory, for the messages.

    Returns:
        ``"new"``, ``"reuse"`` (exists, nothing to lose) or ``"resume"``.

    Raises:
        ConfigError: naming the choices: ``--resume`` without a checkpoint, or a new run in a
            directory that holds checkpoints or a finished run.
    """
    from .errors import ConfigError

    d = Path(run_dir)
    if resume:
        if checkpoints:
            return "resume"
        if finished is not None and finished.is_file():
            raise ConfigError(
                f"--resume: no checkpoint in {d}: its run finished ({finished.name}) without "
                f"saving one, so there is nothing to continue from; choose another {flag} for a "
                "new run (and a checkpoint interval within the budget to resume later)"
            )
        why = (
            "the directory does not exist"
            if not d.exists()
            else (
                "the earlier run stopped before its first checkpoint"
                if any(d.iterdir())
                else "the directory is empty"
            )
        )
        raise ConfigError(
            f"--resume: no checkpoint in {d} ({why}). Choices: run the same command without "
            f"--resume to start the run afresh there, or pass {flag} of a run that has "
            "checkpoints"
        )
    if checkpoints:
        if finished is not None and finished.is_file():  # --resume alone would train nothing
            raise ConfigError(
                f"run directory {d} holds a finished run ({finished.name}; latest checkpoint "
                f"{Path(checkpoints[-1]).name}). Choices: add --resume with a larger budget "
                f"(--total-timesteps / --max-steps) to continue it, or choose another {flag} "
                "for a new run"
            )
        raise ConfigError(
            f"run directory {d} already holds a run with checkpoints (latest: "
            f"{Path(checkpoints[-1]).name}). Choices: add --resume to continue it, or choose "
            f"another {flag} for a new run"
        )
    if finished is not None and finished.is_file():
        raise ConfigError(
            f"run directory {d} holds a finished run ({finished.name}); choose another {flag}"
        )
    return "reuse" if d.is_dir() and any(d.iterdir()) else "new"


def earlier_wandb_runs(run_dir: str | Path, wandb_dir: str | Path | None = None) -> list[Path]:
    """The W&B run directories of the id in ``<run_dir>/wandb_id.txt``: W&B's
    ``<wandb_dir>/wandb/offline-run-<YYYYMMDD_HHMMSS>-<id>`` (offline) and
    ``run-<YYYYMMDD_HHMMSS>-<id>`` (online), ``wandb_dir`` being ``WANDB_DIR`` (the config's
    ``wandb.dir``; default ``run_dir``). ``[]`` without the file. Sorted."""
    id_file = Path(run_dir) / "wandb_id.txt"
    run_id = id_file.read_text().strip() if id_file.is_file() else ""
    if not re.fullmatch(r"[0-9a-z]+", run_id):  # W&B's ids; none, or not one of ours
        return []
    root = Path(wandb_dir if wandb_dir is not None else run_dir) / "wandb"
    named = re.compile(rf"(offline-)?run-\d{{8}}_\d{{6}}-{run_id}")
    return sorted(
        p
        for p in (root.iterdir() if root.is_dir() else ())
        if named.fullmatch(p.name) and p.is_dir() and not p.is_symlink()
    )


def _earlier(
    run_dir: Path, names: Sequence[str], wandb_dir: str | Path | None
) -> tuple[list[str], list[Path]]:
    """The earlier start's files among ``names`` (sorted) and its W&B runs (found before its
    ``wandb_id.txt`` is replaced)."""
    files = sorted(name for name in names if (run_dir / name).is_file())
    return files, earlier_wandb_runs(run_dir, wandb_dir)


def _named(run_dir: Path, files: list[str], runs: list[Path]) -> list[str]:
    """The files, then the W&B runs, as the words name them (relative to ``run_dir``)."""
    return files + [
        str(p.relative_to(run_dir)) if p.is_relative_to(run_dir) else str(p) for p in runs
    ]


def reuse_words(
    run_dir: str | Path, names: Sequence[str], *, wandb_dir: str | Path | None = None
) -> str:
    """A dry run's words for a directory :func:`check_run_dir` calls ``"reuse"``: which of
    the run's files ``names`` (relative paths) a stopped earlier start left there, and the W&B
    runs of its ``wandb_id.txt`` (:func:`earlier_wandb_runs`), which the run will replace
    (:func:`replace_earlier_files`)."""
    earlier = _named(Path(run_dir), *_earlier(Path(run_dir), names, wandb_dir))
    return "exists with no checkpoint and no result: " + (
        f"the files of the earlier start ({', '.join(earlier)}) are replaced" if earlier else "used"
    )


def replace_earlier_files(
    run_dir: str | Path, names: Sequence[str], *, wandb_dir: str | Path | None = None
) -> list[str]:
    """Delete the run files ``names`` (relative paths) that a stopped earlier start left in a
    directory :func:`check_run_dir` calls ``"reuse"``, and the W&B run directories of the id in
    its ``wandb_id.txt`` (:func:`earlier_wandb_runs`, under ``wandb_dir``, default
    ``run_dir``), and say so once (a warning): a new run appending to that start's curves would
    mix the two runs, and ``wandb sync <run_dir>/wandb/offline-run-*`` would upload the stopped
    start beside it. Other files, and W&B runs of other ids, are left alone.

    Returns:
        The names deleted (the files sorted, then the W&B runs), as the warning says them.
    """
    import logging
    import shutil

    d = Path(run_dir)
    files, runs = _earlier(d, names, wandb_dir)
    earlier = _named(d, files, runs)
    for name in files:
        (d / name).unlink()
    for run in runs:
        shutil.rmtree(run)
    if earlier:
        logging.getLogger("densereward").warning(
            "run directory %s holds no checkpoint and no result: the files of the earlier start "
            "(%s) are replaced by this run's",
            d,
            ", ".join(earlier),
        )
    return earlier


def wandb_run_id(run_dir: str | Path, *, reuse: bool) -> str:
    """The run's W&B id, kept in ``<run_dir>/wandb_id.txt``: the file's id when ``reuse`` and
    the file exists (a resumed run continues its one W&B run), else a new 12-hex-digit id; the
    id is (re)written to the file either way."""
    import uuid

    id_file = Path(run_dir) / "wandb_id.txt"
    run_id = id_file.read_text().strip() if reuse and id_file.is_file() else uuid.uuid4().hex[:12]
    atomic_write_text(id_file, run_id)
    return run_id


def get_api_key(env_var: str, *, dotenv_path: str | Path | None = ".env") -> str | None:
    """Read an API key from the environment, else from a ``.env`` file. Never from configs.

    Returns ``None`` when the variable is not set (local servers usually need no key).
    """
    value = os.environ.get(env_var)
    if value:
        return value
    if dotenv_path is not None and Path(dotenv_path).is_file():
        from dotenv import dotenv_values

        return dotenv_values(dotenv_path).get(env_var) or None
    return None


def redact(obj: Any, secrets: Iterable[str] = ()) -> Any:
    """Return a copy of ``obj`` with secret-looking keys and any of ``secrets`` masked.

    Keys matching ``API_KEY|TOKEN|SECRET|PASSWORD`` get ``'***'``; any string containing one
    of ``secrets`` (non-empty) has it replaced by ``'***'``.
    """
    secrets = [s for s in secrets if s]
    if isinstance(obj, Mapping):
        return {
            k: ("***" if _SECRET_ENV_PATTERN.search(str(k)) and v else redact(v, secrets))
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact(v, secrets) for v in obj)
    if isinstance(obj, str):
        for s in secrets:
            obj = obj.replace(s, "***")
        return obj
    return obj


def configure_wandb(run_dir: str | Path) -> str:
    """Set W&B to offline mode unless an API key is configured; keep this run's files in ``run_dir``.

    Returns the mode chosen (``"online"`` or ``"offline"``). Respects an explicit
    ``WANDB_MODE`` already set by the user.
    """
    os.environ["WANDB_DIR"] = str(run_dir)  # per run: a second run in one process gets its own dir
    os.environ.setdefault("WANDB_SILENT", "true")
    if "WANDB_MODE" not in os.environ:
        os.environ["WANDB_MODE"] = "online" if wandb_key_configured() else "offline"
    return os.environ["WANDB_MODE"]


def wandb_key_configured() -> bool:
    """A W&B API key is configured: ``WANDB_API_KEY``, or ``api.wandb.ai`` in ``~/.netrc``."""
    netrc = Path.home() / ".netrc"
    return bool(os.environ.get("WANDB_API_KEY")) or (
        netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore")
    )
