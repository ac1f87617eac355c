"""Text corpora on the local machine: the Python standard library's own sources (the default), or a user's files.

Nothing is downloaded (ARCHITECTURE.md, "Dependencies"): the default corpus is text that every Python installation
already has, the ``*.py`` files of the standard library (``sysconfig.get_paths()["stdlib"]``), and ``--data PATH``
points at a user's text file or folder instead. ``--data python`` (:data:`PYTHON_CORPUS`) is the larger built-in
corpus: the standard library and the installed packages (``site-packages``), test suites skipped, capped at
:data:`PYTHON_MAX_BYTES` — enough text that a training run of tens of millions of tokens sees each token about once
(the standard library alone holds ~2.6 M tokens at a vocabulary of 2048, so longer runs would repeat it).

Selection is deterministic: the same files on disk give the same list on every run. When ``max_bytes`` caps the
corpus, candidate files are taken in a fixed pseudo-random order (SHA-1 of the path relative to the root), so that a
small cap samples the whole library rather than its alphabetically first modules; the chosen files are returned in
sorted path order.
"""

from __future__ import annotations

import hashlib
import logging
import numbers
import os
import sysconfig
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = [
    "DEFAULT_MAX_BYTES",
    "PYTHON_CORPUS",
    "PYTHON_MAX_BYTES",
    "default_max_bytes",
    "TEXT_SUFFIXES",
    "default_corpus_path",
    "corpus_files",
    "read_texts",
]

logger = logging.getLogger("sigprop.data")

#: Default cap on the standard-library corpus (bytes of UTF-8 text): about 2 M tokens, enough for a BPE vocabulary of
#: 8192 and quick to train on a 2-core machine.
DEFAULT_MAX_BYTES = 8_000_000

#: The name of the larger built-in corpus (``--data python``): every ``*.py`` file of the standard library and of the
#: installed packages (``sysconfig`` ``"stdlib"`` and ``"purelib"``), test suites, compiled modules and caches skipped.
#: A folder called ``python`` is still reachable as ``./python``.
PYTHON_CORPUS = "python"

#: Default cap on :data:`PYTHON_CORPUS`: 64 MB of source, ~20 M tokens at a vocabulary of 2048.
PYTHON_MAX_BYTES = 64_000_000

#: Suffixes read from a user's folder when ``suffixes`` is not given.
TEXT_SUFFIXES = (
    ".txt", ".text", ".md", ".markdown", ".rst", ".py", ".pyi", ".json", ".jsonl", ".csv", ".tsv", ".html", ".htm",
    ".xml", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".tex", ".c", ".h", ".cc", ".cpp", ".hpp", ".rs", ".go",
    ".java", ".js", ".ts", ".sh",
)

# Folders of the standard library that are not its own source: installed packages, the test suite and its data
# (which holds deliberately malformed and non-UTF-8 files), compiled modules, build configuration, bundled wheels.
_STDLIB_SKIP_DIRS = frozenset({
    "site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__", "lib-dynload", "ensurepip",
})
_STDLIB_SKIP_PREFIXES = ("config-",)  # config-3.11-x86_64-linux-gnu: Makefile, static libraries
_STDLIB_SKIP_FILES = ("_sysconfigdata",)  # generated per-machine build variables, not source


def default_corpus_path() -> Path:
    """The default corpus: the folder of the running interpreter's standard library, ``sysconfig`` ``"stdlib"`` path
    (e.g. ``/usr/lib/python3.11``). Inside a virtual environment this is still the base interpreter's library."""
    return Path(sysconfig.get_paths()["stdlib"])


def default_max_bytes(path, max_bytes):
    """The cap that applies: ``max_bytes`` if given, else :data:`DEFAULT_MAX_BYTES` for the standard library
    (``path=None``), :data:`PYTHON_MAX_BYTES` for :data:`PYTHON_CORPUS` and none for a user's path."""
    if max_bytes is not None:
        return max_bytes
    if path is None:
        return DEFAULT_MAX_BYTES
    return PYTHON_MAX_BYTES if path == PYTHON_CORPUS else None


