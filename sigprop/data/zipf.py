"""Synthetic tokens drawn i.i.d. from a Zipf law, the input model of Kedia et al. App. A.1 ("Token Embeddings").

Kedia et al. assume token ids "sampled from a multinomial distribution" with Zipf's law p_i = c/i for the token of
rank i (App. A.1); we allow the general exponent s, p_i = i^{-s} / H_V^{(s)} with H_V^{(s)} = Σ_{j=1}^V j^{-s}. For
such tokens the expected embedding token correlation is exactly Σ_i p_i²
(:func:`sigprop.components.embedding.zipf_correlation` with ``approx="exact"``).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["zipf_probs", "zipf_tokens"]


def _check_int(value, name: str, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo} (got {value!r})")
    return int(value)


def _check_exponent(exponent) -> float:
    try:
        s = float(exponent)
    except (TypeError, ValueError):
        raise ValueError(f"exponent must be a finite number >= 0 (got {exponent!r})") from None
    if not np.isfinite(s) or s < 0:
        raise ValueError(f"exponent must be a finite number >= 0 (got {exponent!r})")
    return s


def zipf_probs(vocab_size: int, exponent: float = 1.0) -> np.ndarray:
    """Zipf probabilities p_i = i^{-s} / Σ_{j=1}^V j^{-s}, i = 1 … V (float64, index 0 = rank 1).

    ``exponent`` s ≥ 0 (s = 0 is uniform; s = 1 is Kedia et al.'s Zipf law, App. A.1).
    """
    v = _check_int(vocab_size, "vocab_size", 1)
    s = _check_exponent(exponent)
    w = np.arange(1, v + 1, dtype=np.float64) ** (-s)
    return w / w.sum()


def zipf_tokens(batch_size: int, seq_len: int, vocab_size: int, exponent: float = 1.0,
                generator: torch.Generator | None = None, first_id: int = 0) -> torch.LongTensor:
    """A (batch_size, seq_len) int64 tensor of i.i.d. token ids with P(id = first_id + i − 1) = p_i ∝ 1/i^s.

    Rank 1 (the most frequent token) is ``first_id``; ids span first_id … first_id + vocab_size − 1, so
    ``first_id=5`` keeps clear of the special tokens of :mod:`sigprop.data.tokenizer`. Sampling is by inversion:
    u ~ U[0, 1) from ``generator`` (float64), id = #{i : F_i ≤ u} with F the cumulative sum of :func:`zipf_probs`
    renormalised so that F_V = 1 exactly; the error in each p_i is one float64 rounding (~1e-16).
    """
    batch_size = _check_int(batch_size, "batch_size", 1)
    seq_len = _check_int(seq_len, "seq_len", 1)
    first_id = _check_int(first_id, "first_id", 0)
    p = zipf_probs(vocab_size, exponent)
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    cdf_t = torch.from_numpy(cdf)
    u = torch.rand((batch_size, seq_len), generator=generator, dtype=torch.float64)
    idx = torch.searchsorted(cdf_t, u, right=True).clamp_(max=len(p) - 1)
    return idx + first_id
