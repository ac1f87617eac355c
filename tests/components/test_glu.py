"""SwiGLU / GeGLU up-projections (the gated half of a Llama-style FFN): the rules against Monte Carlo on the real
module (forward variance and token correlation, input-gradient variance and correlation), the zero output mean, and
the identities at ρ = 0 and 1."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sigprop.components.glu import GLU, glu_backward, glu_forward
from sigprop.core.moments import GradMoments, Moments
from tests.helpers import Z


def _pairs(n, d, mean, var, corr, generator):
    """n token pairs (x_t, x_s) of width d: N(mean, var) entries, correlation corr between the pair's tokens."""
    shared = torch.randn(n, 1, d, generator=generator, dtype=torch.float64)
    own = torch.randn(n, 2, d, generator=generator, dtype=torch.float64)
    return mean + math.sqrt(var) * (math.sqrt(corr) * shared + math.sqrt(1.0 - corr) * own)


def _ratio_se(num: np.ndarray, den: np.ndarray, groups: int = 32) -> tuple[float, float]:
    """mean(num)/mean(den) and its standard error from groups of the samples (delta method over groups)."""
    n = len(num) // groups * groups
    r = num[:n].reshape(groups, -1).mean(1) / den[:n].reshape(groups, -1).mean(1)
    return float(num.mean() / den.mean()), float(r.std(ddof=1) / math.sqrt(groups))


@pytest.mark.parametrize("gate", ["swiglu", "geglu"])
@pytest.mark.parametrize(("mean", "var", "corr", "gate_gain", "g_corr"), [
    (0.0, 1.0, 0.3, 0.5, 0.2), (0.5, 2.0, 0.7, 1.0, 0.5), (0.0, 1.0, 0.95, 4.0, 0.0)])
def test_rules_match_monte_carlo_of_the_module(gate, mean, var, corr, gate_gain, g_corr):
    """Gate pre-activation variance s_a = gate_gain²·(σ² + μ²): 0.25, 2.25 and 16, the stated range."""
    d_in, d_ff, draws, rows = 512, 256, 64, 64  # d_in large: the O(1/d_in) spread of |x|² is ~0.4% here
    gate_std = gate_gain / math.sqrt(d_in)
    gen = torch.Generator().manual_seed(7)
    h2, hts, gx2, gxts = [], [], [], []
    for k in range(draws):
        torch.manual_seed(1000 + k)
        glu = GLU(d_in, d_ff, gate=gate, gate_std=gate_std, up_std=0.2).double()
        x = _pairs(rows, d_in, mean, var, corr, gen).requires_grad_(True)
        h = glu(x)
        shared = torch.randn(rows, 1, d_ff, generator=gen, dtype=torch.float64)
        g = math.sqrt(g_corr) * shared + math.sqrt(1.0 - g_corr) * torch.randn(rows, 2, d_ff, generator=gen,
                                                                               dtype=torch.float64)
        (gx,) = torch.autograd.grad(h, x, g)
        h, gx = h.detach(), gx.detach()
        h2.append((h**2).mean((1, 2)).numpy())
        hts.append((h[:, 0] * h[:, 1]).mean(1).numpy())
        gx2.append((gx**2).mean((1, 2)).numpy())
        gxts.append((gx[:, 0] * gx[:, 1]).mean(1).numpy())
    h2, hts, gx2, gxts = (np.concatenate(v) for v in (h2, hts, gx2, gxts))
    m = Moments(mean=mean, var=var, corr=corr)
    fwd = glu_forward(m, d_in, gate_std**2, 0.04, gate)
    bwd = glu_backward(GradMoments(var=1.0, corr=g_corr), m, d_in, d_ff, gate_std**2, 0.04, gate)
    se = h2.std(ddof=1) / math.sqrt(len(h2))
    assert abs(h2.mean() - fwd.var) <= Z * se, (h2.mean(), fwd.var, se)
    r, r_se = _ratio_se(hts, h2)
    assert abs(r - fwd.corr) <= Z * r_se, (r, fwd.corr, r_se)
    se = gx2.std(ddof=1) / math.sqrt(len(gx2))
    assert abs(gx2.mean() - bwd.var) <= Z * se, (gx2.mean(), bwd.var, se)
    r, r_se = _ratio_se(gxts, gx2)
    assert abs(r - bwd.corr) <= Z * r_se, (r, bwd.corr, r_se)
    assert fwd.mean == 0.0


