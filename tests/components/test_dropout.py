"""Dropout rules (Kedia et al. App. A.3). Monte Carlo tier 3 lives in tests/verify/test_exact_rules.py."""

import pytest

from sigprop import GradMoments, Moments
from sigprop.components.dropout import Dropout, dropout_backward, dropout_forward


def test_identities():
    m = Moments(mean=1.0, var=2.0, corr=0.4, corr_hidden=0.1)
    assert dropout_forward(m, 0.0) == m
    out = dropout_forward(Moments(mean=0.0, var=1.0, corr=0.5), 0.5)
    assert out.var == 2.0 and out.corr == 0.25
    g = dropout_backward(GradMoments(1.0, 0.6), 0.25)
    assert g.var == pytest.approx(4 / 3) and g.corr == pytest.approx(0.45)


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5])
def test_bad_p(p):
    with pytest.raises(ValueError, match="dropout p"):
        dropout_forward(Moments(), p)
    with pytest.raises(ValueError, match="dropout p"):
        Dropout(p)
