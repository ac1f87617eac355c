"""DeepScaleLM laws (Kedia et al. Sec. 3.5, App. E.3–E.6, App. M)."""

import math

import numpy as np
import pytest
from scipy import optimize

from sigprop.laws.dslm import (
    dslm_attention_var,
    dslm_correlation_schedule,
    dslm_embedding_var,
    dslm_ffn_var,
    dslm_forward_variance,
    dslm_postln_gradient_factor,
    dslm_preln_gradient_factor,
    dslm_preln_gradient_limit,
    dslm_qk_var,
    dslm_scales,
    dslm_simple_postln_gradient_factor,
    dslm_simple_preln_bounds,
    dslm_simple_preln_eq45,
    dslm_simple_preln_forward,
    dslm_simple_preln_gradient_bounds,
)
from sigprop.laws.rank_collapse import block_constants, ffn_corr_exact


def _fig15_literal(r, N, p):
    """App. M, Fig. 15 ``corr_input_layerwise`` transcribed literally (λ² = 1 − 2/N, β² = 2/N)."""
    lam2, beta2 = 1 - 2 / N, 2 / N
    rN = []
    for _ in range(N):
        r = lam2 * r + beta2 * (1 - p)
        r = lam2 * r + beta2 * (1 - p) * (r + (1 - r**2) ** 0.5 / math.pi - r * math.acos(r) / math.pi)
        rN.append(r)
    return rN


# --- scales and init variances (tier 1) ------------------------------------------------------------------------------

def test_scales():
    lam2, beta2 = dslm_scales(192)
    assert beta2 == pytest.approx(2 / 192, rel=1e-15) and lam2 + beta2 == 1.0  # App. M
    lam2, beta2 = dslm_scales(np.int64(100), k=3.0, alpha=1.5)
    assert beta2 == pytest.approx(3 / 1000, rel=1e-14)
    with pytest.raises(ValueError, match="k/N\\^alpha"):
        dslm_scales(1)
    with pytest.raises(ValueError, match="n_layers"):
        dslm_scales(2.5)


def test_embedding_ffn_attention_variances_give_unit_blocks():
    d, p = 256, 0.1
    assert 3 * dslm_embedding_var(p) / (1 - p) == pytest.approx(1.0, rel=1e-15)
    sf = dslm_ffn_var(d, p)
    assert sf == pytest.approx(math.sqrt((1 - p) / 2) / d, rel=1e-15)  # Fig. 14/15's σ²_f
    # σ²_f read as a variance makes the FFN block output variance C2 = 1 (d_ff = 4d) ...
    assert block_constants(d, 1.0, 1.0, sf, sf, p=p)[1] == pytest.approx(1.0, rel=1e-14)
    # ... and for any d_ff with the generalised formula
    sf6 = dslm_ffn_var(d, p, d_ff=6 * d)
    assert block_constants(d, 1.0, 1.0, sf6, sf6, p=p, d_ff=6 * d)[1] == pytest.approx(1.0, rel=1e-14)
    # read as a std (variance σ_f⁴) it would give C2 = (1 − p)/(2 d²), far from 1
    assert block_constants(d, 1.0, 1.0, sf**2, sf**2, p=p)[1] == pytest.approx((1 - p) / (2 * d**2), rel=1e-13)
    for r in (0.05, 0.4, 1.0):
        so = dslm_attention_var(d, p, r)
        C1, _ = block_constants(d, so, so, 1.0, 1.0, p=p)
        assert C1 * r == pytest.approx(1.0, rel=1e-14)
    # simplified DSLM (Fig. 14): V, O get σ²_f, so C1 = 1/2 and the attention output is r/2 (App. E.5.1)
    assert block_constants(d, sf, sf, sf, sf, p=p) == pytest.approx((0.5, 1.0), rel=1e-14)
    assert dslm_qk_var(d) == 1 / d
    with pytest.raises(ValueError, match="r_in"):
        dslm_attention_var(d, p, 0.0)


def test_forward_variance_is_one():
    for N in (2, 12, 768):
        lam2, beta2 = dslm_scales(N)
        assert np.allclose(dslm_forward_variance(N, lam2, beta2), 1.0, rtol=0, atol=1e-12)


# --- correlation schedule (App. M) --------------------------------------------------------------------------------

