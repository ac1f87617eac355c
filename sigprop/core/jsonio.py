"""Atomic JSON files: every report sigprop writes goes through here, so an interrupted run never leaves a
half-written file behind."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .atomic import atomic_path
from .outputs import StrPath

__all__ = ["write_text_atomic", "write_json_atomic", "finite_or_null", "json_number", "read_config_json", "read_jsonl",
           "read_json"]


def json_number(value: Any) -> float | None:
    """A number for JSON: a float, or None for a missing or non-finite one (JSON has neither NaN nor infinity)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def finite_or_null(value: Any) -> Any:
    """``value`` with every float that is not finite (NaN, ±inf) replaced by None, through dicts, lists and tuples:
    JSON has no NaN, and a missing number is null."""
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def write_text_atomic(path: StrPath, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` via a temporary file in the same folder (created if missing) and an atomic
    rename; the file gets the permissions a plain ``open`` would give it (0o666 minus the umask)."""
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def write_json_atomic(path: StrPath, data: Any, indent: int = 1) -> Path:
    """Dump ``data`` as JSON to ``path`` atomically (:func:`write_text_atomic`). NaN is refused (not JSON)."""
    return write_text_atomic(path, json.dumps(data, indent=indent, allow_nan=False) + "\n")


def write_csv_atomic(path: StrPath, records: list[dict[str, Any]]) -> Path:
    """Write ``records`` (dicts with the same keys, in order) as CSV with a header row to ``path`` atomically
    (:func:`write_text_atomic`); NaN is written as an empty cell."""
    import csv
    import io

    out = io.StringIO()
    if records:
        writer = csv.DictWriter(out, fieldnames=list(records[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows([{k: ("" if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
                          for r in records])
    return write_text_atomic(path, out.getvalue())


def read_config_json(path: StrPath) -> Any:
    """The parsed JSON of the ``--config`` file ``path``; ``ValueError`` naming the file when it is missing, a folder
    or not JSON."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"config file not found: {path}") from None
    except IsADirectoryError:
        raise ValueError(f"--config: {path} is a folder, not a file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None


def read_jsonl(path: StrPath) -> list[dict[str, Any]]:
    """The JSON objects of the JSON Lines file ``path``, one per line ([] when it does not exist); a line that is
    not a JSON object (the last line cut short by a killed process) is skipped."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def read_json(path: Path, error: type[Exception], missing: str, unreadable: str) -> Any:
    """The JSON value in the file ``path``, or ``error`` with one line: ``missing`` where there is no such file,
    ``unreadable`` (followed by the kind of failure) where it cannot be read or parsed.

    Args:
        path: the file.
        error: the exception class raised.
        missing: the message for a missing file.
        unreadable: the message for an unreadable one.

    Returns:
        The parsed value (any JSON type: the caller checks its shape).

    Example:
        >>> read_json(Path("/nonexistent.json"), ValueError, "no file", "bad file")
        Traceback (most recent call last):
        ValueError: no file
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(missing) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise error(f"{unreadable} ({type(err).__name__})") from None
