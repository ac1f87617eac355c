"""A byte-level BPE tokenizer trained locally on the corpus with the ``tokenizers`` library, and its on-disk cache.

The tokenizer is the GPT-2 scheme (byte-level pre-tokenization, byte-pair merges learned on the corpus): every byte
string is encodable without an unknown token and decoding is lossless. Five special tokens come first, so their ids
are fixed: ``[PAD]`` = 0, ``[MASK]`` = 1, ``[CLS]`` = 2, ``[SEP]`` = 3, ``[UNK]`` = 4; the 256 byte symbols and the
learned merges follow.

Cache: ``<cache_dir>/tokenizer-<key>.json`` where ``key`` hashes the resolved file list with each file's size and
mtime, ``vocab_size``, ``max_bytes`` and :data:`FORMAT_VERSION`; any change to the corpus gives a new key. Files are
written atomically (temporary file in the same folder, then ``os.replace``), so an interrupted run never leaves a
half-written cache; a cache file that fails to load or to validate is retrained and overwritten, never fatal.
``cache_dir`` defaults to ``$SIGPROP_CACHE_DIR``, else ``~/.cache/sigprop``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import numbers
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ..core.atomic import atomic_path
from .corpus import corpus_files, default_max_bytes, read_texts

__all__ = [
    "SPECIAL_TOKENS",
    "FORMAT_VERSION",
    "MIN_VOCAB_SIZE",
    "default_cache_dir",
    "corpus_key",
    "tokenizer_cache_path",
    "train_tokenizer",
    "load_or_train_tokenizer",
    "prepare_tokenizer",
    "CorpusTokenizer",
    "atomic_write",
    "pad_id",
    "mask_id",
    "special_id",
    "write_hf_tokenizer",
]

logger = logging.getLogger("sigprop.data")

#: Special tokens, in id order (ids 0 … 4).
SPECIAL_TOKENS = ("[PAD]", "[MASK]", "[CLS]", "[SEP]", "[UNK]")

#: Bumped whenever the tokenizer recipe or the cache layout changes, so that old cache files are not reused.
FORMAT_VERSION = 1

#: The special tokens plus the 256 byte symbols: the smallest vocabulary a byte-level BPE can have.
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + 256


def default_cache_dir() -> Path:
    """``$SIGPROP_CACHE_DIR`` if set (and non-empty), else ``~/.cache/sigprop``."""
    env = os.environ.get("SIGPROP_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "sigprop"


def _check_vocab_size(vocab_size) -> int:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, numbers.Integral) or vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(f"vocab_size must be an integer >= {MIN_VOCAB_SIZE} (5 special tokens + 256 bytes)"
                         f" (got {vocab_size!r})")
    return int(vocab_size)


def _effective_max_bytes(path, max_bytes):
    return default_max_bytes(path, max_bytes)


def corpus_key(files, vocab_size: int, max_bytes=None, extra: str = "") -> str:
    """Hex key (24 characters of SHA-256) of a corpus + tokenizer recipe: the resolved paths of ``files`` with their
    sizes and modification times (ns), ``vocab_size``, ``max_bytes``, :data:`FORMAT_VERSION` and ``extra``."""
    entries = []
    for f in files:
        p = Path(f).resolve()
        st = p.stat()
        entries.append([str(p), st.st_size, st.st_mtime_ns])
    payload = json.dumps({"format": FORMAT_VERSION, "files": entries, "vocab_size": vocab_size,
                          "max_bytes": max_bytes, "extra": extra}, sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:24]


def tokenizer_cache_path(key: str, cache_dir=None) -> Path:
    """Where the tokenizer with cache ``key`` lives."""
    return Path(cache_dir if cache_dir is not None else default_cache_dir()).expanduser() / f"tokenizer-{key}.json"


def atomic_write(path: Path, write: Callable, mode: str = "wb") -> bool:
    """Write ``path`` atomically: ``write(fileobj)`` fills a temporary file in the same folder, which is flushed,
    fsynced and renamed over ``path`` (``os.replace``). Returns False (with a warning) when the folder is not
    writable, so that a read-only cache degrades to no cache instead of an error."""
    try:
        with atomic_path(path, durable=True) as tmp, open(tmp, mode) as fh:
            write(fh)
        return True
    except OSError as exc:
        logger.warning("could not write cache file %s (%s); continuing without it", path, exc)
        return False


def say(progress: bool, msg: str) -> None:
    """A one-line progress message: on stderr when ``progress`` is true, at debug level in the log otherwise."""
    logger.debug(msg)
    if progress:
        print(msg, file=sys.stderr, flush=True)


def _new_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_tokenizer(texts, vocab_size: int = 8192, length: int | None = None) -> Tokenizer:
    """Train a byte-level BPE tokenizer on an iterable of strings (no cache).

    Recipe: GPT-2 byte-level pre-tokenizer (regex split, no prefix space), all 256 byte symbols in the initial
    alphabet, special tokens :data:`SPECIAL_TOKENS` at ids 0–4, merges with frequency ≥ 2 until ``vocab_size``
    tokens (fewer when the corpus runs out of repeated pairs). ``length`` (the number of texts) is a hint for the
    trainer; its own progress bar is never shown (it writes blank lines to stdout).
    """
    vocab_size = _check_vocab_size(vocab_size)
    tok = _new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,  # its bar writes blank lines to stdout, which would corrupt a JSON report there
    )
    tok.train_from_iterator(texts, trainer=trainer, length=length)
    _validate(tok, vocab_size)
    return tok


def _validate(tok: Tokenizer, vocab_size: int) -> None:
    """Raise ValueError unless ``tok`` has our special tokens at ids 0–4 and at most ``vocab_size`` tokens."""
    for i, t in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(t) != i:
            raise ValueError(f"tokenizer: special token {t} must have id {i} (got {tok.token_to_id(t)})")
    n = tok.get_vocab_size()
    if not MIN_VOCAB_SIZE <= n <= vocab_size:
        raise ValueError(f"tokenizer: vocabulary size {n} outside [{MIN_VOCAB_SIZE}, {vocab_size}]")


def _load_cached(path: Path, vocab_size: int) -> Tokenizer | None:
    if not path.is_file():
        return None
    try:
        tok = Tokenizer.from_file(str(path))
        _validate(tok, vocab_size)
    except Exception as exc:  # noqa: BLE001 (the Rust loader raises a bare Exception on malformed JSON)
        logger.warning("tokenizer cache %s is unreadable (%s); retraining", path, str(exc)[:200])
        return None
    tok.no_padding()
    tok.no_truncation()
    return tok


class CorpusTokenizer(NamedTuple):
    """What :func:`prepare_tokenizer` resolved: the tokenizer, the corpus files, their cache key and the effective
    byte cap (so that the token cache of :mod:`sigprop.data.batches` reads exactly the same text)."""

    tokenizer: Tokenizer
    files: list
    key: str
    max_bytes: int | None


def prepare_tokenizer(path=None, vocab_size: int = 8192, cache_dir=None, max_bytes=None, progress: bool = False,
                      suffixes=None) -> CorpusTokenizer:
    """:func:`load_or_train_tokenizer`, also returning the corpus files and cache key it used."""
    vocab_size = _check_vocab_size(vocab_size)
    max_bytes = _effective_max_bytes(path, max_bytes)
    files = corpus_files(path, suffixes=suffixes, max_bytes=max_bytes)
    key = corpus_key(files, vocab_size, max_bytes)
    cache = tokenizer_cache_path(key, cache_dir)
    tok = _load_cached(cache, vocab_size)
    if tok is not None:
        logger.debug("loaded tokenizer from %s", cache)
        return CorpusTokenizer(tok, files, key, max_bytes)
    n_bytes = sum(p.stat().st_size for p in files)
    if max_bytes is not None:
        n_bytes = min(n_bytes, int(max_bytes))
    say(progress, f"training BPE tokenizer on {len(files)} files ({n_bytes / 1e6:.1f} MB, vocab {vocab_size}) ...")
    t0 = time.perf_counter()
    tok = train_tokenizer(read_texts(files, max_bytes=max_bytes), vocab_size=vocab_size, length=len(files))
    say(progress, f"trained {tok.get_vocab_size()} tokens in {time.perf_counter() - t0:.1f} s; cached at {cache}")
    text = tok.to_str()
    atomic_write(cache, lambda fh: fh.write(text.encode("utf-8")))
    return CorpusTokenizer(tok, files, key, max_bytes)


def load_or_train_tokenizer(path=None, vocab_size: int = 8192, cache_dir=None, max_bytes=None,
                            progress: bool = False, suffixes=None) -> Tokenizer:
    """The byte-level BPE tokenizer of a corpus: loaded from the cache when present, else trained and cached.

    ``path``, ``suffixes`` and ``max_bytes`` select the corpus as in :func:`sigprop.data.corpus.corpus_files`
    (default: the standard library's sources, capped at :data:`~sigprop.data.corpus.DEFAULT_MAX_BYTES`);
    ``vocab_size`` ≥ :data:`MIN_VOCAB_SIZE` is the target vocabulary (the trained one may be smaller on a tiny
    corpus; every id is < ``vocab_size``). See the module docstring for the cache layout. With ``progress``, a line
    "training BPE tokenizer on N files (X MB, vocab V) ..." and one with the time taken go to stderr.
    """
    return prepare_tokenizer(path, vocab_size, cache_dir, max_bytes, progress, suffixes).tokenizer


def special_id(tok: Tokenizer, token: str) -> int:
    """Id of a special token in ``tok``; ``ValueError`` if the tokenizer lacks it."""
    i = tok.token_to_id(token)
    if i is None:
        raise ValueError(f"tokenizer has no special token {token!r} (expected one of {SPECIAL_TOKENS})")
    return int(i)


def pad_id(tok: Tokenizer) -> int:
    """Id of ``[PAD]`` (0 for tokenizers built here)."""
    return special_id(tok, "[PAD]")


def mask_id(tok: Tokenizer) -> int:
    """Id of ``[MASK]`` (1 for tokenizers built here)."""
    return special_id(tok, "[MASK]")


def write_hf_tokenizer(tok: Tokenizer, folder, model_max_length: int) -> list[Path]:
    """Write ``tok`` into ``folder`` as a Hugging Face fast tokenizer: ``tokenizer.json`` (the tokenizer itself, as
    the ``tokenizers`` library saves it) and ``tokenizer_config.json`` naming its special tokens
    (:data:`SPECIAL_TOKENS`: pad, mask, cls, sep, unk), so that ``AutoTokenizer.from_pretrained(folder)`` encodes any
    text to the ids ``tok`` gives it (no special tokens are added: sigprop's batches hold none either).

    Args:
        tok: sigprop's byte-level BPE tokenizer (:func:`load_or_train_tokenizer`).
        folder: an existing folder (a model's export).
        model_max_length: the longest sequence the model takes.

    Returns:
        The two files written (atomically).
    """
    from ..core.jsonio import write_json_atomic, write_text_atomic

    _validate(tok, tok.get_vocab_size())
    folder = Path(folder)
    pad, mask, cls, sep, unk = SPECIAL_TOKENS
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": int(model_max_length),
              "pad_token": pad, "mask_token": mask, "cls_token": cls, "sep_token": sep, "unk_token": unk,
              "clean_up_tokenization_spaces": False}
    return [write_text_atomic(folder / "tokenizer.json", tok.to_str()),
            write_json_atomic(folder / "tokenizer_config.json", config)]