@pytest.mark.parametrize(("p", "r0"), [(0.1, 0.0), (0.1, 0.3), (0.0, 0.2), (0.1, 0.99), (0.5, 0.6)])
def test_schedule_is_fig15_shifted_by_one(p, r0):
    N = 48
    lit = _fig15_literal(r0, N, p)
    full = dslm_correlation_schedule(N, p, r0, include_final=True)
    r_in = dslm_correlation_schedule(N, p, r0)
    assert r_in.shape == (N,) and full.shape == (N + 1,)
    assert r_in[0] == r0
    assert np.allclose(r_in[1:], lit[:-1], rtol=0, atol=1e-14)  # the paper's rN[n-1] is our r_in[n]
    assert full[-1] == pytest.approx(lit[-1], abs=1e-14)


@pytest.mark.parametrize("approx", ["exact", "kedia"])
@pytest.mark.parametrize(("p", "r0"), [(0.1, 0.0), (0.1, 0.95), (0.0, 0.3), (0.3, 0.5), (0.1, 1.0)])
def test_schedule_monotone_bounded_and_below_layer_fixed_point(approx, p, r0):
    N = 96
    r = dslm_correlation_schedule(N, p, r0, ffn_approx=approx, include_final=True)
    assert np.all((r >= 0) & (r <= 1))
    d = np.diff(r)
    assert np.all(d >= -1e-15) or np.all(d <= 1e-15)  # the layer map is increasing, so the sequence is monotone
    lam2, beta2 = dslm_scales(N)

    def layer(x):
        return dslm_correlation_schedule(1, p, x, lam2=lam2, beta2=beta2, ffn_approx=approx, include_final=True)[1]

    # p = 0: r = 1 is the fixed point; otherwise the layer map has one fixed point in [0, 1)
    star = 1.0 if abs(layer(1.0) - 1.0) < 1e-15 else optimize.brentq(lambda x: layer(x) - x, 0.0, 1.0, xtol=1e-15)
    lo, hi = min(r0, star), max(r0, star)
    assert np.all((r >= lo - 1e-12) & (r <= hi + 1e-12))


def test_schedule_paper_rank_collapse_claim_with_dropout():
    """Sec. 3.5: "applying block equations iteratively shows that r_x < 1 − 1/e² after N layers" — holds at the
    paper's dropout p = 0.1 (Table 25) from uncorrelated or moderately correlated input. (With p = 0 Fig. 15's
    recurrence ends near 0.905 > 1 − 1/e² = 0.865 from r0 = 0: the claim needs dropout; noted in the report.)"""
    for N in (12, 192, 768):
        for r0 in (0.0, 0.5):
            assert dslm_correlation_schedule(N, 0.1, r0, include_final=True)[-1] < 1 - math.exp(-2)


def test_schedule_with_general_scales_tracks_variance():
    # λ² = 1, β² = 1 (plain residual, unit blocks): the stream variance after k adds is 1 + k, so the first
    # attention update is the equal-weight average (r0 + (1 − p))/2
    r = dslm_correlation_schedule(2, 0.2, 0.1, lam2=1.0, beta2=1.0, include_final=True)
    a = (0.1 + 0.8) / 2
    assert r[1] == pytest.approx((2 * a + 0.8 * ffn_corr_exact(a)) / 3, rel=1e-14)
    with pytest.raises(ValueError, match="ffn_approx"):
        dslm_correlation_schedule(2, 0.1, 0.1, ffn_approx="bogus")


# --- simplified DSLM forward (App. E.5.1, eqs. 4–6) -------------------------------------------------------------

def test_simple_forward_recurrence_vs_eq4():
    N = 300
    rec0 = dslm_simple_preln_forward(N, 0.0)
    assert rec0[-1] == pytest.approx(dslm_simple_preln_eq45(N, r=0.0), rel=1e-12)  # identical recurrences at r = 0
    rng = np.random.default_rng(5)
    rec = dslm_simple_preln_forward(N, rng.uniform(0, 1, N))
    assert dslm_simple_preln_eq45(N, r=0.0) - 1e-12 <= rec[-1] <= dslm_simple_preln_eq45(N, r=1.0) + 1e-12
    assert dslm_simple_preln_forward(N, 1.0)[-1] <= dslm_simple_preln_eq45(N, r=1.0)


