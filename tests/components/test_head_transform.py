"""BERT's masked-LM head transform (:mod:`sigprop.components.head_transform`): its rules, read as BERT reads it
after a norm, against autograd on the real modules, and the finite-width factor against the composition alone."""

from __future__ import annotations

import math

import pytest
import torch

from sigprop.components.head_transform import HeadTransform, finite_width_factor
from sigprop.components.layernorm import LayerNorm
from sigprop.core.moments import GradMoments, Moments
from tests.helpers import Z

D, N, R = 64, 4000, 12


def _measured(activation: str, r: float):
    """Per-element forward variance, token covariance and input-gradient variance of LayerNorm → transform on tokens
    with correlation r (pairs of tokens, R weight draws of N pairs each), with their standard errors."""
    gen = torch.Generator().manual_seed(3)
    ln = LayerNorm(D, eps=1e-5).double()
    t = HeadTransform(D, activation=activation, weight_std=1 / math.sqrt(D)).double()
    fv, fc, gv = [], [], []
    for _ in range(R):
        with torch.no_grad():
            t.dense.weight.normal_(0.0, 1 / math.sqrt(D), generator=gen)
        shared = torch.randn(N, 1, D, generator=gen, dtype=torch.float64)
        x = (math.sqrt(r) * shared + math.sqrt(1 - r) * torch.randn(N, 2, D, generator=gen,
                                                                   dtype=torch.float64)).requires_grad_(True)
        y = t(ln(x))
        (gx,) = torch.autograd.grad(y, x, torch.randn(N, 2, D, generator=gen, dtype=torch.float64))
        y = y.detach()
        fv.append(float(y.pow(2).mean()))
        fc.append(float((y[:, 0] * y[:, 1]).mean()))
        gv.append(float(gx.pow(2).mean()))
    stat = lambda v: (sum(v) / len(v), float(torch.tensor(v).std()) / math.sqrt(len(v)))  # noqa: E731
    return stat(fv), stat(fc), stat(gv)


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_rules_after_a_norm_match_autograd(activation):
    r = 0.4
    (fv, fv_se), (fc, fc_se), (gv, gv_se) = _measured(activation, r)
    ln = LayerNorm(D, eps=1e-5)
    t = HeadTransform(D, activation=activation, weight_std=1 / math.sqrt(D))
    m = Moments(0.0, 1.0, r)
    normed = ln.forward_moments(m)
    out = t.forward_moments(normed)
    assert abs(out.var - fv) <= Z * fv_se + 1e-12
    assert abs(out.corr * out.var - fc) <= Z * fc_se
    g = ln.backward_moments(t.backward_moments(GradMoments(1.0, 0.0), normed), m)
    assert abs(g.var - gv) <= Z * gv_se, (g.var, gv, gv_se)
    # the composition alone (no finite-width factor) is resolved as wrong by this measurement
    plain = ln.backward_moments(super(HeadTransform, t).backward_moments(GradMoments(1.0, 0.0), normed), m)
    assert abs(plain.var - gv) > Z * gv_se, (plain.var, gv, gv_se)


def test_finite_width_factor_vanishes_with_width_and_rejects_gated_units():
    assert finite_width_factor("gelu", 1.0, 4096) - 1.0 < 0.001 < finite_width_factor("gelu", 1.0, 64) - 1.0
    assert finite_width_factor("relu", [0.1, 10.0], 64) == pytest.approx([finite_width_factor("relu", 1.0, 64)] * 2)
    with pytest.raises(ValueError, match="gelu or relu"):
        HeadTransform(D, activation="swiglu")
