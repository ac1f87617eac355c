"""Residual add and the moment-walking Sequential."""

import pytest

from sigprop import GradMoments, Moments
from sigprop.components.dropout import Dropout
from sigprop.components.linear import Linear, linear_backward, linear_forward
from sigprop.components.residual import Residual, residual_backward, residual_forward
from sigprop.components.sequential import Sequential


def test_residual_identities():
    x = Moments(mean=1.0, var=2.0, corr=0.5)
    f = Moments(mean=0.0, var=1.0, corr=0.1)
    assert residual_forward(x, f, lam=1.0, beta=0.0) == Moments(1.0, 2.0, 0.5, 0.0)
    y = residual_forward(x, f, lam=1.0, beta=1.0)
    assert y.var == 3.0 and y.corr == pytest.approx((1.0 + 0.1) / 3.0)
    g = residual_backward(GradMoments(1.0, 0.2), GradMoments(4.0, 0.5), lam=0.5, beta=2.0)
    assert g.var == pytest.approx(0.25 + 16.0)


def test_sequential_composes_children_rules():
    block = Sequential(Linear(64, 256, weight_std=0.1), Dropout(0.2), Linear(256, 64, weight_std=0.05))
    m = Moments(mean=0.5, var=1.0, corr=0.3)
    by_hand = linear_forward(m, 64, 0.01)
    by_hand = Dropout(0.2).forward_moments(by_hand)
    by_hand = linear_forward(by_hand, 256, 0.0025)
    assert block.forward_moments(m).as_dict() == pytest.approx(by_hand.as_dict())
    g = GradMoments(1.0, 0.4)
    manual = linear_backward(g, 64, 0.0025)
    manual = Dropout(0.2).backward_moments(manual)
    manual = linear_backward(manual, 256, 0.01)
    assert block.backward_moments(g, m).as_dict() == pytest.approx(manual.as_dict())


def test_residual_module_walks_branch():
    block = Residual(Linear(32, 32, weight_std=0.2), lam=0.8, beta=0.6)
    m = Moments(var=1.0, corr=0.2)
    expected = residual_forward(m, linear_forward(m, 32, 0.04), 0.8, 0.6)
    assert block.forward_moments(m).var == pytest.approx(expected.var)


def test_bad_scales():
    with pytest.raises(ValueError, match="lambda"):
        residual_forward(Moments(), Moments(), lam=-1.0)
    with pytest.raises(ValueError, match="beta"):
        Residual(Linear(2, 2), beta=-0.5)
