"""Scaled dot-product attention: single-head (SHA) and multi-head (MHA) modules and their moment rules
(Kedia et al. App. A.8, Tables 15–20 rows "SHA"; ICML copy App. B.8 for the derivation the arXiv text lost).

Module (per head): y = Dropout_p(softmax(X W_Q (X W_K)ᵀ/√d_k)) X W_V, X ∈ R^{L×d_in}, W_Q, W_K, W_V ∈ R^{d_in×d_k}
with i.i.d. N(0, σ²_q), N(0, σ²_k), N(0, σ²_v) entries (the init plan's values; the rules never read sampled
weights), inverted dropout on the attention probabilities. MHA = H independent heads of width d_head, outputs
concatenated (no output projection; compose with :mod:`sigprop.components.linear` for W_O).

Derivation of the rules ("exact"; notation of :mod:`sigprop.components.attention_theory`). Write x_k = c + δ_k
(c shared by the sequence, variance ρ = rσ²; δ_k i.i.d., variance τ = (1 − r)σ²), M = W_Q W_Kᵀ/√d_k, a_i = Mᵀx_i.
The score s_ik = a_i·c + a_i·δ_k; the first part cancels in the softmax, so query i sees i.i.d. N(0, t²_i) scores,
t²_i = τ|a_i|², mean s² = τσ² d²_in σ²_qk (σ²_qk = σ²_q σ²_k) and a small relative spread. With the softmax
participation P2 = E Σ_k A_ik² (exact Laplace quadrature, averaged over t²) and κ = τ a_i·a_l (the covariance of the
scores two queries give one key; E e^κ ≈ exp(Eκ + Var κ/2)):

Forward (o_i = Σ_k Ã_ik x_k; averaging W_V exactly gives per-element moments σ²_v d_in · E|o|²/d_in):
  Stein's lemma on δ_k gives E[o_i | a_i] = T_i c + τ a_i (1 − Σ_k A_ik²) and E|Σ_k Ã_ik δ_k|² = τ[d_in P2/(1−p)
  + t²(1 − 5P2 + 4P2/(1−p))], with T_i = Σ_k Ã_ik, E T_i² = 1 + P2 p/(1−p), E T_i T_l = 1:
    σ²_y = d_in σ²_v [ρ (1 + P2 p/(1−p)) + τ P2/(1−p) + m (1 − P2 + 4 P2 p/(1−p))],   m = τ² d_in σ²_qk σ²,
    Cov_y = d_in σ²_v [ρ + τ E e^κ / L + τ² d_in σ²_qk ρ (1 − P2)²],     μ_y = 0, r^d_y = 0.
  The ρ p/(1−p) P2 term (dropout makes Σ_k Ã_ik fluctuate, so the shared part no longer passes exactly) and the
  1/L corrections are what the paper's closed form lacks.

Backward (g_y with variance σ²_g and token correlation r_g; w_i = W_V g_i, E[w_i·w_j]/d_in = Ω(r_g + (1−r_g)δ_ij),
Ω = σ²_v d_k σ²_g; the gradient of X has three paths: values Σ_i Ã_ik w_i, keys Σ_i dS_ik a_i and queries
M Σ_m dS_km δ_m, with dS_ik = A_ik w_i·(D̃_ik x_k − o_i)):
    VV = Ω r_g E C_k² + Ω(1 − r_g) P2/(1−p),      C_k = Σ_i Ã_ik (column sum),
         E C_k² = P2/(1−p) + (1 − 1/L) E e^κ (1 − (E e^κ − 1)(2e^{s²} − 1)/L),
    KK = Ω K d²_in σ²_qk σ² (1 + v s²)(σ² − ρ(1−p))/(1−p) + Ω r_g (Eκ + Var κ) E e^κ (1 − 1/L),
    QQ = Ω σ²_qk τ² d_in [1 + P2 p/(1−p) − 2P2 + Q + (d_in + 1) K/(1−p)] + Ω σ²_qk d²_in ρ τ P2 p/(1−p),
    VK = 2Ω s² e^{s²} (1 + p)/((1−p) L d_in) + 2Ω r_g Eκ E e^κ / d_in,
    σ²_gx = VV + KK + QQ + VK     (v = relative variance of |a_i|², see attention_theory),
    Cov_gx = Ω r_g E[C_k C_l] + Ω(1 − r_g)(1 − P2)/(L − 1) + Ω r_g σ²_qk τ² d_in (1 − P2)²,
         E[C_k C_l] = 1 + (P2 p/(1−p) − (E C_k² − 1))/(L − 1)   (exchangeability of the keys).
  QQ (the query path, τ M w_k) is what makes the paper's gradient rule fail: relative to the value path at r_g = 0 it
  is ~ s² L/d_in, up to ~13× inside Table 22's ranges. KK (the key path) adds O(s²). Both carry the score paths'
  weight K = E Σ_k A_ik²(1 − 2A_ik + Σ_m A_im²) (the gradient through a score is A_ik w·(x_k − o_i), whose i.i.d.
  part has variance ∝ 1 − 2A_ik + Σ_m A_im²) and Q = E(Σ_k A_ik²)² (:func:`~sigprop.components.attention_theory.
  softmax_score_weights`, exact quadrature): K → P2(1 − 1/L) at small scores, P2/2 for two keys, where P2 alone
  overstated the gradient variance by ~2s²/L.

Accuracy: the verify sweep "attention" (1024 configurations over Table 22's ranges, p ≤ 0.9) finds every quantity's
error at the level of the Monte Carlo noise, which makes the noise an upper bound on the rule's error
(docs/results/components.md); their signs show no bias at the sweep's resolution, the O(s⁴) terms left out included
(docs/results/accuracy.md, "Where the attention closed forms hold"). The paper's closed form ("kedia") on the same
draws misses the query path and with it the gradient variance (docs/results/accuracy.md, "The paper's formulas on
the same draws").

Assumes: Gaussian input with zero hidden correlation (a non-zero ``corr_hidden`` is ignored: it enters only through
fourth-order terms), token correlation r ∈ [0, 1], Gaussian weights independent of the input (initialisation),
bidirectional attention (the causal rules: :mod:`sigprop.components.attention_causal`), small scores (Table 22's
ranges give s² ≤ 0.13, where the rules are verified by the sweep; how far beyond they hold:
docs/results/accuracy.md, "Where the attention closed forms hold"), L ≥ 2. A mean μ is absorbed
into the shared part, σ² → σ² + μ², r → (rσ² + μ²)/(σ² + μ²): the statistics depend on X only through its Gram
matrix, whose distribution this preserves up to O(1/d_in) (not swept: Table 22 has μ = 0). No "kedia_table1" form
is offered: Table 1's SHA row (σ²_y = d_in σ²_v r σ², r_y = 1) vanishes at r = 0, which a :class:`Moments` cannot hold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import check_range, clip_corr
from ..walk.protocol import Rules
from .attention_bounded import bounded_backward, bounded_forward, bounded_heads
from .attention_causal import causal_backward, causal_forward
from .attention_gram import gram_attention, gram_attention_backward
from .attention_sampled import sampled_backward, sampled_forward
from .attention_theory import attention_terms, query_gradient, query_variance, score_variance
from .attention_uniform import uniform_applies, uniform_gram_attention, uniform_gram_attention_backward
from .draws import DEFAULT_GRAM_HEADS, DEFAULT_HEADS
from .query_key import QueryKeyMap, query_key_map

__all__ = [
    "SingleHeadAttention",
    "MultiHeadAttention",
    "attention_forward",
    "attention_backward",
    "mha_forward",
    "mha_backward",
    "ATTENTION_APPROX",
    "CLOSED_FORM_MAX_S2",
    "CAUSAL_MAX_S2",
    "FORWARD_MAX_S2",
    "SAMPLED_MAX_NUMBERS",
    "resolve_approx",
    "sampled_numbers",
]

#: The approximations offered by the attention rules: "exact" (our closed form, small scores; causal:
#: :mod:`sigprop.components.attention_causal`),
#: "kedia" (the paper's printed form), "sampled" (Monte Carlo of the same expectation at any score scale, causal
#: included: :mod:`sigprop.components.attention_sampled`), "bounded" (the same Monte Carlo in the 2·d_k coordinates
#: that reach the scores, on a random subset of the query positions: :mod:`sigprop.components.attention_bounded`) and
#: "auto" (the closed form inside its verified domain, s² ≤ :data:`CLOSED_FORM_MAX_S2`, causal s² ≤
#: :data:`CAUSAL_MAX_S2`, without rotary positions; elsewhere sampled, or bounded where the sampled rule's draw would
#: exceed :data:`SAMPLED_MAX_NUMBERS`); "forward" is "auto" with the wider domain s² ≤ :data:`FORWARD_MAX_S2`, for a
#: walk that reads only forward moments (``init="auto"``'s calibration, :mod:`sigprop.model.auto_init`).
ATTENTION_APPROX = ("exact", "kedia", "sampled", "bounded", "auto", "forward")

#: Largest draw (numbers, :func:`sampled_numbers`) for which "auto" takes the sampled rule where it samples; beyond,
#: the bounded rule. Every preset's attention at its own size draws at most 10.5·10⁶ (d_in 256, L 128, 128 heads),
#: so their predictions keep the sampled rule; a Llama-3-8B layer would draw 1.7·10¹⁰.
SAMPLED_MAX_NUMBERS = 1 << 26


def sampled_numbers(heads: int, L: int, d_in: int) -> int:
    """The numbers the sampled rule draws for one configuration: per head the L × d_in input, its input-gradient
    draw and the L × L dropout uniforms (:mod:`~sigprop.components.attention_sampled`)."""
    return int(heads) * int(L) * (2 * int(d_in) + int(L))

#: Largest s² at which "forward" uses the closed form. Up to here its forward variance and covariance stay within
#: about one percent of the sampled rule, causal and bidirectional (the gradient drifts sooner: "auto"'s limits); the
#: gaps: the results pages bench-attention-causal.txt (``bench/attention_causal.py``) and
#: bench-attention-closed-form-range.txt (``bench/attention_closed_form_range.py``).
FORWARD_MAX_S2 = 1.0

#: Largest mean score variance s² = τσ²d²σ²_qσ²_k at which "auto" uses the closed form. Since the key and query paths
#: carry K (module docstring) instead of P2 the closed form agrees with the sampled rule well beyond this, to s² ≈ 1
#: and more, short sequences drifting first (the gaps across s² and L: the results page
#: bench-attention-closed-form-range.txt, ``bench/attention_closed_form_range.py``); the threshold stays at 0.3,
#: where the presets' stored results were verified. ``tests/components/test_attention_sampled.py`` checks both sides.
CLOSED_FORM_MAX_S2 = 0.3

#: Shortest sequence at which "auto" uses the bidirectional closed form: it was verified from L = 32 on (the results
#: page bench-attention-closed-form-range.txt); at a few tokens its O(1/L) expansion breaks down (at L = 2 it gives a
#: token covariance above the variance), and the sampled rule, cheap at such lengths, is taken instead.
CLOSED_FORM_MIN_L = 32

#: Largest s² at which "auto" uses the causal closed form (:mod:`sigprop.components.attention_causal`). Against the
#: sampled rule, at L = 128 every statistic is within its noise up to here and the gradient variance for a shared
#: output gradient drifts beyond; short sequences drift sooner (the gaps across s², r and L: the results page
#: bench-attention-causal.txt, ``bench/attention_causal.py``). ``tests/components/test_attention_causal.py``
#: checks both sides of the threshold.
CAUSAL_MAX_S2 = 0.5


def resolve_approx(approx: str, m: Moments, d_in: Stat, sigma_q2: Stat, sigma_k2: Stat, causal: bool,
                   rope: float | QueryKeyMap | None = None, L: Stat | None = None, heads: int = DEFAULT_HEADS) -> str:
    """The rule "auto" stands for at input ``m``: "sampled" if queries and keys are mapped (``rope``: rotary
    embedding, QK-norm, :mod:`~sigprop.components.query_key`), if any s² exceeds
    :data:`CLOSED_FORM_MAX_S2` (:data:`CAUSAL_MAX_S2` if causal) or, bidirectional, if ``L`` is shorter than
    :data:`CLOSED_FORM_MIN_L`, else "exact"; "forward" likewise with
    :data:`FORWARD_MAX_S2`; where it would sample ``heads`` heads of length ``L`` (when given) drawing more than
    :data:`SAMPLED_MAX_NUMBERS` numbers, "bounded". Other approximations are returned unchanged."""
    if approx not in ("auto", "forward"):
        return approx
    short = not causal and L is not None and bool(np.min(L) < CLOSED_FORM_MIN_L)
    if query_key_map(rope) is None and not short:
        var, r = _effective_input(m)
        s2 = score_variance(var, r, np.asarray(d_in, dtype=np.float64), np.asarray(sigma_q2) * sigma_k2)
        limit = FORWARD_MAX_S2 if approx == "forward" else (CAUSAL_MAX_S2 if causal else CLOSED_FORM_MAX_S2)
        if not np.any(s2 > limit):
            return "exact"
    if L is not None and sampled_numbers(heads, np.max(L), np.max(d_in)) > SAMPLED_MAX_NUMBERS:
        return "bounded"
    return "sampled"


def _check_common(d_in: Stat, d_k: Stat, L: Stat, sigma_q2: Stat, sigma_k2: Stat, sigma_v2: Stat, p: Stat,
                  causal: bool, approx: str, rope: float | QueryKeyMap | None = None) -> tuple[Stat, Stat, Stat, Stat,
                  Stat, Stat]:
    if approx not in ATTENTION_APPROX:
        raise ValueError(f"approx must be one of {ATTENTION_APPROX} (got {approx!r})")
    if query_key_map(rope) is not None and approx in ("exact", "kedia"):
        raise NotImplementedError(f"the {approx!r} attention rule assumes exchangeable keys and small scores, which "
                                  "rotary embedding and QK-norm break: use approx='sampled' (or 'auto')")
    if causal and approx == "kedia":
        raise NotImplementedError("the 'kedia' attention rule is bidirectional: use approx='exact', 'sampled' or "
                                  "'auto' for causal attention")
    d_in = check_range(d_in, "d_in", lo=1.0, allowed="integers >= 1")
    d_k = check_range(d_k, "d_k", lo=1.0, allowed="integers >= 1")
    L = check_range(L, "sequence length L", lo=2.0, allowed="[2, inf)")
    sq = check_range(sigma_q2, "sigma_q2", lo=0.0, lo_open=True, allowed="(0, inf)")
    sk = check_range(sigma_k2, "sigma_k2", lo=0.0, lo_open=True, allowed="(0, inf)")
    sv = check_range(sigma_v2, "sigma_v2", lo=0.0, lo_open=True, allowed="(0, inf)")
    p = check_range(p, "dropout p", lo=0.0, hi=1.0, hi_open=True)
    return d_in, d_k, L, sq * sk, sv, p


def _effective_input(m: Moments) -> tuple[Stat, Stat]:
    """(σ², r) after absorbing the mean into the shared part: σ² + μ², (rσ² + μ²)/(σ² + μ²)."""
    check_range(m.corr, "Moments.corr (token correlation)", lo=0.0, hi=1.0,
                allowed="[0, 1] (the rules decompose the input into a shared and an independent part)")
    var = m.var + m.mean**2
    return var, (m.corr * m.var + m.mean**2) / var


def attention_forward(m: Moments, d_in: Stat, d_k: Stat, L: Stat, sigma_q2: Stat, sigma_k2: Stat, sigma_v2: Stat,
                      p: Stat = 0.0, causal: bool = False,
                      approx: str = "exact", heads: int = DEFAULT_HEADS, seed: int = 0,
                      rope: float | QueryKeyMap | None = None) -> Moments:
    """Moments of single-head attention's output (Kedia et al. App. A.8; formulas in the module docstring).

    ``approx``:

    * "exact": ours (module docstring); per-element mean 0, hidden correlation 0; causal: averaged over positions
      (:mod:`~sigprop.components.attention_causal`).
    * "kedia": the paper's closed form as printed (App. A.8, Tables 15/17; its code simulations/SHA.py):
      σ²_y = d_in σ²_v [((1−r)²(L−1) d_in σ⁶ σ²_qk + e^{(1−r) d²_in σ⁴ σ²_qk}(4(1−r)² d_in σ⁶ σ²_qk + (1−r)σ²)/(1−p))/L
      + rσ²], Cov_y = d_in σ²_v [rσ² + (2(1−r)² d_in σ⁶ σ²_qk + (1−r)σ²)/L].

    ``rope``: the rotary base of a RoPE head (:mod:`~sigprop.components.rope`), sampled rule only.

    Assumes: see the module docstring. Raises ``ValueError`` outside the domain, ``NotImplementedError`` for
    causal "kedia" or rotary with a closed form.
    """
    d_in, d_k, L, sqk2, sv2, p = _check_common(d_in, d_k, L, sigma_q2, sigma_k2, sigma_v2, p, causal, approx, rope)
    approx = resolve_approx(approx, m, d_in, sigma_q2, sigma_k2, causal, rope, L, heads)
    if approx == "sampled":
        return sampled_forward(m, d_in, d_k, L, sigma_q2, sigma_k2, sv2, p, causal, heads, seed, rope)
    if approx == "bounded":
        return bounded_forward(m, d_in, d_k, L, sigma_q2, sigma_k2, sv2, p, causal,
                               bounded_heads(heads, np.max(L), np.max(d_in), np.max(d_k)), seed, rope)
    var, r = _effective_input(m)
    v_o: Stat
    c_o: Stat
    if approx == "kedia":
        a = (1.0 - r)
        v_o = (((a**2) * (L - 1.0) * d_in * var**3 * sqk2
                + np.exp(a * d_in**2 * var**2 * sqk2) * (4.0 * a**2 * d_in * var**3 * sqk2 + a * var) / (1.0 - p)) / L
               + r * var)
        c_o = r * var + (2.0 * a**2 * d_in * var**3 * sqk2 + a * var) / L
    elif causal:
        v_o, c_o = causal_forward(var, r, d_in, d_k, L, sqk2, p)
    else:
        t = attention_terms(var, r, d_in, d_k, L, sqk2, p)
        v_o = query_variance(t)
        c_o = t.rho + t.tau * t.ekappa / L + t.tau**2 * d_in * sqk2 * t.rho * (1.0 - t.P2) ** 2
    scale = d_in * sv2
    zero = 0.0 * v_o
    return Moments(mean=zero, var=scale * v_o, corr=clip_corr(c_o / v_o), corr_hidden=zero)


def attention_backward(g: GradMoments, m_in: Moments, d_in: Stat, d_k: Stat, L: Stat, sigma_q2: Stat, sigma_k2: Stat,
                       sigma_v2: Stat, p: Stat = 0.0,
                       causal: bool = False, approx: str = "exact", heads: int = DEFAULT_HEADS,
                       seed: int = 0, rope: float | QueryKeyMap | None = None) -> GradMoments:
    """Moments of dLoss/dX through single-head attention, including the paths through W_Q and W_K (App. A.8).

    ``approx``:

    * "exact": ours (module docstring): value, key and query paths and their cross term; causal: averaged over
      positions (:mod:`~sigprop.components.attention_causal`).
    * "kedia": the paper's closed form (value path with uniform attention only; its code ignores the gradient
      through queries and keys): σ²_g d_k σ²_v (1 + (L−1) r_g (1−p))/(L(1−p)), Cov σ²_g d_k σ²_v (1 + (L−1) r_g)/L.

    Assumes: see the module docstring; the output gradient is zero-mean, Gaussian and independent of the input.
    """
    d_in, d_k, L, sqk2, sv2, p = _check_common(d_in, d_k, L, sigma_q2, sigma_k2, sigma_v2, p, causal, approx, rope)
    approx = resolve_approx(approx, m_in, d_in, sigma_q2, sigma_k2, causal, rope, L, heads)
    if approx == "sampled":
        return sampled_backward(g, m_in, d_in, d_k, L, sigma_q2, sigma_k2, sv2, p, causal, heads, seed, rope)
    if approx == "bounded":
        return bounded_backward(g, m_in, d_in, d_k, L, sigma_q2, sigma_k2, sv2, p, causal,
                                bounded_heads(heads, np.max(L), np.max(d_in), np.max(d_k)), seed, rope)
    var, r = _effective_input(m_in)
    om = sv2 * d_k * g.var
    rg = g.corr
    if approx == "kedia":
        gv = om * (1.0 + (L - 1.0) * rg * (1.0 - p)) / (L * (1.0 - p))
        gc = om * (1.0 + (L - 1.0) * rg) / L
        return GradMoments(var=gv, corr=clip_corr(gc / gv))
    if causal:
        gv, gc = causal_backward(var, r, d_in, d_k, L, sqk2, p, om, rg)
        return GradMoments(var=gv, corr=clip_corr(gc / gv))
    t = attention_terms(var, r, d_in, d_k, L, sqk2, p)
    q = p / (1.0 - p)
    wc, wg = om * rg, om * (1.0 - rg)
    ek = t.ekappa
    ec2 = t.P2 / (1.0 - p) + (1.0 - 1.0 / L) * ek * (1.0 - (ek - 1.0) * (2.0 * np.exp(t.s2) - 1.0) / L)
    vv = wc * ec2 + wg * t.P2 / (1.0 - p)
    own = query_gradient(t, om)
    kk = own.keys + wc * (t.kappa + t.vkappa) * ek * (1.0 - 1.0 / L)
    vk = own.values_keys + 2.0 * wc * t.kappa * ek / d_in
    gv = vv + kk + own.queries + vk
    ecc = 1.0 + (q * t.P2 - (ec2 - 1.0)) / (L - 1.0)
    gc = wc * ecc + wg * (1.0 - t.P2) / (L - 1.0) + wc * sqk2 * t.tau**2 * d_in * (1.0 - t.P2) ** 2
    return GradMoments(var=gv, corr=clip_corr(gc / gv))


def mha_forward(m: Moments, n_heads: Stat, d_in: Stat, d_head: Stat, L: Stat, sigma_q2: Stat, sigma_k2: Stat,
                sigma_v2: Stat, p: Stat = 0.0, causal: bool = False,
                approx: str = "exact", heads: int = DEFAULT_HEADS, seed: int = 0,
                rope: float | QueryKeyMap | None = None) -> Moments:
    """Moments of multi-head attention's concatenated output: every element belongs to one head, so they equal
    :func:`attention_forward` with d_k = d_head (heads have independent weights; the hidden correlation between
    units of different heads is zero like within a head). Grouped-query attention, where query heads share a key
    and value head, has the same rule: each element's law is one head's (see :class:`MultiHeadAttention`)."""
    check_range(n_heads, "n_heads", lo=1.0, allowed="integers >= 1")
    return attention_forward(m, d_in, d_head, L, sigma_q2, sigma_k2, sigma_v2, p, causal, approx, heads, seed, rope)


def mha_backward(g: GradMoments, m_in: Moments, n_heads: Stat, d_in: Stat, d_head: Stat, L: Stat, sigma_q2: Stat,
                 sigma_k2: Stat, sigma_v2: Stat, p: Stat = 0.0,
                 causal: bool = False, approx: str = "exact", heads: int = DEFAULT_HEADS,
                 seed: int = 0, rope: float | QueryKeyMap | None = None) -> GradMoments:
    """Input-gradient moments of multi-head attention: the heads' gradients add with zero cross-covariance
    (each head's output gradient is zero-mean and uncorrelated with another head's, which holds for independent
    W_V per head and also for grouped-query heads sharing W_V and W_K, since the gradients reaching different
    output units are uncorrelated: :class:`MultiHeadAttention`), so variance and token covariance are ``n_heads``
    times :func:`attention_backward` with d_k = d_head, and the correlation is unchanged."""
    h = check_range(n_heads, "n_heads", lo=1.0, allowed="integers >= 1")
    one = attention_backward(g, m_in, d_in, d_head, L, sigma_q2, sigma_k2, sigma_v2, p, causal, approx, heads, seed,
                             rope)
    return GradMoments(var=h * one.var, corr=one.corr)


def _sample_qkv(module: SingleHeadAttention | MultiHeadAttention, generator: torch.Generator | None) -> None:
    """Draw W_Q, W_K, W_V of ``module`` from N(0, σ²) with its declared (possibly per-configuration) σs; nothing on
    the meta device, where the owner initialises after materialising."""
    if module.w_q.is_meta:
        return
    with torch.no_grad():
        for w, s in ((module.w_q, module.sigma_q), (module.w_k, module.sigma_k), (module.w_v, module.sigma_v)):
            w.normal_(0.0, 1.0, generator=generator)
            w.mul_(s.reshape(s.shape + (1, 1)) if s.dim() else s)


def _host(v: float | np.ndarray | torch.Tensor) -> np.ndarray:
    """A hyper-parameter as a host array (also when modules are being built under ``torch.device("meta")``)."""
    return v.detach().cpu().numpy() if torch.is_tensor(v) else np.asarray(v, dtype=np.float64)


def _as_tensor(v: float | np.ndarray | torch.Tensor, batch_shape: tuple[int, ...]) -> torch.Tensor:
    """A hyper-parameter as a tensor over ``batch_shape``; lower-rank values align with the *leading* dimensions
    (a per-configuration vector of shape (C,) serves a batch (C, K))."""
    t = torch.as_tensor(v, dtype=torch.float32)
    if not t.dim():
        return t
    t = t.reshape(t.shape + (1,) * (len(batch_shape) - t.dim()))
    return torch.broadcast_to(t, tuple(batch_shape)).clone()


def _xavier(d_in: Stat, d_out: Stat) -> float:
    return math.sqrt(2.0 / (d_in + d_out))


def _register_scales(module: SingleHeadAttention | MultiHeadAttention, default: float,
                     *scales: float | np.ndarray | torch.Tensor | None) -> None:
    """Register σ_q, σ_k, σ_v (``default`` where None; each positive) as buffers over ``module.batch_shape``."""
    for name, val in zip(("sigma_q", "sigma_k", "sigma_v"), scales, strict=True):
        val = default if val is None else val
        check_range(_host(val), name, lo=0.0, lo_open=True, allowed="(0, inf)")
        module.register_buffer(name, _as_tensor(val, module.batch_shape))


class SingleHeadAttention(nn.Module):
    """Single-head attention y = Dropout_p(softmax(X W_Q (X_kv W_K)ᵀ/√d_k)) X_kv W_V (X_kv = X by default).

    ``sigma_q``, ``sigma_k``, ``sigma_v`` are the init standard deviations (default Xavier √(2/(d_in + d_k))) and
    ``dropout_p`` the attention-dropout probability; each may be a float or a tensor broadcastable to
    ``batch_shape``, the leading dimensions of independent weight copies (a sweep's configurations × replicates).
    An input x of shape (*batch_shape, *extra, L, d_in) is processed by its own copy of the weights.

    ``forward(x, x_kv=None, dropout_mask=None, generator=None)``: ``x_kv`` gives keys/values (cross-attention; pass
    a superset of the query rows to compute a subset of a self-attention's rows exactly), as one tensor or a sequence
    of blocks along the token axis (projected block by block); ``dropout_mask`` (0/1,
    broadcastable to the attention matrix) replaces the Bernoulli(1 − p) draw, e.g. to reuse a mask;
    ``generator`` seeds the draw. The rules read the declared sigmas and p (:meth:`forward_moments`).
    """

    rules = Rules(context=frozenset({"L"}), mixes_tokens=True)
    sigma_q: torch.Tensor
    sigma_k: torch.Tensor
    sigma_v: torch.Tensor
    dropout_p: torch.Tensor

    def __init__(self, d_in: int, d_k: int, sigma_q: float | torch.Tensor | np.ndarray | None = None,
                 sigma_k: float | torch.Tensor | np.ndarray | None = None,
                 sigma_v: float | torch.Tensor | np.ndarray | None = None, dropout_p: float | torch.Tensor = 0.0,
                 causal: bool = False, batch_shape: tuple[int, ...] = (), approx: str = "auto") -> None:
        super().__init__()
        check_range(d_in, "d_in", lo=1.0, allowed="integers >= 1")
        check_range(d_k, "d_k", lo=1.0, allowed="integers >= 1")
        if approx not in ATTENTION_APPROX:
            raise ValueError(f"approx must be one of {ATTENTION_APPROX} (got {approx!r})")
        self.d_in, self.d_k, self.causal, self.approx = int(d_in), int(d_k), bool(causal), approx
        self.batch_shape = tuple(int(b) for b in batch_shape)
        _register_scales(self, _xavier(d_in, d_k), sigma_q, sigma_k, sigma_v)
        check_range(np.asarray(torch.as_tensor(dropout_p)), "dropout p", lo=0.0, hi=1.0, hi_open=True)
        self.register_buffer("dropout_p", _as_tensor(dropout_p, self.batch_shape))
        shape = self.batch_shape + (self.d_in, self.d_k)
        self.w_q = nn.Parameter(torch.empty(shape))
        self.w_k = nn.Parameter(torch.empty(shape))
        self.w_v = nn.Parameter(torch.empty(shape))
        self.reset_parameters()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        _sample_qkv(self, generator)

    def _p(self, extra: int) -> torch.Tensor:
        p = self.dropout_p
        return p.reshape(p.shape + (1,) * (extra + 2)) if p.dim() else p

    def _project(self, x: torch.Tensor, x_kv: torch.Tensor | Sequence[torch.Tensor] | None) -> tuple[torch.Tensor,
                 torch.Tensor, torch.Tensor, int]:
        """(q, k, v); one fused matmul for the projections that share an input. ``x_kv`` may be a sequence of
        blocks along the token axis, projected block by block (autograd then only visits the blocks that need a
        gradient)."""
        extra = x.dim() - 2 - len(self.batch_shape)
        if extra < 0:
            raise ValueError(f"input must have shape (*{self.batch_shape}, ..., L, {self.d_in}), got {tuple(x.shape)}")
        shape = self.batch_shape + (1,) * extra + (self.d_in, self.d_k)
        wq, wk, wv = (w.reshape(shape) for w in (self.w_q, self.w_k, self.w_v))
        if x_kv is None:
            q, k, v = (x @ torch.cat((wq, wk, wv), dim=-1)).split(self.d_k, dim=-1)
        else:
            q = x @ wq
            wkv = torch.cat((wk, wv), dim=-1)
            blocks = [x_kv] if isinstance(x_kv, torch.Tensor) else list(x_kv)
            kv = torch.cat([b @ wkv for b in blocks], dim=-2)
            k, v = kv.split(self.d_k, dim=-1)
        return q, k, v, extra

    def _probs(self, q: torch.Tensor, k: torch.Tensor, self_attention: bool) -> torch.Tensor:
        s = q @ k.transpose(-1, -2) / math.sqrt(self.d_k)
        if self.causal:
            if not self_attention:
                raise NotImplementedError("causal masking is implemented for self-attention (x_kv=None) only")
            n = s.shape[-1]
            mask = torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1)
            s = s.masked_fill(mask, float("-inf"))
        return torch.softmax(s, dim=-1)

    def attention_probs(self, x: torch.Tensor, x_kv: torch.Tensor | None = None) -> torch.Tensor:
        """softmax(Q Kᵀ/√d_k) before dropout, shape (..., L_q, L_kv)."""
        q, k, _, _ = self._project(x, x_kv)
        return self._probs(q, k, x_kv is None)

    def forward(self, x: torch.Tensor, x_kv: torch.Tensor | Sequence[torch.Tensor] | None = None,
                dropout_mask: torch.Tensor | None = None,
                generator: torch.Generator | None = None) -> torch.Tensor:
        q, k, v, extra = self._project(x, x_kv)
        a = self._probs(q, k, x_kv is None)
        p = self._p(extra)
        if self.training and (dropout_mask is not None or bool(torch.any(self.dropout_p > 0))):
            if dropout_mask is None:
                keep = torch.rand(a.shape, generator=generator, dtype=a.dtype, device=a.device) >= p
            else:
                keep = dropout_mask
            a = a * keep.to(a.dtype) / (1.0 - p)
        return a @ v

    def _declared(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        f = lambda t: t.detach().cpu().double().numpy()  # noqa: E731
        return f(self.sigma_q) ** 2, f(self.sigma_k) ** 2, f(self.sigma_v) ** 2, f(self.dropout_p)

    def forward_moments(self, m: Moments, L: Stat) -> Moments:
        sq, sk, sv, p = self._declared()
        return attention_forward(m, self.d_in, self.d_k, L, sq, sk, sv, p, self.causal, self.approx)

    def backward_moments(self, g: GradMoments, m_in: Moments, L: Stat) -> GradMoments:
        sq, sk, sv, p = self._declared()
        return attention_backward(g, m_in, self.d_in, self.d_k, L, sq, sk, sv, p, self.causal, self.approx)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with separate bias-free W_Q ∈ R^{d_in×(H·d_head)} (H = ``n_heads``) and W_K, W_V ∈
    R^{d_in×(H_kv·d_head)} (H_kv = ``n_kv_heads``, default H), computed by
    ``torch.nn.functional.scaled_dot_product_attention`` (``dropout_p`` in training, ``is_causal``); the heads'
    outputs are concatenated to width H·d_head. Sigmas may be tensors broadcastable to ``batch_shape`` (leading
    dimensions of independent weight copies); ``dropout_p`` is a float (SDPA takes one probability).

    Grouped-query attention (Ainslie et al. 2023; multi-query at H_kv = 1): key/value head j serves the query heads
    j·H/H_kv … (j + 1)·H/H_kv − 1, as the Hugging Face Llama code groups them. Its moment rules are the multi-head
    ones. Forward: each output element is one query head's, whose law (over all weights) is a head's of standard
    attention; two heads sharing W_V are correlated across units, a correlation no rule downstream reads (the next
    layer, W_O, sums squares of its inputs' units with independent weights). Backward: the input gradient is a sum
    over heads of terms linear in each head's output gradient; those come from disjoint columns of W_O, hence are
    uncorrelated, so the cross terms between heads vanish in expectation even where the heads share W_K and W_V.
    What sharing changes is the spread from one weight draw to the next, not the expectation (tested).

    ``rope``: the rotary base (e.g. 10000) of rotary position embedding on queries and keys, positions 0 … L − 1
    (:mod:`~sigprop.components.rope`; with ``x_kv`` the keys take positions 0 … L_kv − 1, so pass the query rows
    as a prefix); None: no rotation. ``rotary_fraction``: the fraction of each head's coordinates rotated (GPT-NeoX's
    partial rotary, :mod:`~sigprop.components.query_key`). ``qk_norm_eps``: RMS-normalise each query and key head
    (QK-norm, Qwen3) with this ε, each followed by a gain of d_head parameters (1 at initialisation: ``q_gain``,
    ``k_gain``); None: no QK-norm. With either, the rules are the sampled ones ("auto" resolves to "sampled").
    """

    rules = Rules(context=frozenset({"L", "attention_heads", "attention_seed"}), inputs=frozenset({"key_padding_mask"}),
                  mixes_tokens=True, gram=True, sampled=True)
    sigma_q: torch.Tensor
    sigma_k: torch.Tensor
    sigma_v: torch.Tensor
    q_gain: nn.Parameter | None
    k_gain: nn.Parameter | None

    def __init__(self, d_in: int, n_heads: int, d_head: int, sigma_q: float | torch.Tensor | np.ndarray | None = None,
                 sigma_k: float | torch.Tensor | np.ndarray | None = None,
                 sigma_v: float | torch.Tensor | np.ndarray | None = None,
                 dropout_p: float = 0.0, causal: bool = False, batch_shape: tuple[int, ...] = (), approx: str = "auto",
                 n_kv_heads: int | None = None, rope: float | None = None, rotary_fraction: float = 1.0,
                 qk_norm_eps: float | None = None) -> None:
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        for v, name in ((d_in, "d_in"), (n_heads, "n_heads"), (d_head, "d_head"), (n_kv_heads, "n_kv_heads")):
            check_range(v, name, lo=1.0, allowed="integers >= 1")
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads})")
        if approx not in ATTENTION_APPROX:
            raise ValueError(f"approx must be one of {ATTENTION_APPROX} (got {approx!r})")
        if rope is not None:
            if approx in ("exact", "kedia"):
                raise ValueError(f"approx={approx!r} assumes exchangeable keys, which rotary embedding breaks: use "
                                 "'auto' or 'sampled'")
            if d_head % 2:
                raise ValueError(f"rotary embedding needs an even d_head (got {d_head})")
            check_range(rope, "rope theta", lo=1.0, lo_open=True, allowed="(1, inf)")
        if qk_norm_eps is not None and approx in ("exact", "kedia"):
            raise ValueError(f"approx={approx!r} assumes small scores, which QK-norm breaks: use 'auto' or 'sampled'")
        self.d_in, self.n_heads, self.d_head = int(d_in), int(n_heads), int(d_head)
        self.n_kv_heads = int(n_kv_heads)
        self.rope = None if rope is None else float(rope)
        #: what the heads do to queries and keys before the scores (None: nothing; :mod:`.query_key`)
        self.qk_map = query_key_map(QueryKeyMap(theta=self.rope, rotary_fraction=float(rotary_fraction),
                                                norm_eps=None if qk_norm_eps is None else float(qk_norm_eps)))
        if self.qk_map is not None:
            self.qk_map.check_head(self.d_head)
        self.causal, self.approx = bool(causal), approx
        self.rule_used: str | None = None  # the attention rule the last moment call used ("auto" resolved)
        self.dropout_p = float(check_range(dropout_p, "dropout p", lo=0.0, hi=1.0, hi_open=True))
        self.batch_shape = tuple(int(b) for b in batch_shape)
        _register_scales(self, _xavier(d_in, d_head), sigma_q, sigma_k, sigma_v)
        kv_shape = self.batch_shape + (self.d_in, self.n_kv_heads * self.d_head)
        self.w_q = nn.Parameter(torch.empty(self.batch_shape + (self.d_in, self.n_heads * self.d_head)))
        self.w_k = nn.Parameter(torch.empty(kv_shape))
        self.w_v = nn.Parameter(torch.empty(kv_shape))
        if qk_norm_eps is not None:
            self.q_gain = nn.Parameter(torch.ones(self.d_head))
            self.k_gain = nn.Parameter(torch.ones(self.d_head))
        else:
            self.q_gain = self.k_gain = None
        self.reset_parameters()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        _sample_qkv(self, generator)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        """(…, L, n·d_head) → (…, n, L, d_head) for the n heads the width holds."""
        return t.unflatten(-1, (t.shape[-1] // self.d_head, self.d_head)).transpose(-2, -3)

    def _mapped(self, t: torch.Tensor, gain: torch.Tensor | None) -> torch.Tensor:
        """Query or key heads (…, L, d_head) through QK-norm (times its gain) and rotary embedding, where the module
        has them (:mod:`~sigprop.components.query_key`)."""
        if self.qk_map is None:
            return t
        t = self.qk_map.normalise(t)
        return self.qk_map.rotate(t if gain is None else t * gain)

    def _shared_kv(self, k: torch.Tensor, v: torch.Tensor, rotate: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys mapped (``rotate``: QK-norm and RoPE where the module has them) and each key/value head repeated for
        the query heads of its group."""
        if rotate:
            k = self._mapped(k, self.k_gain)
        group = self.n_heads // self.n_kv_heads
        if group > 1:
            k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
        return k, v

    def forward(self, x: torch.Tensor, x_kv: torch.Tensor | Sequence[torch.Tensor] | None = None,
                key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Self-attention of ``x`` (…, L, d_in) → (…, L, H·d_head); with ``x_kv`` (a tensor or a sequence of blocks
        along the token axis) the keys/values come from it (pass a superset of the query rows to compute a subset of
        a self-attention's rows exactly). ``key_padding_mask`` (…, L_kv), True at real tokens, keeps padded keys out
        of every query's softmax. Dropout is SDPA's (global RNG)."""
        extra = x.dim() - 2 - len(self.batch_shape)
        if extra < 0:
            raise ValueError(f"input must have shape (*{self.batch_shape}, ..., L, {self.d_in}), got {tuple(x.shape)}")
        if self.causal and x_kv is not None:
            raise NotImplementedError("causal masking is implemented for self-attention (x_kv=None) only")
        w = lambda t: t.reshape(self.batch_shape + (1,) * extra + t.shape[-2:])  # noqa: E731
        hq, hkv = self.n_heads * self.d_head, self.n_kv_heads * self.d_head
        if x_kv is None:
            fused = x @ w(torch.cat((self.w_q, self.w_k, self.w_v), -1))
            q, k, v = (self._heads(t) for t in fused.split((hq, hkv, hkv), -1))
        else:
            q = self._heads(x @ w(self.w_q))
            wkv = w(torch.cat((self.w_k, self.w_v), -1))
            blocks = [x_kv] if isinstance(x_kv, torch.Tensor) else list(x_kv)
            k, v = (self._heads(t) for t in torch.cat([b @ wkv for b in blocks], dim=-2).split(hkv, -1))
        q = self._mapped(q, self.q_gain)
        k, v = self._shared_kv(k, v, rotate=True)
        mask, causal = None, self.causal
        if key_padding_mask is not None:
            mask = key_padding_mask.bool()[..., None, None, :]  # (…, 1 head, 1 query, L_kv)
            if causal:
                n_q, n_k = q.shape[-2], k.shape[-2]
                mask = mask & torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril()
                causal = False
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                           dropout_p=self.dropout_p if self.training else 0.0, is_causal=causal)
        return o.transpose(-2, -3).flatten(-2)

    def queries_and_keys(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(Q, K) of self-attention on ``x`` (…, L, d_in) per query head, (…, H, L, d_head) each: normalised and
        rotated where the module has QK-norm or RoPE, each key head repeated for the query heads of its group (what
        the scores are made of)."""
        q = self._mapped(self._heads(x @ self.w_q), self.q_gain)
        k, _ = self._shared_kv(self._heads(x @ self.w_k), self._heads(x @ self.w_k), rotate=True)
        return q, k

    def _declared(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        f = lambda t: t.detach().cpu().double().numpy()  # noqa: E731
        return f(self.sigma_q) ** 2, f(self.sigma_k) ** 2, f(self.sigma_v) ** 2

    def _rule(self, m: Moments, L: Stat, heads: int) -> str:
        sq, sk, _ = self._declared()
        self.rule_used = resolve_approx(self.approx, m, self.d_in, sq, sk, self.causal, self.qk_map, L, heads)
        return self.rule_used

    def _gram_rule(self, gram: torch.Tensor, sq: float, sk: float) -> str:
        """The token-resolved rule at input ``gram``: "uniform" (zeroth order in the scores,
        :mod:`~sigprop.components.attention_uniform`) where it applies, else "sampled"; kept in ``self.rule_used``
        as "token-resolved uniform" or "token-resolved sampled"."""
        rule = "uniform" if uniform_applies(self.approx, gram, self.d_in, sq, sk, self.qk_map) else "sampled"
        self.rule_used = f"token-resolved {rule}"
        return rule

    def forward_moments(self, m: Moments, L: Stat, attention_heads: int = DEFAULT_HEADS,
                        attention_seed: int = 0) -> Moments:
        """:func:`mha_forward` with the module's declared sigmas; ``approx="auto"`` is resolved at ``m`` and the
        rule used is kept in ``self.rule_used``. ``attention_heads`` / ``attention_seed``: the sampled rule's draw."""
        sq, sk, sv = self._declared()
        return mha_forward(m, self.n_heads, self.d_in, self.d_head, L, sq, sk, sv, self.dropout_p, self.causal,
                           self._rule(m, L, attention_heads), attention_heads, attention_seed, self.qk_map)

    def gram_forward(self, gram: torch.Tensor, key_mask: torch.Tensor | None = None,
                     attention_heads: int = DEFAULT_GRAM_HEADS, attention_seed: int = 0,
                     fixed_norm: bool = False) -> torch.Tensor:
        """Token-resolved rule: the per-element output Gram matrix (B, L, L) for the per-element input Gram ``gram``
        (B, L, L), by :func:`~sigprop.components.attention_gram.gram_attention` with the module's declared sigmas
        and d_k = d_head (concatenated heads share the per-element Gram), or where every score is small by the
        uniform rule (:func:`~sigprop.components.attention_uniform.uniform_gram_attention`, no draws; which rule:
        ``rule_used``). ``attention_heads``: heads per sequence; ``fixed_norm``: the input rows have a fixed length
        (a norm's output)."""
        if self.batch_shape:
            raise NotImplementedError("the token-resolved rule takes one weight copy (batch_shape=())")
        sq, sk, sv = (float(np.asarray(v)) for v in self._declared())
        if self._gram_rule(gram, sq, sk) == "uniform":
            return uniform_gram_attention(gram, self.d_in, sv, float(self.dropout_p), self.causal, key_mask)
        return gram_attention(gram, self.d_in, self.d_head, sq, sk, sv, float(self.dropout_p), self.causal, key_mask,
                              attention_heads, attention_seed, fixed_norm, self.qk_map).gram

    def gram_backward(self, grad_gram: torch.Tensor, gram: torch.Tensor, key_mask: torch.Tensor | None = None,
                      attention_heads: int = DEFAULT_GRAM_HEADS, attention_seed: int = 0,
                      fixed_norm: bool = False) -> torch.Tensor:
        """Token-resolved backward rule: the per-element input-gradient Gram matrix (B, L, L) for the output-gradient
        Gram ``grad_gram`` and the forward input Gram ``gram``, by
        :func:`~sigprop.components.attention_gram.gram_attention_backward` with d_k = d_head (or the uniform rule
        where :meth:`gram_forward` takes it), times ``n_heads`` (each head's output coordinates carry output
        gradients uncorrelated with the other heads', so their input gradients add). Arguments as in
        :meth:`gram_forward`, whose draws it shares."""
        if self.batch_shape:
            raise NotImplementedError("the token-resolved rule takes one weight copy (batch_shape=())")
        sq, sk, sv = (float(np.asarray(v)) for v in self._declared())
        if self._gram_rule(gram, sq, sk) == "uniform":
            return self.n_heads * uniform_gram_attention_backward(grad_gram, self.d_head, sv, float(self.dropout_p),
                                                                  self.causal, key_mask)
        return self.n_heads * gram_attention_backward(gram, grad_gram, self.d_in, self.d_head, sq, sk, sv,
                                                      float(self.dropout_p), self.causal, key_mask, attention_heads,
                                                      attention_seed, fixed_norm, self.qk_map)

    def backward_moments(self, g: GradMoments, m_in: Moments, L: Stat, attention_heads: int = DEFAULT_HEADS,
                         attention_seed: int = 0) -> GradMoments:
        """:func:`mha_backward` with the module's declared sigmas (see :meth:`forward_moments`)."""
        sq, sk, sv = self._declared()
        return mha_backward(g, m_in, self.n_heads, self.d_in, self.d_head, L, sq, sk, sv, self.dropout_p,
                            self.causal, self._rule(m_in, L, attention_heads), attention_heads, attention_seed,
                            self.qk_map)
