"""Input embeddings: token + learned position + segment tables, and the input moments they produce
(Kedia et al. App. A.1; measured input moments for speech / vision inputs, Sec. 4.3 and App. H)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..core.moments import Moments, Stat
from ..core.validate import check_range, clip_corr

__all__ = [
    "Embedding",
    "repetition_correlation",
    "zipf_correlation",
    "segment_correlation",
    "embedding_forward",
    "input_moments",
]

EULER_GAMMA = 0.5772156649015329


def repetition_correlation(token_ids: torch.Tensor, pad_id: int | None = None) -> float:
    """Token correlation of an embedding lookup from the token ids themselves (App. A.1, exact).

    Two positions holding the same token get the same embedding row (correlation 1); different tokens get
    independent rows (correlation 0 in expectation over the table). A sequence in which token i occurs N_i times
    therefore has r = Σ_i N_i(N_i − 1) / (L(L − 1)). For a batch (batch, L) the pair counts are pooled over
    sequences, which is how :mod:`sigprop.core.stats` measures a correlation; padding (``pad_id``) is excluded.
    """
    ids = torch.as_tensor(token_ids)
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2:
        raise ValueError(f"token_ids must have shape (batch, length), got {tuple(ids.shape)}")
    same: float = 0
    pairs = 0
    for row in ids:
        if pad_id is not None:
            row = row[row != pad_id]
        n = row.numel()
        if n < 2:
            continue
        counts = torch.unique(row, return_counts=True)[1].double()
        same += float((counts * (counts - 1)).sum())
        pairs += n * (n - 1)
    if pairs == 0:
        raise ValueError("token_ids: need at least one sequence with two or more (non-padding) tokens")
    return same / pairs


def zipf_correlation(vocab_size: Stat, seq_len: Stat | None = None, approx: str = "exact",
                     exponent: float = 1.0) -> Stat:
    """Expected token correlation of an embedding output when tokens are i.i.d. Zipf, p_i ∝ 1/i^s (App. A.1).

    * ``"exact"`` (ours): for tokens drawn i.i.d. from p, E[N_i(N_i−1)] = L(L−1)p_i², so the expected
      repetition correlation is exactly Σ_i p_i² = H^{(2s)}_V / (H^{(s)}_V)², independent of L.
    * ``"kedia"``: the paper's plug-in N_i = p_i L, giving (L Σ p_i² − 1)/(L − 1) with Σp_i² ≈ (π²/6)/(γ + ln V)²
      (needs ``seq_len``); it undercounts repetitions by O(1/(L Σp²)).
    * ``"kedia_simplified"``: π² / (6 ln² V) (the paper's final form, assuming γ ≪ ln V and L ≫ 1).
    """
    v = check_range(vocab_size, "vocab_size", lo=2.0, allowed="integers >= 2")
    if approx == "exact":
        s = check_range(exponent, "exponent", lo=0.0, lo_open=True, allowed="(0, inf)")
        v_int = np.asarray(v, dtype=np.int64)
        out = np.vectorize(lambda n: _zipf_sum_sq(int(n), s))(v_int)
        return float(out) if np.ndim(out) == 0 else out
    if approx == "kedia":
        if seq_len is None:
            raise ValueError("seq_len is required for approx='kedia'")
        L = check_range(seq_len, "seq_len", lo=2.0, allowed="integers >= 2")
        sum_sq = (np.pi**2 / 6.0) / (EULER_GAMMA + np.log(v)) ** 2
        return (L * sum_sq - 1.0) / (L - 1.0)
    if approx == "kedia_simplified":
        return np.pi**2 / (6.0 * np.log(v) ** 2)
    raise ValueError(f"approx must be 'exact', 'kedia' or 'kedia_simplified' (got {approx!r})")


def _zipf_sum_sq(v: int, s: float) -> float:
    i = np.arange(1, v + 1, dtype=np.float64)
    w = i ** (-s)
    return float(np.sum(w * w) / np.sum(w) ** 2)


def segment_correlation(seq_len: Stat | None = None, approx: str = "exact") -> Stat:
    """Token correlation of segment (sentence A / B) embeddings when the first segment's length x is uniform
    (App. A.1): with N₁ = x, N₂ = L − x, r = (N₁² + N₂² − L)/(L(L − 1)).

    * ``"exact"``: for x uniform on {0, …, L}, E[N₁² + N₂²] = L(2L + 1)/3, so E[r] = 2/3 exactly for every L.
    * ``"kedia"``: the paper's continuous average (2L²/3 − L)/(L(L − 1)) (needs ``seq_len``); → 2/3.
    """
    if approx == "exact":
        return 2.0 / 3.0
    if approx == "kedia":
        if seq_len is None:
            raise ValueError("seq_len is required for approx='kedia'")
        L = check_range(seq_len, "seq_len", lo=2.0, allowed="integers >= 2")
        return (2.0 * L * L / 3.0 - L) / (L * (L - 1.0))
    raise ValueError(f"approx must be 'exact' or 'kedia' (got {approx!r})")


def embedding_forward(token_var: Stat, token_corr: Stat, position_var: Stat = 0.0, segment_var: Stat = 0.0,
                      segment_corr: Stat = 2.0 / 3.0) -> Moments:
    """Moments of token + position + segment embeddings summed (App. A.1, "Final Model Input Embeddings").

    The three tables are independent and zero-mean, so variances add and the token covariance is the
    variance-weighted sum: r = (σ²_tok r_tok + σ²_seg r_seg + σ²_pos · 0)/(σ²_tok + σ²_pos + σ²_seg). Learned
    position rows are distinct per position, hence contribute no token covariance. The paper's "average of the
    three" is the equal-variance case. Hidden units are independent (corr_hidden = 0).
    """
    token_var = check_range(token_var, "token_var", lo=0.0, lo_open=True, allowed="(0, inf)")
    token_corr = check_range(token_corr, "token_corr", lo=0.0, hi=1.0)
    position_var = check_range(position_var, "position_var", lo=0.0)
    segment_var = check_range(segment_var, "segment_var", lo=0.0)
    segment_corr = check_range(segment_corr, "segment_corr", lo=0.0, hi=1.0)
    var = token_var + position_var + segment_var
    corr = (token_var * token_corr + segment_var * segment_corr) / var
    return Moments(mean=0.0 * var, var=var, corr=clip_corr(corr), corr_hidden=0.0 * var)


def input_moments(x: torch.Tensor, mask: torch.Tensor | None = None) -> Moments:
    """Measured moments of an input tensor (batch, tokens, hidden), for inputs without a lookup-table theory
    (speech features, image patches): the path Kedia et al. use for speech-to-text (Sec. 4.3) and vision (App. H).

    ``mask`` (batch, tokens), true for real tokens, excludes padding: only sequences' real tokens enter, and
    token pairs are counted within each sequence.
    """
    if x.dim() != 3:
        raise ValueError(f"x must have shape (batch, tokens, hidden), got {tuple(x.shape)}")
    x = x.detach().double()
    if mask is None:
        mask = torch.ones(x.shape[:2], dtype=torch.bool)
    mask = torch.as_tensor(mask, dtype=torch.bool)
    if mask.shape != x.shape[:2]:
        raise ValueError(f"mask must have shape {tuple(x.shape[:2])}, got {tuple(mask.shape)}")
    w = mask.double()[..., None]
    d = x.shape[-1]
    n = float(w.sum()) * d
    if n == 0:
        raise ValueError("mask excludes every token")
    mean = float((x * w).sum()) / n
    xc = (x - mean) * w
    s2 = float((xc * xc).sum())
    var = s2 / n
    if var <= 0:
        raise ValueError("input has zero variance")
    col = xc.sum(dim=1)
    lengths = w[..., 0].sum(dim=1)
    n_pairs = float((lengths * (lengths - 1)).sum()) * d
    corr = (float((col * col).sum()) - s2) / n_pairs / var if n_pairs > 0 else 0.0
    row = xc.sum(dim=2)
    corr_hidden = (float((row * row).sum()) - s2) / (float(w.sum()) * d * (d - 1)) / var if d > 1 else 0.0
    return Moments(mean=mean, var=var, corr=clip_corr(corr, tol=1e-6), corr_hidden=clip_corr(corr_hidden, tol=1e-6))


def _table(rows: int, d_model: int) -> nn.Embedding:
    """An embedding table left uninitialised (:meth:`Embedding.reset_parameters` fills it): torch's own default
    fill on the meta device imports torch._dynamo, seconds of every theory-only model's start
    (docs/results/performance.md)."""
    return nn.Embedding(rows, d_model, _weight=torch.empty(rows, d_model))


class Embedding(nn.Module):
    """Token + learned position (+ optional segment) embeddings, each table N(0, std²); the token rows multiplied by
    ``token_scale`` (Gemma's √d; a tied head reads the table itself).

    ``forward(token_ids, segment_ids=None)`` returns (batch, L, d). ``forward_moments(token_corr)`` gives the output
    moments for a token correlation (from :func:`repetition_correlation` on real ids, or :func:`zipf_correlation`).
    """

    def __init__(self, vocab_size: int, d_model: int, max_len: int = 0, n_segments: int = 0,
                 token_std: float = 1.0, position_std: float | None = None, segment_std: float | None = None,
                 token_scale: float = 1.0) -> None:
        super().__init__()
        check_range(vocab_size, "vocab_size", lo=1.0, allowed="integers >= 1")
        check_range(d_model, "d_model", lo=1.0, allowed="integers >= 1")
        check_range(max_len, "max_len", lo=0.0, allowed="integers >= 0")
        check_range(n_segments, "n_segments", lo=0.0, allowed="integers >= 0")
        self.token_std = float(check_range(token_std, "token_std", lo=0.0, lo_open=True, allowed="(0, inf)"))
        self.position_std = self.token_std if position_std is None else float(position_std)
        self.segment_std = self.token_std if segment_std is None else float(segment_std)
        self.token_scale = float(check_range(token_scale, "token_scale", lo=0.0, lo_open=True, allowed="(0, inf)"))
        self.token = _table(vocab_size, d_model)
        self.position = _table(max_len, d_model) if max_len else None
        self.segment = _table(n_segments, d_model) if n_segments else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.token.weight.is_meta:  # built on the meta device: the owner initialises after materialising
            return
        with torch.no_grad():
            self.token.weight.normal_(0.0, self.token_std)
            if self.position is not None:
                self.position.weight.normal_(0.0, self.position_std)
            if self.segment is not None:
                self.segment.weight.normal_(0.0, self.segment_std)

    def _check(self, length: int, segment_ids: torch.Tensor | None) -> None:
        """The sequence fits the position table, and segment ids come where the embedding has segments."""
        if self.position is not None and length > self.position.num_embeddings:
            raise ValueError(f"sequence length {length} exceeds max_len {self.position.num_embeddings}")
        if self.segment is not None and segment_ids is None:
            raise ValueError("this embedding has segment embeddings: pass segment_ids")

    def forward(self, token_ids: torch.Tensor, segment_ids: torch.Tensor | None = None) -> torch.Tensor:
        length = token_ids.shape[-1]
        self._check(length, segment_ids)
        x = self.token(token_ids)
        if self.token_scale != 1.0:
            x = x * self.token_scale
        if self.position is not None:
            x = x + self.position(torch.arange(length, device=token_ids.device))
        if self.segment is not None:
            x = x + self.segment(segment_ids)
        return x

    def gram(self, token_ids: torch.Tensor, segment_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Token-resolved moments: the per-element token Gram matrix (batch, L, L) of the output for these ids,
        G_jl = E[x_j^a x_l^a] = σ²_tok [t_j = t_l] + σ²_pos [j = l] + σ²_seg [s_j = s_l] (float64; App. A.1 with each
        token pair kept apart: the three tables are independent and zero-mean, a repeated id shares its token row,
        every position has its own row)."""
        ids = torch.as_tensor(token_ids)
        ids = ids[None] if ids.dim() == 1 else ids
        if ids.dim() != 2:
            raise ValueError(f"token_ids must have shape (batch, L), got {tuple(ids.shape)}")
        length = ids.shape[-1]
        self._check(length, segment_ids)
        out = (self.token_std * self.token_scale)**2 * (ids[:, :, None] == ids[:, None, :]).to(torch.float64)
        if self.position is not None:
            out = out + self.position_std**2 * torch.eye(length, dtype=torch.float64)
        if self.segment is not None:
            seg = torch.as_tensor(segment_ids).reshape(ids.shape)
            out = out + self.segment_std**2 * (seg[:, :, None] == seg[:, None, :]).to(torch.float64)
        return out

    def forward_moments(self, token_corr: Stat, segment_corr: Stat = 2.0 / 3.0) -> Moments:
        return embedding_forward(
            (self.token_std * self.token_scale)**2, token_corr,
            position_var=self.position_std**2 if self.position is not None else 0.0,
            segment_var=self.segment_std**2 if self.segment is not None else 0.0,
            segment_corr=segment_corr)