@pytest.mark.parametrize("N", [50, 400, 3000])
def test_eq4_eq5_recurrence_converge_to_eq6(N):
    """Eq. 6 is the N → ∞ limit (β² = 2/N, σ²_0 = 1). Finite-N error, with q = (1 − β²)², E = e⁻⁴, s = (1 + r/2)/2:

        |q^N − E| ≤ E·4/(N − 2)     (2N|log(1 − x) + x| ≤ 2N x²/(2(1 − x)), x = 2/N),
        eq. 4:  |Δ| ≤ E·4/(N − 2) + (1 + r/2) β²/(2(2 − β²)),     eq. 5: |Δ| ≤ E·4/(N − 2)(1 − s),
        recurrence at r = 1:  |Δ| ≤ E·4/(N − 2) + β²/(4(2 − β²)).
    """
    beta2 = 2 / N
    E = math.exp(-4)
    lo, hi = dslm_simple_preln_bounds()
    assert lo == pytest.approx(0.5 + 1 / (2 * math.exp(4)), rel=1e-15)
    assert hi == pytest.approx(0.75 + 1 / (4 * math.exp(4)), rel=1e-15)
    qerr = E * 4 / (N - 2)
    for r, target in ((0.0, lo), (1.0, hi)):
        s = (1 + r / 2) / 2
        assert abs(dslm_simple_preln_eq45(N, r=r) - target) <= qerr + (1 + r / 2) * beta2 / (2 * (2 - beta2))
        assert abs(dslm_simple_preln_eq45(N, r=r, form="eq5") - target) <= qerr * (1 - s) + 1e-15
    assert abs(dslm_simple_preln_forward(N, 1.0)[-1] - hi) <= qerr + beta2 / (4 * (2 - beta2))


# --- gradients (App. E.3–E.6) ---------------------------------------------------------------------------------------

def test_gradient_factor_identities():
    assert dslm_preln_gradient_factor(1.0, 100) == 1.0
    assert dslm_preln_gradient_factor(1.5, 100, k=2.0) == pytest.approx(1.01, rel=1e-15)
    lam2, beta2 = dslm_scales(64)
    assert dslm_postln_gradient_factor(lam2, beta2, 0.7, 0.7) == pytest.approx(1.0, rel=1e-15)
    assert dslm_simple_postln_gradient_factor(beta2, 0.4, 0.4) == 1.0
    assert dslm_simple_postln_gradient_factor(beta2, 0.4, 0.4, form="exact") == pytest.approx(1.0, rel=1e-15)
    assert dslm_simple_preln_gradient_bounds(1.0) == pytest.approx((math.exp(-4), math.exp(4)), rel=1e-15)
    assert dslm_preln_gradient_limit(1.0) == 1.0


@pytest.mark.parametrize("C6", [0.5, 0.9, 1.2, 2.0])
@pytest.mark.parametrize("N", [12, 192, 768])
def test_preln_gradient_product_vs_exponential_limit(C6, N):
    """(1 + x)^{N−1} with x = (C6 − 1)/N vs e^{C6 − 1} (App. E.3.2):
    |(N − 1) log(1 + x) − N x| ≤ |x| + (N − 1) x²/(2(1 − |x|))."""
    f = dslm_preln_gradient_factor(C6, N)
    x = (C6 - 1) / N
    total = math.prod([f] * (N - 1))
    gap = abs(math.log(total) - math.log(dslm_preln_gradient_limit(C6)))
    assert gap <= abs(x) + (N - 1) * x * x / (2 * (1 - abs(x))) + 1e-12


def test_simple_postln_eq7_vs_exact_and_bounds():
    """eq. 7 is the first-order form of (1 + β²a)/(1 + β²b), a = r_g/2 − 1, b = r_x/2 − 1: the difference is
    −β⁴(a − b)b/(1 + β²b), so |Δ| ≤ β⁴/(2(1 − β²)). Over N layers with β² = 2/N the product stays in [e⁻², e²]."""
    rng = np.random.default_rng(6)
    N = 64
    beta2 = dslm_scales(N)[1]
    rg, rx = rng.uniform(0, 1, N), rng.uniform(0, 1, N)
    eq7 = dslm_simple_postln_gradient_factor(beta2, rg, rx)
    exact = dslm_simple_postln_gradient_factor(beta2, rg, rx, form="exact")
    assert np.all(np.abs(eq7 - exact) <= beta2**2 / (2 * (1 - beta2)) + 1e-15)
    for f in (eq7, exact):
        total = np.prod(f)
        assert math.exp(-2) <= total <= math.exp(2)
    with pytest.raises(ValueError, match="form"):
        dslm_simple_postln_gradient_factor(beta2, 0.1, 0.1, form="bogus")
