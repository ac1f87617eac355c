"""Writing a file or a folder so that no reader ever sees half of it: the one way sigprop writes its outputs.

The content goes to a temporary name in the destination's own folder (same file system), gets the permissions a plain
``open`` / ``mkdir`` would give it (:func:`~sigprop.core.outputs.plain_mode`; ``mkstemp`` makes 0o600), and is then
renamed over the destination (``os.replace``: atomic on POSIX and Windows). On any error the temporary is removed and
the destination is left as it was. ``durable=True`` also flushes the file to disk before the rename and the folder's
entry after it, so that a crash right after the write cannot lose it (checkpoints, caches).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .outputs import StrPath, plain_mode

__all__ = ["atomic_path", "fsync_folder"]


def fsync_folder(folder: Path) -> None:
    """Flush a folder's entries to disk (where the platform allows opening a folder; a no-op elsewhere)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: StrPath, *, folder: bool = False, durable: bool = False, suffix: str = ".tmp") -> Iterator[Path]:
    """A temporary path to fill; on leaving the block without an error it replaces ``path`` (module docstring).

    Args:
        path: the destination (its parent folders are created).
        folder: the destination is a folder (an existing one is replaced whole).
        durable: flush the written file (a folder: every file in it) and the folder entry to disk.
        suffix: the temporary name's ending (a writer that infers the format from it, e.g. ``".png"``).

    Returns:
        A context manager yielding the temporary :class:`~pathlib.Path` (an empty file, or an empty folder).

    Example:
        >>> import tempfile
        >>> out = Path(tempfile.mkdtemp()) / "a.txt"
        >>> with atomic_path(out) as tmp:
        ...     _ = tmp.write_text("whole or not at all")
        >>> out.read_text()
        'whole or not at all'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if folder:
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        if durable and not folder:
            _fsync_file(tmp)
        elif durable:  # every file written into the folder, and the folder's own entries, before it is renamed
            for written in sorted(tmp.rglob("*")):
                if written.is_file():
                    _fsync_file(written)
                else:
                    fsync_folder(written)
            fsync_folder(tmp)
        plain_mode(tmp, folder=folder)
        old = None
        if folder and path.exists():  # the old folder aside first: an interruption leaves one whole folder in place
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
            os.replace(path, old / path.name)
        try:
            os.replace(tmp, path)
        except BaseException:
            if old is not None:
                os.replace(old / path.name, path)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        if folder:
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()
        raise
    if durable:
        fsync_folder(path.parent)
