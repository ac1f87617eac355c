"""The parallel block of GPT-J / GPT-NeoX, x + Attn(Norm x) + FFN(Norm x): one new composite class
(:class:`~sigprop.components.parallel.Parallel`), walked by the unchanged walker, predicted against the real modules
measured over independent weight draws, layer by layer through a stack of four blocks, forward and backward."""

from __future__ import annotations

import pytest
import torch

from sigprop.components.attention_block import AttentionBlock
from sigprop.components.ffn import FFNBlock
from sigprop.components.parallel import Parallel
from sigprop.components.residual import Residual
from sigprop.components.sequential import Sequential
from sigprop.core.moments import GradMoments, Moments
from sigprop.measurement.average import average_profiles
from sigprop.measurement.hooks import Recorder
from sigprop.theory.resolved import GramState
from sigprop.walk.exchangeable import EXCHANGEABLE
from sigprop.walk.walker import Flow, GradFlow, Walker
from tests.helpers import Z

D, H, L, B, N, R, SEEDS = 64, 2, 16, 8, 4, 0.3, 96


def stack() -> Sequential:
    return Sequential(*[Residual(Parallel(attn=AttentionBlock(D, H), ffn=FFNBlock(D, activation="gelu")))
                        for _ in range(N)])


def sites(model: Sequential) -> list:
    return [(i, "layer", block) for i, block in enumerate(model)]


def theory(model: Sequential):
    """Every block's output moments and the gradient arriving there, for input tokens of correlation R and a unit
    uncorrelated gradient at the top."""
    walker = Walker(EXCHANGEABLE, {"L": L}, {id(m): (i, site) for i, site, m in sites(model)})
    _, tape = walker.forward(model, Flow(Moments(0.0, 1.0, R)))
    g_in = walker.backward(model, GradFlow(GradMoments(1.0, 0.0)), tape).value
    return walker.rows, walker.grad_rows, g_in


def measured():
    """The same statistics of real stacks: Gaussian inputs with token correlation R, the loss Σ out·U with U i.i.d.
    N(0, 1) (a unit uncorrelated gradient at the top), weights drawn afresh for each seed."""
    profiles = []
    for seed in range(SEEDS):
        torch.manual_seed(seed)
        model = stack()
        shared, own = torch.randn(B, 1, D), torch.randn(B, L, D)
        x = (R**0.5 * shared + (1 - R) ** 0.5 * own).requires_grad_()
        with Recorder(sites(model)) as rec:
            out = model(x)
            (out * torch.randn_like(out)).sum().backward()
        profiles.append(rec.profile())
    return average_profiles(profiles, {}, {})


@pytest.fixture(scope="module")
def both():
    return theory(stack()), measured()


def _z(both, quantity: str) -> dict:
    (rows, grad_rows, _), meas = both
    look = meas.lookup()
    out = {}
    for i in range(N):
        pred = (rows if quantity.startswith("fwd") else grad_rows)[(i, "layer")]
        value = getattr(pred, quantity.removeprefix("fwd_").removeprefix("grad_"))
        out[i] = (value - getattr(look[(i, "layer")], quantity)) / meas.meta["stderr"][f"{i}:layer"][quantity]
    return out


@pytest.mark.parametrize("quantity", ["fwd_var", "fwd_corr", "grad_corr"])
def test_parallel_stack_within_measurement_noise(both, quantity):
    """Every block's output variance and token correlation, and the gradient's token correlation there, within
    Z standard errors of the measurement (96 weight draws)."""
    z = _z(both, quantity)
    assert all(abs(v) <= Z for v in z.values()), z


@pytest.mark.xfail(strict=True, reason="known gap (test_resolved_backward.py::test_first_layer_norm_fluctuation_gap): "
                   "the LayerNorm backward rule takes the χ² spread of a Gaussian input's squared norm, an attention "
                   "output's norm spreads more, so the gradient into a branch whose norm reads mostly attention output "
                   "is low: here 1-2% per block at d = 64 with 2 heads, the same in a sequential stack of these blocks")
def test_parallel_stack_gradient_variance_within_measurement_noise(both):
    z = _z(both, "grad_var")
    assert all(abs(v) <= Z for v in z.values()), z


def test_parallel_is_the_sum_of_its_branches():
    """The composition itself: the block's rules are its branches' rules from the same input, added as independent
    terms (forward and backward)."""
    from sigprop.core.moments import independent_grad_sum, independent_sum

    attn, ffn = AttentionBlock(D, H), FFNBlock(D, activation="gelu")
    block = Parallel(attn=attn, ffn=ffn)
    m, g = Moments(0.0, 1.3, 0.4), GradMoments(2.0, 0.1)
    assert block.forward_moments(m, L=L) == independent_sum([(1.0, attn.forward_moments(m, L=L)),
                                                             (1.0, ffn.forward_moments(m))])
    assert block.backward_moments(g, m, L=L) == independent_grad_sum([(1.0, attn.backward_moments(g, m, L=L)),
                                                                      (1.0, ffn.backward_moments(g, m))])


def test_the_walk_is_generic_over_the_state(both):
    """The token-resolved state walks the same block unchanged: on an equicorrelated Gram matrix its pooled rows are
    the exchangeable ones (the attention's Gram rule samples: within its relative standard error ~3%)."""
    (rows, _, _), _ = both
    model = stack()
    gram = (1 - R) * torch.eye(L, dtype=torch.float64) + R * torch.ones(L, L, dtype=torch.float64)
    walker = Walker(GramState(), {"L": L, "attention_heads": 256, "attention_seed": 0},
                    {id(m): (i, site) for i, site, m in sites(model)})
    walker.forward(model, Flow(gram[None].expand(2, L, L).clone()))
    for i in range(N):
        assert walker.rows[(i, "layer")].var == pytest.approx(rows[(i, "layer")].var, rel=0.03)
        assert walker.rows[(i, "layer")].corr == pytest.approx(rows[(i, "layer")].corr, abs=0.03)


def test_parallel_rejects_no_branches_and_non_modules():
    with pytest.raises(ValueError, match="at least one branch"):
        Parallel()
    with pytest.raises(ValueError, match="must be a torch.nn.Module"):
        Parallel(attn=3)
