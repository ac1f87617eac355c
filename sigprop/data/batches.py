"""Batches of real token sequences: the corpus encoded once into one long id array, windows cut at random offsets.

The corpus (see :mod:`sigprop.data.corpus`) is encoded with its BPE tokenizer (:mod:`sigprop.data.tokenizer`),
documents (files) joined by ``[SEP]``, into one 1-D array of ids; the array is cached beside the tokenizer as
``tokens-<key>-<tokenizer hash>.npy`` (``numpy.save``, read back with ``allow_pickle=False``, written atomically).
A batch is ``batch_size`` windows of ``seq_len`` consecutive ids whose start offsets are i.i.d. uniform on
{0, …, n − seq_len}, drawn from a ``torch.Generator`` seeded with ``seed``: the same seed gives the same batches.

These are the real-text inputs whose token correlation (repeated tokens within a sequence) enters the embedding's
moments, Kedia et al. App. A.1; measure it with :func:`sigprop.components.embedding.repetition_correlation`.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from .corpus import read_texts
from .tokenizer import atomic_write, default_cache_dir, prepare_tokenizer, say, special_id

__all__ = ["TokenStream", "token_batches", "load_batch", "encode_texts"]

logger = logging.getLogger("sigprop.data")

_ENCODE_CHUNK = 64  # texts per encode_batch call: parallel enough, without holding every Encoding at once


def _check_int(value, name: str, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo} (got {value!r})")
    return int(value)


def _id_dtype(vocab_size: int):
    return np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.int32


def encode_texts(tok: Tokenizer, texts, separator: str | None = "[SEP]") -> np.ndarray:
    """Encode an iterable of documents into one 1-D id array, ``separator``'s id between consecutive documents.

    Special-token strings that occur *in the text* (e.g. a literal "[MASK]" in a markdown file) are encoded as
    ordinary text, so special ids appear only where this function puts them. dtype: uint16 when the vocabulary
    fits, else int32.
    """
    sep = None if separator is None else special_id(tok, separator)
    dtype = _id_dtype(tok.get_vocab_size())
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    old = tok.encode_special_tokens
    tok.encode_special_tokens = True
    parts: list[np.ndarray] = []
    chunk: list[str] = []

    def flush():
        for enc in encode(chunk, add_special_tokens=False):
            if sep is not None and parts:
                parts.append(np.array([sep], dtype=dtype))
            parts.append(np.asarray(enc.ids, dtype=dtype))
        chunk.clear()

    try:
        for text in texts:
            chunk.append(text)
            if len(chunk) >= _ENCODE_CHUNK:
                flush()
        if chunk:
            flush()
    finally:
        tok.encode_special_tokens = old
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def _tokens_cache_path(cache_dir, key: str, tok: Tokenizer) -> Path | None:
    tok_hash = hashlib.sha256(tok.to_str().encode("utf-8")).hexdigest()[:12]
    base = Path(cache_dir if cache_dir is not None else default_cache_dir()).expanduser()
    return base / f"tokens-{key}-{tok_hash}.npy"


def _load_ids(path: Path, vocab_size: int) -> np.ndarray | None:
    if not path.is_file():
        return None
    try:
        ids = np.load(path, allow_pickle=False)
        if ids.ndim != 1 or ids.dtype.kind not in "iu" or ids.size == 0:
            raise ValueError(f"expected a non-empty 1-D integer array, got shape {ids.shape} dtype {ids.dtype}")
        if int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
            raise ValueError(f"ids outside [0, {vocab_size})")
    except (OSError, ValueError, EOFError) as exc:
        logger.warning("token cache %s is unreadable (%s); re-encoding", path, str(exc)[:200])
        return None
    return ids


class TokenStream:
    """A corpus as one long array of token ids, with its tokenizer; cuts reproducible random windows.

    Build it with :meth:`from_corpus` (cached encoding of a corpus) or directly from an id array.
    ``vocab_size`` is the size of the id space (every id is smaller): the tokenizer's vocabulary when one is given,
    else ``ids.max() + 1``.
    """

    def __init__(self, ids, tokenizer: Tokenizer | None = None, vocab_size: int | None = None):
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise ValueError(f"ids must be a 1-D integer array (got shape {ids.shape}, dtype {ids.dtype})")
        if ids.size == 0:
            raise ValueError("ids: the token stream is empty")
        if int(ids.min()) < 0:
            raise ValueError("ids must be non-negative")
        self.ids = ids
        self.tokenizer = tokenizer
        if vocab_size is None:
            vocab_size = tokenizer.get_vocab_size() if tokenizer is not None else int(ids.max()) + 1
        self.vocab_size = _check_int(vocab_size, "vocab_size", int(ids.max()) + 1)

    def __len__(self) -> int:
        return int(self.ids.size)

    def __repr__(self) -> str:
        return f"TokenStream({len(self)} tokens, vocab_size={self.vocab_size})"

    @classmethod
    def from_corpus(cls, path=None, vocab_size: int = 8192, cache_dir=None, max_bytes=None, progress: bool = False,
                    suffixes=None) -> TokenStream:
        """Encode a corpus (see :func:`sigprop.data.tokenizer.load_or_train_tokenizer` for the arguments), or load
        its cached encoding. A cache file that fails to load or validate is re-encoded."""
        prep = prepare_tokenizer(path, vocab_size, cache_dir, max_bytes, progress, suffixes)
        tok = prep.tokenizer
        cache = _tokens_cache_path(cache_dir, prep.key, tok)
        ids = _load_ids(cache, tok.get_vocab_size())
        if ids is None:
            say(progress, f"encoding {len(prep.files)} files with the tokenizer ...")
            t0 = time.perf_counter()
            ids = encode_texts(tok, read_texts(prep.files, max_bytes=prep.max_bytes))
            if ids.size == 0:
                raise ValueError("the corpus encodes to no tokens")
            say(progress, f"encoded {ids.size} tokens in {time.perf_counter() - t0:.1f} s; cached at {cache}")
            atomic_write(cache, lambda fh: np.save(fh, ids, allow_pickle=False))
        return cls(ids, tok)

    def sample(self, batch_size: int, seq_len: int, generator: torch.Generator | None = None) -> torch.LongTensor:
        """One (batch_size, seq_len) int64 batch of windows at i.i.d. uniform offsets in {0, …, n − seq_len}."""
        batch_size = _check_int(batch_size, "batch_size", 1)
        seq_len = self._check_seq_len(seq_len)
        high = len(self) - seq_len + 1
        offsets = torch.randint(0, high, (batch_size,), generator=generator).numpy()
        window = self.ids[offsets[:, None] + np.arange(seq_len)[None, :]]
        return torch.from_numpy(window.astype(np.int64))

    def _check_seq_len(self, seq_len) -> int:
        seq_len = _check_int(seq_len, "seq_len", 1)
        if seq_len > len(self):
            raise ValueError(f"seq_len {seq_len} exceeds the corpus, which has only {len(self)} tokens;"
                             " use a larger corpus (--data PATH, max_bytes) or a shorter seq_len")
        return seq_len

    def batches(self, batch_size: int, seq_len: int, seed: int = 0, n_batches: int | None = None,
                generator: torch.Generator | None = None, device=None) -> Iterator[torch.LongTensor]:
        """Iterator of :meth:`sample` batches: ``n_batches`` of them, or endless when None. Offsets come from
        ``generator`` if given, else a fresh CPU ``torch.Generator`` seeded with ``seed``. Arguments are checked
        here, before the first batch is drawn."""
        batch_size = _check_int(batch_size, "batch_size", 1)
        seq_len = self._check_seq_len(seq_len)
        if n_batches is not None:
            n_batches = _check_int(n_batches, "n_batches", 0)
        if generator is None:
            generator = torch.Generator().manual_seed(_check_int(seed, "seed", 0))

        def gen():
            i = 0
            while n_batches is None or i < n_batches:
                batch = self.sample(batch_size, seq_len, generator)
                yield batch if device is None else batch.to(device)
                i += 1

        return gen()


def token_batches(batch_size: int, seq_len: int, path=None, vocab_size: int = 8192, seed: int = 0,
                  n_batches: int | None = None, cache_dir=None, max_bytes=None, *, suffixes=None,
                  progress: bool = False, generator: torch.Generator | None = None,
                  device=None) -> Iterator[torch.LongTensor]:
    """Batches (batch_size, seq_len) of int64 token ids from a corpus (default: the standard library's sources).

    ``path``, ``suffixes``, ``max_bytes``, ``vocab_size``, ``cache_dir`` and ``progress`` select and tokenize the
    corpus (:meth:`TokenStream.from_corpus`, cached); ``seed``, ``n_batches``, ``generator``, ``device`` as in
    :meth:`TokenStream.batches`. Raises ``ValueError`` when the corpus has fewer than ``seq_len`` tokens.
    """
    _check_int(batch_size, "batch_size", 1)
    _check_int(seq_len, "seq_len", 1)
    stream = TokenStream.from_corpus(path, vocab_size, cache_dir, max_bytes, progress, suffixes)
    return stream.batches(batch_size, seq_len, seed=seed, n_batches=n_batches, generator=generator, device=device)


def load_batch(batch_size: int, seq_len: int, path=None, vocab_size: int = 8192, seed: int = 0, cache_dir=None,
               max_bytes=None, **kwargs) -> torch.LongTensor:
    """One batch: the first batch of :func:`token_batches` with the same arguments."""
    kwargs.pop("n_batches", None)
    return next(token_batches(batch_size, seq_len, path, vocab_size, seed, 1, cache_dir, max_bytes, **kwargs))