def _normalise_suffixes(suffixes) -> tuple[str, ...]:
    if isinstance(suffixes, str):
        suffixes = (suffixes,)
    out = []
    for s in suffixes:
        if not isinstance(s, str) or not s.strip(". "):
            raise ValueError(f"suffixes must be non-empty strings such as '.txt' (got {s!r})")
        s = s.strip().lower()
        out.append(s if s.startswith(".") else "." + s)
    if not out:
        raise ValueError("suffixes must name at least one suffix, such as ('.txt',)")
    return tuple(out)


def _check_max_bytes(max_bytes) -> int | None:
    if max_bytes is None:
        return None
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, numbers.Real) or not max_bytes > 0:
        raise ValueError(f"max_bytes must be a positive number of bytes or None (got {max_bytes!r})")
    return int(max_bytes) if max_bytes != float("inf") else None


def _python_roots() -> list[Path]:
    """The folders of :data:`PYTHON_CORPUS`: the standard library and the installed packages (once each)."""
    paths = sysconfig.get_paths()
    roots = []
    for key in ("stdlib", "purelib", "platlib"):
        root = Path(paths[key]).resolve()
        if root.is_dir() and root not in roots:
            roots.append(root)
    return roots


def _walk(root: Path, suffixes: tuple[str, ...], stdlib: bool) -> list[Path]:
    """Files under ``root`` (recursively, hidden entries skipped, symlinked folders not followed) with a suffix in
    ``suffixes``, in sorted order."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        keep = []
        for d in dirnames:
            if d.startswith("."):
                continue
            if stdlib and (d in _STDLIB_SKIP_DIRS or d.startswith(_STDLIB_SKIP_PREFIXES)):
                continue
            keep.append(d)
        dirnames[:] = sorted(keep)
        for name in sorted(filenames):
            if name.startswith(".") or not name.lower().endswith(suffixes):
                continue
            if stdlib and name.startswith(_STDLIB_SKIP_FILES):
                continue
            p = Path(dirpath) / name
            if p.is_file():
                found.append(p)
    return sorted(found)


def _decode(data: bytes) -> str | None:
    """UTF-8 text of ``data`` (a leading BOM dropped), or None for binary (NUL bytes) or undecodable content."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def _usable(p: Path) -> tuple[bool, int]:
    """Whether ``p`` is readable, non-empty UTF-8 text, and its size in bytes."""
    try:
        data = p.read_bytes()
    except OSError as exc:
        logger.debug("skipping unreadable file %s: %s", p, exc)
        return False, 0
    text = _decode(data)
    if text is None:
        logger.debug("skipping binary or non-UTF-8 file %s", p)
        return False, 0
    return bool(text.strip()), len(data)


def _priority(p: Path, root: Path) -> str:
    try:
        rel = p.relative_to(root).as_posix()
    except ValueError:
        rel = p.as_posix()
    return hashlib.sha1(rel.encode("utf-8")).hexdigest()


