"""Linear rules (Kedia et al. App. A.2). Monte Carlo tier 3 lives in tests/verify/test_exact_rules.py."""

import math

import pytest
import torch

from sigprop import GradMoments, Moments
from sigprop.components.linear import Linear, linear_backward, linear_forward


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
