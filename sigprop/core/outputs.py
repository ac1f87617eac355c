"""Output files, checked before any work: a long run must not end in a traceback because its ``--json`` points at a
folder, under a file, or into a folder it cannot write."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TypeAlias

__all__ = ["check_output_path", "check_output_folder", "plain_mode", "StrPath"]

#: A path as callers give it: a string or an ``os.PathLike`` (a :class:`~pathlib.Path`).
StrPath: TypeAlias = str | os.PathLike[str]


def _writable_folder(folder: Path, what: str) -> None:
    """``ValueError`` unless ``folder`` (or, where it does not exist yet, its nearest existing ancestor, under which
    it will be created) is a folder a file can be created in; probed by creating one."""
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{what}: {probe} is a file, not a folder")
    try:
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".sigprop-write-check-")
    except OSError as err:
        raise ValueError(f"{what}: cannot write in {probe} ({err.strerror or err})") from None
    os.close(fd)
    os.remove(tmp)


def check_output_path(path: StrPath | None, what: str, suffix: str | None = None) -> Path:
    """``path`` as a :class:`~pathlib.Path` a file can be written to, checked now: not empty, not an existing folder,
    ending in ``suffix`` (e.g. ".png") when given, and its folder writable (created on writing if missing).
    ``ValueError`` naming the option ``what`` (e.g. "--json") otherwise."""
    if path is None or not str(path).strip():
        raise ValueError(f"{what} needs a file name (got {str(path)!r})")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what}: {path} is a folder; give a file name (e.g. {path / ('out' + (suffix or '.json'))})")
    if suffix is not None and path.suffix.lower() != suffix:
        raise ValueError(f"{what}: {path} must end in {suffix}")
    _writable_folder(path.parent if str(path.parent) else Path("."), what)
    return path


def check_output_folder(path: StrPath | None, what: str) -> Path:
    """``path`` as a folder files can be written into (created if missing), checked now; ``ValueError`` naming the
    option ``what`` if it is a file or not writable."""
    if path is None or not str(path).strip():
        raise ValueError(f"{what} needs a folder name (got {str(path)!r})")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what}: {path} is a file, not a folder")
    _writable_folder(path, what)
    return path


def plain_mode(path: StrPath, folder: bool = False) -> None:
    """Give ``path`` the permissions a plain ``open`` (or ``mkdir``, with ``folder``) would have: 0o666 (0o777)
    minus the umask. A temporary file or folder written and renamed into place (``mkstemp``, ``mkdtemp``) is
    created 0o600 (0o700), which would leave an output unreadable to the user's group."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if folder else 0o666) & ~umask)