def corpus_files(path=None, suffixes=None, max_bytes=None) -> list[Path]:
    """The text files of a corpus, as absolute paths in sorted order.

    * ``path=None``: the standard library's ``*.py`` files (:func:`default_corpus_path`), skipping installed packages
      (``site-packages``), the test suite and its data, ``__pycache__``, compiled modules and generated build files;
      ``max_bytes`` defaults to :data:`DEFAULT_MAX_BYTES` (``max_bytes=float("inf")`` takes all of it, ~12 MB on
      CPython 3.11).
    * ``path="python"`` (:data:`PYTHON_CORPUS`): the ``*.py`` files of the standard library and of the installed
      packages, with the standard library's skips (test suites, caches, compiled modules) applied to both; capped at
      :data:`PYTHON_MAX_BYTES` unless ``max_bytes`` says otherwise.
    * ``path`` a file: that file, whatever its suffix (it must be UTF-8 text).
    * ``path`` a folder: walked recursively (hidden files and folders skipped) for files whose suffix is in
      ``suffixes`` (default :data:`TEXT_SUFFIXES`; case-insensitive, the dot optional); no cap unless ``max_bytes``.

    Files that are empty, unreadable, contain NUL bytes or are not valid UTF-8 are skipped (logged at debug level).
    With a cap, files are taken in a fixed pseudo-random order (SHA-1 of the relative path) while the running total
    stays ≤ ``max_bytes``; a file that would overshoot is passed over for later, smaller ones. If no file fits (one
    file larger than the cap), the first one is kept and :func:`read_texts` with the same ``max_bytes`` truncates it.

    Raises ``FileNotFoundError`` when ``path`` does not exist and ``ValueError`` when it holds no usable text or an
    argument is out of range.
    """
    cap = _check_max_bytes(default_max_bytes(path, max_bytes))
    if path == PYTHON_CORPUS:
        return _select(_python_files(suffixes), Path("/"), cap, "the Python corpus (standard library and packages)")
    stdlib = path is None
    root = default_corpus_path() if stdlib else Path(path).expanduser()
    if not root.exists():
        what = "the standard library folder (sysconfig 'stdlib')" if stdlib else "corpus path"
        raise FileNotFoundError(f"{what} {str(root)!r} does not exist")
    root = root.resolve()
    if suffixes is None:
        suffixes = (".py",) if stdlib else TEXT_SUFFIXES
    suffixes = _normalise_suffixes(suffixes)

    if root.is_file():
        candidates = [root]
        base = root.parent
    else:
        candidates = _walk(root, suffixes, stdlib)
        base = root
        if not candidates:
            hint = " (pass --data PATH to use your own text)" if stdlib else ""
            raise ValueError(f"corpus path {str(root)!r} holds no files with suffixes {list(suffixes)}{hint}")
    return _select(candidates, base, cap, f"corpus path {str(root)!r}")


def _python_files(suffixes) -> list[Path]:
    suffixes = _normalise_suffixes((".py",) if suffixes is None else suffixes)
    found = sorted({p for root in _python_roots() for p in _walk(root, suffixes, stdlib=True)})
    if not found:
        raise ValueError("the Python corpus holds no files: no standard library or package sources were found "
                         "(pass --data PATH to use your own text)")
    return found


def _select(candidates: list[Path], base: Path, cap: int | None, what: str) -> list[Path]:
    """The usable files of ``candidates`` (in sorted order) whose total size stays within ``cap``, taken in the
    fixed pseudo-random order of :func:`_priority` when capped."""
    order = candidates if cap is None else sorted(candidates, key=lambda p: _priority(p, base))
    chosen: list[Path] = []
    total = 0
    for p in order:
        try:
            size = p.stat().st_size
        except OSError:
            continue
        if cap is not None and total + size > cap:
            continue  # checked only if nothing fits (below)
        ok, size = _usable(p)
        if ok:
            chosen.append(p)
            total += size
    if not chosen and cap is not None:
        chosen = next(([p] for p in order if _usable(p)[0]), [])
    if not chosen:
        raise ValueError(
            f"{what} holds no usable text: every candidate file is empty, binary or not UTF-8"
            f" ({len(candidates)} file(s) looked at)")
    return sorted(chosen)


def read_texts(files: Iterable, max_bytes=None) -> Iterator[str]:
    """Yield the UTF-8 text of each file in ``files``, in the given order (a leading BOM is dropped; line endings
    are kept as stored).

    Unreadable, binary (NUL bytes) or non-UTF-8 files are skipped with a debug log entry, never raising. With
    ``max_bytes``, reading stops once that many bytes of file content were yielded: the last file is cut at the cap
    (on a character boundary), so the total is at most ``max_bytes``.
    """
    remaining = _check_max_bytes(max_bytes)
    for f in files:
        if remaining is not None and remaining <= 0:
            return
        p = Path(f)
        try:
            data = p.read_bytes()
        except OSError as exc:
            logger.debug("skipping unreadable file %s: %s", p, exc)
            continue
        text = _decode(data)
        if text is None:
            logger.debug("skipping binary or non-UTF-8 file %s", p)
            continue
        if remaining is not None:
            if len(data) > remaining:  # only a character cut by the cap can be dropped
                text = data[:remaining].decode("utf-8-sig", errors="ignore")
            remaining -= min(len(data), remaining)
        if text:
            yield text
