"""Atomic JSON files: every report sigprop writes goes through here, so an interrupted run never leaves a
half-written file behind."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

__all__ = ["write_json_atomic"]


def write_json_atomic(path, data, indent: int = 1) -> Path:
    """Dump ``data`` as JSON to ``path`` via a temporary file in the same folder and an atomic rename; the file
    gets the permissions a plain ``open`` would give it (0o666 minus the umask). NaN is refused (not JSON)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=indent, allow_nan=False)
            f.write("\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path
