"""Geometric mean fold error between predicted and measured APJNs, and the early / middle / deep split of the blocks
it is reported on (Alekseev 2026, App. A, Eq. 20; Fig. 1(b), Figs. 8, 9)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["gmfe", "block_thirds", "gmfe_by_third", "strided_blocks", "THIRDS"]

#: Names of the three depth ranges, in order.
THIRDS = ("early", "middle", "deep")


def gmfe(theory, measured, axis=-1) -> np.ndarray | float:
    """GMFE = exp((1/|S|) Σ_{b∈S} |log(𝒥_theory^{B,b} / 𝒥_ViT^{B,b})|) (Alekseev Eq. 20) over the entries of
    ``theory`` and ``measured`` along ``axis`` (the blocks S; other axes broadcast, e.g. one row per sample).

    It is the typical multiplicative error factor: 1 for perfect agreement, symmetric in over- and
    under-prediction (a factor c either way gives c), and exactly c when every block is off by the same factor c.
    Both arguments must be positive and finite. Returns a float for 1-D input, an array otherwise."""
    t = np.asarray(theory, dtype=np.float64)
    m = np.asarray(measured, dtype=np.float64)
    try:
        t, m = np.broadcast_arrays(t, m)
    except ValueError:
        raise ValueError(f"theory and measured must have broadcastable shapes (got {t.shape} and {m.shape})") from None
    if t.ndim == 0 or t.shape[axis] == 0:
        raise ValueError("gmfe needs at least one block")
    for name, a in (("theory", t), ("measured", m)):
        if not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise ValueError(f"{name} APJNs must be positive and finite")
    out = np.exp(np.mean(np.abs(np.log(t) - np.log(m)), axis=axis))
    return float(out) if out.ndim == 0 else out


def block_thirds(blocks: Sequence[int], n_blocks: int) -> dict[str, np.ndarray]:
    """Split ``blocks`` (indices b in [0, B]) into the first third of the network (early: b < B/3), the second
    (middle: B/3 ≤ b < 2B/3) and the last (deep: b ≥ 2B/3) (Alekseev App. A, Eq. 20's sets S). Returns
    {"early": …, "middle": …, "deep": …}, each the blocks that fall there in their given order (possibly empty)."""
    if isinstance(n_blocks, bool) or not isinstance(n_blocks, (int, np.integer)) or n_blocks < 1:
        raise ValueError(f"n_blocks must be an integer >= 1 (got {n_blocks!r})")
    b = np.asarray(list(blocks), dtype=np.int64)
    if b.size and (b.min() < 0 or b.max() > n_blocks):
        raise ValueError(f"blocks must lie in [0, {n_blocks}] (got {b.tolist()})")
    third = 3 * b  # compare 3b with B and 2B: exact in integers
    return {"early": b[third < n_blocks], "middle": b[(third >= n_blocks) & (third < 2 * n_blocks)],
            "deep": b[third >= 2 * n_blocks]}


def gmfe_by_third(theory, measured, blocks: Sequence[int], n_blocks: int) -> dict[str, float]:
    """GMFE (Eq. 20) separately over the early, middle and deep blocks (:func:`block_thirds`; the last axis of
    ``theory`` / ``measured`` runs over ``blocks``), as in Alekseev Fig. 1(b). A third with no block is left out."""
    t = np.asarray(theory, dtype=np.float64)
    m = np.asarray(measured, dtype=np.float64)
    b = np.asarray(list(blocks), dtype=np.int64)
    if t.shape[-1] != b.size or m.shape[-1] != b.size:
        raise ValueError(f"the last axis of theory and measured must run over the {b.size} blocks "
                         f"(got {t.shape} and {m.shape})")
    out = {}
    for name, chosen in block_thirds(b, n_blocks).items():
        if chosen.size:
            mask = np.isin(b, chosen)
            out[name] = gmfe(t[..., mask], m[..., mask])
    return out


def strided_blocks(n_blocks: int, stride: int = 4) -> np.ndarray:
    """Every ``stride``-th block excluding the endpoints 0 and B: stride, 2·stride, … < B (Alekseev App. A, Fig. 1(b):
    "every fourth transformer block of a 128-block ViT model, excluding the endpoints")."""
    for name, v in (("n_blocks", n_blocks), ("stride", stride)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1 (got {v!r})")
    return np.arange(stride, n_blocks, stride, dtype=np.int64)
