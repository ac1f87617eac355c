"""Helpers shared by the sigprop.data tests: small deterministic text corpora and a byte-level token decoder."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sigprop.data import SPECIAL_TOKENS

_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her she there one all we their can has been would if more when will no so some what out up into "
    "signal variance layer token residual attention softmax gradient correlation moment depth width"
)
WORDS = tuple(_WORDS.split(" "))


def make_text(rng: np.random.Generator, n_words: int) -> str:
    """ASCII pseudo-prose: Zipf-ish word choice, sentences of 5–15 words, a newline every few sentences."""
    p = 1.0 / np.arange(1, len(WORDS) + 1)
    p /= p.sum()
    out, i = [], 0
    while i < n_words:
        k = int(rng.integers(5, 16))
        words = [WORDS[j] for j in rng.choice(len(WORDS), size=k, p=p)]
        words[0] = words[0].capitalize()
        out.append(" ".join(words) + ("." if rng.random() < 0.7 else ".\n"))
        i += k
    return " ".join(out)


def make_corpus(root: Path, n_files: int = 6, n_words: int = 1500, seed: int = 0) -> list[Path]:
    """Write ``n_files`` text files (two in a subfolder) under ``root``; return them sorted."""
    rng = np.random.default_rng(seed)
    files = []
    for i in range(n_files):
        folder = root / "sub" if i % 3 == 2 else root
        folder.mkdir(parents=True, exist_ok=True)
        f = folder / f"doc{i:02d}.txt"
        f.write_text(make_text(rng, n_words), encoding="utf-8")
        files.append(f.resolve())
    return sorted(files)


def count_calls(monkeypatch, module, name: str) -> list:
    """Wrap ``module.name`` so that every call appends to the returned list (to prove a cache was hit)."""
    calls = []
    real = getattr(module, name)

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte → printable character table (Radford et al. 2019, encoder.py), the byte-level BPE alphabet."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=True))


_UNICODE_TO_BYTE = {c: b for b, c in _bytes_to_unicode().items()}


def token_bytes(tok, ids) -> bytes:
    """The raw bytes that a sequence of byte-level BPE ids stands for (special tokens as their literal text), so
    that a window cut mid-character can still be compared with the corpus byte for byte."""
    out = bytearray()
    for i in ids:
        t = tok.id_to_token(int(i))
        if t in SPECIAL_TOKENS:
            out += t.encode("utf-8")
        else:
            out += bytes(_UNICODE_TO_BYTE[c] for c in t)
    return bytes(out)
