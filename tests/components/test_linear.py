"""Linear rules (Kedia et al. App. A.2). Monte Carlo tier 3 lives in tests/verify/test_exact_rules.py."""

import math

import pytest
import torch

from sigprop import GradMoments, Moments
from sigprop.components.linear import Linear, linear_backward, linear_forward, linear_log_gain_variance
from tests.helpers import assert_close_mc, mc_mean


def test_identities():
    m = Moments(mean=0.0, var=2.0, corr=0.3)
    out = linear_forward(m, 100, 1 / 100)
    assert out.var == pytest.approx(2.0) and out.corr == pytest.approx(0.3) and out.mean == 0.0
    # A mean is shared by all tokens: it becomes token covariance.
    out = linear_forward(Moments(mean=1.0, var=1.0, corr=0.0), 10, 0.1)
    assert out.corr == pytest.approx(0.5)
    assert linear_backward(GradMoments(3.0, 0.2), 50, 0.02).var == pytest.approx(3.0)


def test_module_init_matches_declared_std_and_rules_read_it():
    torch.manual_seed(0)
    lin = Linear(400, 300, weight_std=0.05)
    n = lin.weight.numel()
    # Sample std of n normal draws has relative standard error 1/sqrt(2n).
    assert float(lin.weight.detach().std()) == pytest.approx(0.05, rel=4.4 / math.sqrt(2 * n))
    assert lin.forward_moments(Moments(var=1.0)).var == pytest.approx(400 * 0.05**2)


@pytest.mark.parametrize("call, field", [
    (lambda: linear_forward(Moments(), 0, 1.0), "d_in"),
    (lambda: linear_forward(Moments(), 10, -1.0), "weight_var"),
    (lambda: linear_backward(GradMoments(), 5, 0.0), "weight_var"),
    (lambda: Linear(4, 4, weight_std=-1.0), "weight_std"),
])
def test_bad_input(call, field):
    with pytest.raises(ValueError, match=field):
        call()


def _rows(rng: torch.Generator, groups: int, sequences: int, length: int, width: int, corr: float) -> torch.Tensor:
    """``groups`` batches of Gaussian rows, correlation ``corr`` within a sequence (a shared vector), none across."""
    shared = torch.randn(groups, sequences, 1, width, generator=rng, dtype=torch.float64)
    own = torch.randn(groups, sequences, length, width, generator=rng, dtype=torch.float64)
    return (math.sqrt(corr) * shared + math.sqrt(1 - corr) * own).reshape(groups, sequences * length, width)


@pytest.mark.parametrize("corr, sequences, length, width", [(0.0, 4, 8, 16), (0.6, 2, 16, 32), (0.9, 3, 6, 24)])
def test_log_gain_variance_effective_rank_against_gaussian_rows(corr, sequences, length, width):
    """The closed form's expectation over the rows, E tr(S²) / E (tr S)², against the mean over many batches of
    Gaussian rows of the ratio tr(S²)/(tr S)² (their difference is the stated O(1/d) of a ratio of expectations:
    the Monte Carlo takes the ratios' mean, so it is compared with z standard errors plus that bound)."""
    gen = torch.Generator().manual_seed(1)
    x = _rows(gen, 4000, sequences, length, width, corr)
    s = x.transpose(1, 2) @ x
    ratio = torch.einsum("gij,gji->g", s, s) / torch.einsum("gii->g", s) ** 2
    mean, se = mc_mean(ratio)
    closed = linear_log_gain_variance(width, width, corr, sequences, length) * width / 2  # n_out = width
    assert_close_mc(closed, mean, se, model_err=closed * 4.0 / width, what="E tr(S²)/(tr S)²")


def test_log_gain_variance_against_weight_draws():
    """Var_W[log Σ|W x_t|²] over fresh N(0, σ²) weights at fixed rows, pooled over 40 batches of rows: the
    closed form within z standard errors of a variance (relative SE √(2/dof)) plus the delta method's O(1/k) and the
    rows' O(1/d)."""
    gen = torch.Generator().manual_seed(2)
    n_out, width, corr, sequences, length = 48, 32, 0.5, 2, 12
    x = _rows(gen, 40, sequences, length, width, corr)
    w = torch.randn(40, 200, n_out, width, generator=gen, dtype=torch.float64)
    q = (torch.einsum("gkow,gtw->gkto", w, x) ** 2).sum(dim=(2, 3)).log()
    within = q - q.mean(dim=1, keepdim=True)
    dof = 40 * 199
    var = float(within.pow(2).sum() / dof)
    closed = float(linear_log_gain_variance(n_out, width, corr, sequences, length))
    assert_close_mc(closed, var, var * math.sqrt(2 / dof), model_err=closed * (4.0 / width + 2 * closed),
                    what="Var log Q")


def test_log_gain_variance_limits_and_domain():
    big = linear_log_gain_variance(100, 4096, 0.0, 1, 100_000)  # independent rows: ≈ (2/n_out)(1/N + 1/d)
    assert big == pytest.approx(2 / 100 * (1 / 100_000 + 1 / 4096), rel=1e-3)
    # one shared direction per sequence: B sequences act like B vectors, (1 + 2/d)/B, and (1 − 1/B)/d across them,
    # up to Var tr S in the denominator, 2/(d B) relative
    d = 4096
    assert linear_log_gain_variance(64, d, 1.0, 4, 50_000) == pytest.approx(2 / 64 * ((1 + 2 / d) / 4 + 0.75 / d),
                                                                            rel=2 / (d * 4) * 1.5)
    with pytest.raises(ValueError, match="corr"):
        linear_log_gain_variance(8, 8, 1.5, 1, 4)
    with pytest.raises(ValueError, match="n_out"):
        linear_log_gain_variance(0, 8, 0.5, 1, 4)
