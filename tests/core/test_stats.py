"""Measured statistics from running sums agree with direct computation."""

import torch

from sigprop.core.stats import moment_sums


def test_sums_match_direct_definitions():
    x = torch.randn(3, 5, 7, dtype=torch.float64) * 2 + 1
    s = moment_sums(x, hidden_pairs=True)
    m = x.mean()
    xc = x - m
    var = (xc**2).mean()
    tok = sum((xc[:, t] * xc[:, u]).sum() for t in range(5) for u in range(5) if t != u) / (3 * 7 * 20)
    hid = sum((xc[..., i] * xc[..., j]).sum() for i in range(7) for j in range(7) if i != j) / (3 * 5 * 42)
    assert torch.allclose(s.mean(), m)
    assert torch.allclose(s.var(), var)
    assert torch.allclose(s.corr(), tok / var)
    assert torch.allclose(s.corr_hidden(), hid / var)


def test_pooling_replicates_equals_one_group():
    x = torch.randn(4, 6, 3, 5, dtype=torch.float64)
    center = torch.zeros(4, dtype=torch.float64)
    pooled = moment_sums(x, lead=1, center=center).sum_over(0)
    whole = moment_sums(x.reshape(24, 3, 5), center=torch.tensor(0.0, dtype=torch.float64))
    assert torch.allclose(pooled.var(), whole.var()) and torch.allclose(pooled.corr(), whole.corr())


def test_pooling_groups_about_different_centres_is_refused():
    """Sums about each group's own mean do not add: pooling them would mix the groups' centres silently."""
    import pytest

    x = torch.randn(2, 6, 3, 5, dtype=torch.float64)
    x[1] += 5.0
    with pytest.raises(ValueError, match="centres differ"):
        moment_sums(x, lead=1).sum_over(0)
