"""Pinned corpora: token ids built once and kept in the source repository, the same corpus on every machine.

``data="python"`` is whatever the machine has installed, and the standard library differs between Python versions,
so a run elsewhere trains on other text. A pinned corpus is named ``pinned:NAME`` (``--train-set
data=pinned:python-v1``) and lives in ``corpora/NAME/`` of the repository: ``ids.u16.xz`` (the token ids,
little-endian uint16, xz-compressed; documents joined by ``[SEP]``), ``tokenizer.json`` (the tokenizer that made
them, for reading them back as text) and ``manifest.json`` (its vocabulary size, the ``[SEP]`` id, the SHA-256 of
the raw ids, checked on every load, and where the text came from). The ids are the corpus: no tokenizer is trained
and no file of the machine is read. ``bench/build_pinned_corpus.py`` builds one.
"""

from __future__ import annotations

import hashlib
import json
import lzma
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["PINNED_PREFIX", "PinnedCorpus", "is_pinned", "pinned_corpus", "corpora_folder"]

#: How a training config names a pinned corpus: ``data="pinned:NAME"``.
PINNED_PREFIX = "pinned:"
_IDS_FILE = "ids.u16.xz"
_MANIFEST_FILE = "manifest.json"


def corpora_folder() -> Path:
    """The repository's ``corpora/`` folder (beside the ``sigprop`` package in a source checkout)."""
    return Path(__file__).resolve().parents[2] / "corpora"


def is_pinned(data) -> bool:
    """Whether a training config's ``data`` names a pinned corpus.

    Example:
        >>> is_pinned("pinned:python-v1"), is_pinned("python"), is_pinned(None)
        (True, False, False)
    """
    return isinstance(data, str) and data.startswith(PINNED_PREFIX)


@dataclass(frozen=True)
class PinnedCorpus:
    """A pinned corpus read and checked: its ``name``, the token ``ids`` (uint16), the vocabulary size its ids were
    made with, the ``[SEP]`` id between documents and the folder it came from."""

    name: str
    ids: np.ndarray
    vocab_size: int
    sep_id: int
    folder: Path

    @property
    def tokenizer_path(self) -> Path:
        """The tokenizer that made the ids (``tokenizer.json``)."""
        return self.folder / "tokenizer.json"


def pinned_corpus(data: str, folder=None) -> PinnedCorpus:
    """The pinned corpus that ``data`` (``"pinned:NAME"``) names, from ``folder`` (default :func:`corpora_folder`),
    its ids checked against the SHA-256 in its manifest.

    Args:
        data: ``"pinned:NAME"``.
        folder: where the corpora live (``corpora/`` of the repository by default).

    Returns:
        The :class:`PinnedCorpus`.

    Raises:
        ValueError: naming the corpus, when it is not there (a pinned corpus ships with the source repository, not
            with an installed wheel), its manifest is unreadable or its ids do not match the manifest's SHA-256.

    Example:
        >>> corpus = pinned_corpus("pinned:python-v1")  # doctest: +SKIP
        >>> corpus.vocab_size  # doctest: +SKIP
        2048
    """
    if not is_pinned(data):
        raise ValueError(f"a pinned corpus is named {PINNED_PREFIX}NAME (got {data!r})")
    name = data[len(PINNED_PREFIX):]
    root = Path(folder) if folder is not None else corpora_folder()
    here = root / name
    available = sorted(p.name for p in root.iterdir() if (p / _MANIFEST_FILE).is_file()) if root.is_dir() else []
    if not name or "/" in name or name.startswith(".") or not (here / _MANIFEST_FILE).is_file():
        raise ValueError(f"data {data!r}: no pinned corpus {name!r} in {root} (pinned corpora ship with sigprop's "
                         f"source repository, not with an installed package); available: "
                         f"{', '.join(available) or 'none'}")
    try:
        manifest = json.loads((here / _MANIFEST_FILE).read_text(encoding="utf-8"))
        raw = lzma.decompress((here / _IDS_FILE).read_bytes())
        vocab_size, sep_id, expected = int(manifest["vocab_size"]), int(manifest["sep_id"]), manifest["ids_sha256"]
    except (OSError, ValueError, KeyError, TypeError, lzma.LZMAError) as err:
        raise ValueError(f"pinned corpus {name!r} in {here} is unreadable ({type(err).__name__}: {err})") from None
    if hashlib.sha256(raw).hexdigest() != expected:
        raise ValueError(f"pinned corpus {name!r} in {here}: its ids do not match the SHA-256 of its manifest (the "
                         "file is damaged or was changed)")
    ids = np.frombuffer(raw, dtype="<u2").astype(np.uint16)
    return PinnedCorpus(name, ids, vocab_size, sep_id, here)
