"""Covariance and APJN recurrences of a pre-LN / DyT / Derf transformer at initialization (Alekseev 2026).

Model (Alekseev Sec. 2.1, Eq. 1): L = 2B layers, l = 0, …, L−1; even l is bidirectional self-attention, odd l a
ReLU MLP; block b = (layer 2b, layer 2b+1). The branch input is h̃ = φ_α(h) or LayerNorm(h) (Eq. 2). Weights are
Gaussian with σ_OV = σ_O σ_V and σ_21 = σ_2 σ_1 (Sec. 2.1, Result 3.1). State: (q^l, p^l) = per-feature self and
cross-token covariance of the *input* of layer l (so q^0, p^0 is the embedding, q^L the last block's output).
Assumption 2.1: permutation-symmetric tokens, Gaussian mean field, uniform attention A_st = 1/n.

Covariance (Result 3.1, Eqs. 8–9; derivation App. B), with (q̃, p̃) from :mod:`sigprop.apjn.elementwise`:

    attn (l even):  q^{l+1} = q^l + σ_OV² p̃^l,                    p^{l+1} = p^l + σ_OV² p̃^l
    MLP  (l odd):   q^{l+1} = q^l + ½σ_21² q̃^l,                   p^{l+1} = p^l + ½σ_21² q̃^l κ(p̃^l/q̃^l)

κ(ρ) = [√(1−ρ²) + ρ(π − arccos ρ)]/π (Eq. 28). With a finite context n and ``covariance="finite_n"`` the attention
increment is Eq. 32's σ_OV² (q̃/n + (n−1)p̃/n) (for both q and p: under uniform attention every token receives the
same branch output). Multi-head attention with the standard 1/d init of W_O gives the same update (App. B.3, Eq. 36).

Simplified APJN (Result 3.2, Eqs. 11–12; backward App. C Eqs. 47–48), J^{0,0} = 1:

    J^{l+1,0} = χ^l J^{l,0},   χ^l = 1 (attn),  1 + ½σ_21² q̂^l (MLP);      J^{L,l} = J^{L,0}/J^{l,0}.

Full APJN with the cross-positional Jacobian correlation K (App. C, Results C.1 and C.2), context size n:

    forward (Eqs. 37, 39; J^{0,0} = 1, K^{0,0} = 0, Eq. 42)
      attn: J^{l+1,0} = (1 + σ_OV² q̂^l/n) J^{l,0} + σ_OV² p̂^l K^{l,0}
            K^{l+1,0} = (1 + σ_OV² p̂^l) K^{l,0} + σ_OV² q̂^l J^{l,0}/n
      MLP:  J^{l+1,0} = (1 + ½σ_21² q̂^l) J^{l,0},     K^{l+1,0} = (1 + σ_21² κ̂^l p̂^l) K^{l,0}
    backward (Eqs. 43, 45; J^{L,L} = 1, K^{L,L} = 0, Eq. 46)
      attn: J^{L,l} = (1 + σ_OV² q̂^l/n) J^{L,l+1} + σ_OV² q̂^l K^{L,l+1}
            K^{L,l} = (1 + σ_OV² p̂^l) K^{L,l+1} + σ_OV² p̂^l J^{L,l+1}/n
      MLP:  J^{L,l} = (1 + ½σ_21² q̂^l) J^{L,l+1},     K^{L,l} = (1 + σ_21² κ̂^l p̂^l) K^{L,l+1}

with κ̂^l = 1/4 + asin(p̃^l/q̃^l)/(2π) (Eq. 41). Note the paper's asymmetry, kept exactly: forward attention couples
J to K through p̂ and feeds K from J through q̂; backward it is the other way round (q̂ into J, p̂ into K). Both
follow from Eq. 62: in the backward sums the two Jacobian factors share the input token b, so the J equation gets
E[φ'(h_b)²] = q̂, while in K the input tokens b ≠ f differ (p̂) — a re-derivation from Eqs. 62, 66–67 confirms the
printed forms. Multi-head attention gives the same recurrences (App. C.2.3, Eq. 65: averaging A^h A^h over heads
under uniform attention reduces Eq. 65 to Eq. 62), so there is no separate multi-head variant. As n → ∞ the K source
vanishes, K ≡ 0, and the full recurrence equals the simplified one; it differs only for finite ``n``.

Finite-n option (``exact_n=True``, not the paper's default): App. C.2 approximates n(n−1) ≈ n² (below Eq. 50) while
K keeps its n(n−1) normalisation (Eqs. 38, 44). Redoing the sums of Eqs. 63–64 and C.2.4 without that
approximation multiplies every K term that multiplies p̂ or q̂ inside the attention update by (n−1)/n:
forward J' = (1 + σ²q̂/n) J + σ²p̂ (n−1)/n K, K' = (1 + σ²p̂ (n−1)/n) K + σ²q̂ J/n; backward
J = (1 + σ²q̂/n) J' + σ²q̂ (n−1)/n K', K = (1 + σ²p̂ (n−1)/n) K' + σ²p̂ J'/n (MLP rows unchanged). Together with
``covariance="finite_n"`` this is exact for the mean-field model at any n (tested against exact Jacobians of a
two-layer uniform-attention network; the printed recurrence is off by O(1/n) there).

Block-level views (Eq. 7): Q^b = q^{2b}, P^b = p^{2b}, 𝒥^{b',b} = J^{2b',2b}. Final normalization (App. F, Eqs.
91–94): 𝒥^{out,b} = Q̂^B 𝒥^{B,b} with Q̂^B = 1/Q^B (LayerNorm) or E[φ_α'(h)²], h ~ N(0, Q^B) (tanh-like).

Everything broadcasts over arrays of (σ_21, σ_OV, α, q0, p0): a phase map over a (σ_21, σ_OV) grid is one call;
the Python loop runs over layers only. Arrays carry the layer (or block) index as their first axis.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..core.validate import check_range
from .elementwise import Norm, check_qp, propagate, propagate_validated, resolve_norm

__all__ = [
    "KINDS",
    "COVARIANCES",
    "kappa",
    "kappa_hat",
    "ApjnProfile",
    "apjn_profile",
    "final_norm_factor",
    "with_final_norm",
]

#: Which APJN recurrence: Result 3.2 ("simplified") or Results C.1/C.2 ("full").
KINDS = ("simplified", "full")
#: Attention covariance increment: Eq. 8–9 (n → ∞) or Eq. 32 (finite context n).
COVARIANCES = ("large_n", "finite_n")


def kappa(rho):
    """κ(ρ) = [√(1−ρ²) + ρ(π − arccos ρ)]/π (Alekseev Eq. 28): 2 E[ReLU(u1)ReLU(u2)] for unit-variance (u1, u2)
    with correlation ρ. κ(1) = 1, κ(0) = 1/π, κ(ρ) ≥ ρ. ρ is clipped to [−1, 1] (round-off)."""
    r = np.clip(np.asarray(rho, dtype=np.float64), -1.0, 1.0)
    return (np.sqrt(1.0 - r**2) + r * (np.pi - np.arccos(r))) / np.pi


def kappa_hat(rho):
    """κ̂(ρ) = 1/4 + asin(ρ)/(2π) = E[ReLU'(u1) ReLU'(u2)] (Alekseev Eq. 41/61); κ̂(1) = 1/2."""
    r = np.clip(np.asarray(rho, dtype=np.float64), -1.0, 1.0)
    return 0.25 + np.arcsin(r) / (2.0 * np.pi)


def final_norm_factor(q_out, norm="erf", alpha=1.0, *, dphi: Callable | None = None):
    """Q̂^B of a final normalization applied to the last block's output with self-covariance Q^B (Alekseev App. F):
    1/Q^B for LayerNorm (Eq. 92), E_{h~N(0,Q^B)}[φ_α'(h)²] for a tanh-like φ_α (Eq. 93; erf: 4α²/(π√(1+4α²Q^B)),
    Eq. 94). Multiply a backward APJN by it to get 𝒥^{out,b} (Eq. 91; :func:`with_final_norm`)."""
    q_out = check_range(q_out, "q_out", lo=0.0, lo_open=True, allowed="(0, inf)")
    return propagate(q_out, q_out, norm, alpha, dphi=dphi).q_hat


def with_final_norm(backward_apjn, q_out, norm="erf", alpha=1.0, *, dphi: Callable | None = None):
    """𝒥^{out,b} = Q̂^B 𝒥^{B,b} (Alekseev Eq. 91): the backward APJN measured after a final LayerNorm / DyT / Derf.
    ``backward_apjn`` has the block (or layer) index first; ``q_out`` = Q^B broadcasts against the rest."""
    return np.asarray(backward_apjn, dtype=np.float64) * final_norm_factor(q_out, norm, alpha, dphi=dphi)


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS} (got {kind!r})")
    return kind


@dataclass(frozen=True)
class ApjnProfile:
    """Result of :func:`apjn_profile`: layer-level statistics and APJNs of one configuration grid.

    Layer arrays have shape (L+1, *S) (index l = 0…L, value at the *input* of layer l) or (L, *S) (per layer l), where
    S is the broadcast shape of the parameters and L = 2B. APJNs grow stretched-exponentially and overflow float64
    at large depth, so they are stored as logarithms, and the cross-positional correlation K as the ratio K/J:

    ``q``, ``p``: covariance (Eqs. 8–9); ``q_tilde``, ``p_tilde``, ``q_hat``, ``p_hat``: propagated components of
    layer l's input (Eqs. 10, 13, 40); ``kappa_hat``: Eq. 41;
    ``log_forward_simplified`` = log J^{l,0} (Eq. 11); ``log_forward_full`` = log J^{l,0} (Eq. 37) and
    ``cross_ratio_forward`` = K^{l,0}/J^{l,0} (Eq. 39); ``log_backward_simplified`` = log J^{L,l} (Eq. 48);
    ``log_backward_full`` = log J^{L,l} (Eq. 43) and ``cross_ratio_backward`` = K^{L,l}/J^{L,l} (Eq. 45).

    Block views (Eq. 7): :attr:`Q`, :attr:`P`, :meth:`forward`, :meth:`backward`, :meth:`between`, :meth:`cross`,
    :meth:`cross_ratio` (App. G, Fig. 11), and App. F's :attr:`final_factor` / :meth:`backward_out`.
    """

    norm: Norm
    sigma_21: np.ndarray
    sigma_ov: np.ndarray
    alpha: np.ndarray
    n: float | None
    covariance: str
    exact_n: bool
    q: np.ndarray
    p: np.ndarray
    q_tilde: np.ndarray
    p_tilde: np.ndarray
    q_hat: np.ndarray
    p_hat: np.ndarray
    kappa_hat: np.ndarray
    log_forward_simplified: np.ndarray
    log_forward_full: np.ndarray
    cross_ratio_forward: np.ndarray
    log_backward_simplified: np.ndarray
    log_backward_full: np.ndarray
    cross_ratio_backward: np.ndarray

    @property
    def layers(self) -> int:
        """L = 2B."""
        return self.q.shape[0] - 1

    @property
    def blocks(self) -> int:
        """B."""
        return self.layers // 2

    @property
    def Q(self) -> np.ndarray:  # noqa: N802 (the paper's symbol)
        """Q^b = q^{2b}, b = 0…B (Eq. 7)."""
        return self.q[::2]

    @property
    def P(self) -> np.ndarray:  # noqa: N802 (the paper's symbol)
        """P^b = p^{2b}, b = 0…B (Eq. 7)."""
        return self.p[::2]

    def log_forward(self, kind: str = "simplified") -> np.ndarray:
        """log 𝒥^{b,0} = log J^{2b,0}, b = 0…B (Eq. 7; Result 3.2 or C.1)."""
        lj = self.log_forward_simplified if _check_kind(kind) == "simplified" else self.log_forward_full
        return lj[::2]

    def forward(self, kind: str = "simplified") -> np.ndarray:
        """Forward APJN 𝒥^{b,0}, b = 0…B (may overflow to inf at very large depth; use :meth:`log_forward`)."""
        with np.errstate(over="ignore"):
            return np.exp(self.log_forward(kind))

    def log_backward(self, kind: str = "simplified") -> np.ndarray:
        """log 𝒥^{B,b} = log J^{2B,2b}, b = 0…B (Eq. 7; Eq. 48 or Result C.2)."""
        lj = self.log_backward_simplified if _check_kind(kind) == "simplified" else self.log_backward_full
        return lj[::2]

    def backward(self, kind: str = "simplified") -> np.ndarray:
        """Backward APJN 𝒥^{B,b}, b = 0…B (may overflow to inf at very large depth; use :meth:`log_backward`)."""
        with np.errstate(over="ignore"):
            return np.exp(self.log_backward(kind))

    def cross_ratio(self, direction: str = "backward") -> np.ndarray:
        """𝒦^{B,b}/𝒥^{B,b} ("backward") or 𝒦^{b,0}/𝒥^{b,0} ("forward") of the full recurrence, b = 0…B (App. G,
        Fig. 11; 𝒦^{b',b} = K^{2b',2b})."""
        if direction not in ("forward", "backward"):
            raise ValueError(f"direction must be 'forward' or 'backward' (got {direction!r})")
        return (self.cross_ratio_forward if direction == "forward" else self.cross_ratio_backward)[::2]

    def cross(self, direction: str = "backward") -> np.ndarray:
        """𝒦^{B,b} ("backward") or 𝒦^{b,0} ("forward"), the block-level cross-positional Jacobian correlation."""
        lj = self.log_backward("full") if direction == "backward" else self.log_forward("full")
        with np.errstate(over="ignore"):
            return self.cross_ratio(direction) * np.exp(lj)

    def between(self, b_out: int, kind: str = "simplified", log: bool = False) -> np.ndarray:
        """𝒥^{b_out,b} for b = 0…b_out (Eq. 7), or its logarithm with ``log``: J^{L',0}/J^{l,0} with L' = 2 b_out
        (simplified, Eq. 48), or the backward recurrence of Result C.2 restarted at layer L' (full)."""
        if not (isinstance(b_out, int | np.integer) and 0 <= b_out <= self.blocks):
            raise ValueError(f"b_out must be an integer in [0, {self.blocks}] (got {b_out!r})")
        top = 2 * int(b_out)
        if _check_kind(kind) == "simplified":
            lj = (self.log_forward_simplified[top] - self.log_forward_simplified[: top + 1])[::2]
        else:
            inv_n = 0.0 if self.n is None else 1.0 / self.n
            lj, _ = _backward(self.q_hat, self.p_hat, self.kappa_hat, self.sigma_21**2, self.sigma_ov**2, inv_n,
                              top, self.exact_n)
            lj = lj[::2]
        if log:
            return lj
        with np.errstate(over="ignore"):
            return np.exp(lj)

    @property
    def final_factor(self) -> np.ndarray:
        """Q̂^B of a final normalization of the same kind as the branch inputs (App. F, Eqs. 92–94)."""
        return final_norm_factor(self.q[-1], self.norm, self.alpha)

    def backward_out(self, kind: str = "simplified") -> np.ndarray:
        """𝒥^{out,b} = Q̂^B 𝒥^{B,b}, the backward APJN to the output of a final normalization (Eq. 91)."""
        return self.backward(kind) * self.final_factor


def _backward(q_hat, p_hat, k_hat, s21, sov, inv_n, top, exact_n=False):
    """Result C.2 (Eqs. 43, 45) from layer ``top`` down to 0, in the form (log J^{top,l}, K^{top,l}/J^{top,l}),
    l = 0…top. With r = K/J, an attention layer maps (J, r) to J·(a + b r) and r' = (c r + e)/(a + b r), where
    a = 1 + σ_OV² q̂/n, b = σ_OV² q̂ w, c = 1 + σ_OV² p̂ w, e = σ_OV² p̂/n (Eq. 43, 45) with w = 1 (paper) or
    (n−1)/n (``exact_n``); an MLP layer multiplies J by χ = 1 + ½σ_21² q̂ and r by (1 + σ_21² κ̂ p̂)/χ."""
    shape = (top + 1,) + np.shape(q_hat)[1:]
    lj = np.empty(shape)
    r = np.empty(shape)
    lj[top], r[top] = 0.0, 0.0
    w = 1.0 - inv_n if exact_n else 1.0
    for layer in range(top - 1, -1, -1):
        qh, ph = q_hat[layer], p_hat[layer]
        rn = r[layer + 1]
        if layer % 2 == 0:  # attention
            grow = 1.0 + sov * qh * inv_n + sov * qh * w * rn
            r[layer] = ((1.0 + sov * ph * w) * rn + sov * ph * inv_n) / grow
        else:  # MLP
            grow = 1.0 + 0.5 * s21 * qh
            r[layer] = rn * (1.0 + s21 * k_hat[layer] * ph) / grow
        lj[layer] = lj[layer + 1] + np.log(grow)
    return lj, r


def apjn_profile(*, sigma_21, sigma_ov, blocks: int, norm="erf", alpha=1.0, q0=1.0, p0=0.2, n=None,
                 covariance: str = "large_n", exact_n: bool = False, dphi: Callable | None = None) -> ApjnProfile:
    """Covariance (Result 3.1) and APJN recurrences (Result 3.2, Results C.1–C.2) of a ``blocks``-block transformer.

    Parameters, all by keyword (σ_21 and σ_OV are easily swapped; :func:`~sigprop.model.vit.timm_sigmas` names them:
    ``apjn_profile(**timm_sigmas(768)._asdict(), blocks=12)``; all of σ_21, σ_OV, α, q0, p0 broadcast against each
    other; the result arrays have shape (layers + 1, *S) with S their broadcast shape):

    * ``sigma_21`` = σ_2σ_1 ≥ 0, ``sigma_ov`` = σ_Oσ_V ≥ 0 (Result 3.1; a ViT with std 0.02 and d = 768 has
      σ_21 ≈ 0.61, σ_OV ≈ 0.31, App. A);
    * ``norm``: "erf" (Derf), "tanh" (DyT), "layernorm" (pre-LN; α ignored), or a callable φ with ``dphi``
      (see :mod:`sigprop.apjn.elementwise`); ``alpha``: the DyT/Derf α (nonzero);
    * ``q0`` > 0, ``p0`` with −q0 ≤ p0 ≤ q0: the embedding's covariance (Assumption 2.1; the paper uses p0 ≥ 0);
    * ``n``: context size (≥ 2) for the O(1/n) attention terms of the full APJN recurrence (Eqs. 37, 39, 43, 45);
      ``None`` is the large-context limit, in which the full recurrence coincides with the simplified one;
    * ``covariance``: "large_n" (Eqs. 8–9, default) or "finite_n" (keep Eq. 32's q̃/n term; needs ``n``);
    * ``exact_n``: keep the (n−1)/n factors that App. C.2 drops (module docstring; needs ``n``); default False
      is the recurrence exactly as printed.

    The simplified APJN ignores ``n`` (Result 3.2 drops the O(1/n) terms by construction). The forward full
    recurrence is run in the same (log J, K/J) form as :func:`_backward` (Eqs. 37, 39 with the roles of q̂ and p̂ as
    printed). Raises ``ValueError`` for negative σ, q0 ≤ 0, |p0| > q0, α = 0, blocks < 1, n < 2, an unknown ``norm``
    or ``covariance``.
    """
    nm = resolve_norm(norm, dphi)
    if not (isinstance(blocks, int | np.integer) and blocks >= 1):
        raise ValueError(f"blocks must be an integer >= 1 (got {blocks!r})")
    s21 = check_range(sigma_21, "sigma_21", lo=0.0, allowed="[0, inf)")
    sov = check_range(sigma_ov, "sigma_ov", lo=0.0, allowed="[0, inf)")
    q0, p0 = check_qp(q0, p0)
    alpha = np.asarray(check_range(alpha, "alpha"), dtype=np.float64)
    if nm.elementwise and np.any(alpha == 0.0):
        raise ValueError("alpha must be a nonzero finite number for an elementwise norm (got 0.0)")
    if covariance not in COVARIANCES:
        raise ValueError(f"covariance must be one of {COVARIANCES} (got {covariance!r})")
    if n is not None:
        n = float(check_range(n, "n", lo=2.0, allowed="[2, inf) or None"))
    if covariance == "finite_n" and n is None:
        raise ValueError("covariance='finite_n' needs the context size n")
    if exact_n and n is None:
        raise ValueError("exact_n=True needs the context size n")
    s21, sov, alpha, q0, p0 = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in
                                                    (s21, sov, alpha, q0, p0)))
    s21sq, sovsq = s21**2, sov**2
    inv_n = 0.0 if n is None else 1.0 / n
    w = 1.0 - inv_n if exact_n else 1.0  # weight of K in the attention updates (module docstring)
    big_l = 2 * int(blocks)
    shape = q0.shape

    q = np.empty((big_l + 1,) + shape)
    p = np.empty_like(q)
    per_layer = {name: np.empty((big_l,) + shape) for name in ("qt", "pt", "qh", "ph", "kh")}
    lf_s = np.empty_like(q)  # log J^{l,0}, simplified
    lf = np.empty_like(q)  # log J^{l,0}, full
    rf = np.empty_like(q)  # K^{l,0}/J^{l,0}
    q[0], p[0] = q0, p0
    lf_s[0] = lf[0] = rf[0] = 0.0
    for layer in range(big_l):
        ql, pl = q[layer], np.clip(p[layer], -q[layer], q[layer])
        qt, pt, qh, ph = propagate_validated(ql, pl, nm, alpha)
        kh = kappa_hat(pt / qt)
        for name, val in zip(("qt", "pt", "qh", "ph", "kh"), (qt, pt, qh, ph, kh), strict=True):
            per_layer[name][layer] = val
        r = rf[layer]
        if layer % 2 == 0:  # attention (Eqs. 8–9 / 32; 12; 37, 39)
            inc = sovsq * (qt * inv_n + (1.0 - inv_n) * pt) if covariance == "finite_n" else sovsq * pt
            q[layer + 1] = ql + inc
            p[layer + 1] = pl + inc
            lf_s[layer + 1] = lf_s[layer]
            grow = 1.0 + sovsq * qh * inv_n + sovsq * ph * w * r
            lf[layer + 1] = lf[layer] + np.log(grow)
            rf[layer + 1] = ((1.0 + sovsq * ph * w) * r + sovsq * qh * inv_n) / grow
        else:  # MLP (Eqs. 8–9; 12; 37, 39)
            q[layer + 1] = ql + 0.5 * s21sq * qt
            p[layer + 1] = pl + 0.5 * s21sq * qt * kappa(pt / qt)
            chi = 1.0 + 0.5 * s21sq * qh
            lf_s[layer + 1] = lf_s[layer] + np.log(chi)
            lf[layer + 1] = lf[layer] + np.log(chi)
            rf[layer + 1] = r * (1.0 + s21sq * kh * ph) / chi
    lb, rb = _backward(per_layer["qh"], per_layer["ph"], per_layer["kh"], s21sq, sovsq, inv_n, big_l, exact_n)
    return ApjnProfile(
        norm=nm, sigma_21=s21, sigma_ov=sov, alpha=alpha, n=n, covariance=covariance, exact_n=bool(exact_n), q=q, p=p,
        q_tilde=per_layer["qt"], p_tilde=per_layer["pt"], q_hat=per_layer["qh"], p_hat=per_layer["ph"],
        kappa_hat=per_layer["kh"], log_forward_simplified=lf_s, log_forward_full=lf, cross_ratio_forward=rf,
        log_backward_simplified=lf_s[-1] - lf_s, log_backward_full=lb, cross_ratio_backward=rb)