def test_identities_at_zero_and_full_correlation():
    """Independent tokens (ρ = 0): uncorrelated outputs (b's zero correlation multiplies), but correlated output
    gradients still correlate the input gradients through the up projection, by the gate's mean:
    r_gx = r_g σ²_up d_ff (E φ(a))² / σ²_gx. Identical tokens stay identical."""
    from sigprop.components.glu import GATES
    from sigprop.core.gaussian import expect_1d

    for gate in ("swiglu", "geglu"):
        independent = Moments(mean=0.0, var=1.0, corr=0.0)
        assert abs(glu_forward(independent, 16, 0.1, 0.1, gate).corr) < 1e-12
        g = glu_backward(GradMoments(var=1.0, corr=0.7), independent, 16, 32, 0.1, 0.1, gate)
        mean_gate = expect_1d(GATES[gate][0], 0.0, 16 * 0.1)
        assert g.corr == pytest.approx(0.7 * 0.1 * 32 * mean_gate**2 / g.var, rel=1e-9)
        one = glu_forward(Moments(mean=0.0, var=1.0, corr=1.0 - 1e-12), 16, 0.1, 0.1, gate)
        assert one.corr == pytest.approx(1.0, abs=1e-9)


def test_bad_gate_is_refused():
    with pytest.raises(ValueError, match="gate must be one of"):
        GLU(4, 8, gate="relu")


@pytest.mark.long
@pytest.mark.parametrize(("spread", "bound"), [(0.03, 1e-4), (4.0, 2e-3), (256.0, 2e-3)])
def test_the_token_resolved_table_matches_the_rule_per_pair(spread, bound):
    """Many pairs (a token-resolved walk) go through an interpolated table: against the per-pair tensor rule, the
    error as a fraction of E[f(a, a)] stays within the docstring's bounds (variances within 3%, over ×4, over ×256)."""
    from sigprop.components.glu import GATES, _pair_expectation
    from sigprop.core.gaussian import expect_2d

    rng = np.random.default_rng(0)
    if spread < 1:
        s = 1.3 * rng.uniform(1.0 - spread, 1.0 + spread, (4, 32, 32))
    else:  # log-uniform over a factor ``spread`` centred on 1 (256: the verify sweep's s_a ∈ [1/16, 16])
        s = np.exp(rng.uniform(-0.5, 0.5, (4, 32, 32)) * np.log(spread))
    rho = rng.uniform(-0.2, 0.999, (4, 32, 32))
    for phi, dphi in GATES.values():
        for f in (lambda a, b, phi=phi: phi(a) * phi(b), lambda a, b, dphi=dphi: dphi(a) * dphi(b)):
            table = _pair_expectation(f, s, rho).reshape(-1)[:300]
            exact = expect_2d(f, 0.0, s.reshape(-1)[:300], rho.reshape(-1)[:300])
            scale = expect_2d(f, 0.0, s.reshape(-1)[:300], 1.0)
            assert np.max(np.abs(table - exact) / scale) <= bound


@pytest.mark.parametrize("lo,hi", [(0.9, 1.1), (0.01, 16.0), (1e-4, 16.0)])
def test_many_variances_at_once_match_the_rule_per_variance(lo, hi):
    """A token-resolved walk's million pairs: their Gaussian expectations, interpolated between geometric nodes of the
    variance, are within 1e-9 relative of the Gauss–Hermite rule per variance (for φ², φ'² of both gates, over a range
    of variances up to 160 000); a handful of distinct variances, repeated, give exactly the per-variance numbers."""
    from sigprop.components.glu import GATES, _expectation
    from sigprop.core.gaussian import expect_1d

    rng = np.random.default_rng(1)
    many = rng.uniform(lo, hi, (200, 300))
    few = rng.choice(rng.uniform(lo, hi, 7), size=(200, 300))
    for phi, dphi in GATES.values():
        for f in (lambda a, phi=phi: phi(a) ** 2, lambda a, dphi=dphi: dphi(a) ** 2):
            np.testing.assert_allclose(_expectation(f, many), expect_1d(f, 0.0, many), rtol=1e-9, atol=0.0)
            np.testing.assert_array_equal(_expectation(f, few), expect_1d(f, 0.0, few))
