"""The sampled cross-attention rules against the real :class:`CrossAttention` module (W_V and the output gradient
drawn, SDPA, autograd through the module), including queries built from the memory itself (the rules' claim that
only each side's own Gram matrix matters), different lengths on the two sides, large scores and dropout."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sigprop.components.attention_block import CrossAttentionBlock
from sigprop.components.cross_attention import CrossAttention, sample_cross_attention
from sigprop.core.moments import GradMoments, Moments
from sigprop.walk.exchangeable import EXCHANGEABLE
from sigprop.walk.walker import Flow, GradFlow, Walker
from tests.helpers import Z

D, DK, H = 64, 16, 2


def _stats(t: torch.Tensor) -> tuple[float, float]:
    """Mean square and mean token covariance over ordered pairs (the measurement's pooled definitions)."""
    n = t.shape[-2]
    sq = (t * t).mean()
    tot = t.sum(dim=-2)
    return float(sq), float(((tot * tot).mean() - sq * n) / (n * (n - 1)))


def _module_moments(sqk, p, L, L_mem, mix, draws=64, seed=0):
    """Monte Carlo of the module: per draw fresh weights; memory with mean 0.5, variance 1, token correlation 0.3;
    queries = √mix·(memory's first L rows, centred) + √(1 − mix)·fresh (variance 1, token correlation 0.2);
    output gradient with token correlation 0.4. Returns {quantity: (mean, se)} over draws."""
    gen = torch.Generator().manual_seed(seed)
    kw = {"generator": gen, "dtype": torch.float64}
    out = {k: [] for k in ("fv", "fc", "qv", "qc", "mv", "mc")}
    for _ in range(draws):
        att = CrossAttention(D, H, DK, sigma_q=math.sqrt(sqk), sigma_k=math.sqrt(sqk), sigma_v=1 / math.sqrt(D),
                             dropout_p=p).double()
        att.reset_parameters(generator=gen)
        c = torch.randn(8, 1, D, **kw)
        mem_c = math.sqrt(0.3) * c + math.sqrt(0.7) * torch.randn(8, L_mem, D, **kw)
        own = math.sqrt(0.2) * torch.randn(8, 1, D, **kw) + math.sqrt(0.8) * torch.randn(8, L, D, **kw)
        x = (own if mix == 0 else math.sqrt(mix) * mem_c[:, :L] + math.sqrt(1 - mix) * own).requires_grad_(True)
        mem = (0.5 + mem_c).requires_grad_(True)
        y = att(x, memory=mem)
        gy = math.sqrt(0.4) * torch.randn(8, 1, H * DK, **kw) + math.sqrt(0.6) * torch.randn(8, L, H * DK, **kw)
        gx, gm = torch.autograd.grad(y, (x, mem), gy)
        for key, t in (("f", y.detach()), ("q", gx), ("m", gm)):
            v, cov = _stats(t)
            out[key + "v"].append(v)
            out[key + "c"].append(cov)
    return {k: (float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(len(v)))) for k, v in out.items()}


@pytest.mark.parametrize("s2,p,L,L_mem,mix", [(0.2, 0.0, 32, 16, 0.0), (4.0, 0.1, 16, 32, 0.6),
                                              (0.5, 0.0, 32, 32, 1.0)])
def test_sampled_cross_rule_matches_the_module(s2, p, L, L_mem, mix):
    """Forward, query-gradient and memory-gradient moments of the module within Z combined standard errors of the
    rule's. ``mix = 1`` makes the queries the memory's own rows: the rule draws them independently, which is exact
    because the scores depend on each side's Gram matrix only (module docstring)."""
    q_corr = mix * 0.3 + (1 - mix) * 0.2  # the queries' token correlation
    sqk = math.sqrt(s2 / (0.7 * D * D))  # s² = τ_mem σ²_x d² σ²_q σ²_k: memory τ = 0.7, query variance 1
    m_q, mem, g = Moments(0.0, 1.0, q_corr), Moments(0.5, 1.0, 0.3), GradMoments(1.0, 0.4)
    att = CrossAttention(D, H, DK, sigma_q=math.sqrt(sqk), sigma_k=math.sqrt(sqk), sigma_v=1 / math.sqrt(D),
                         dropout_p=p)
    kw = {"memory_moments": mem, "L_memory": L_mem, "attention_heads": 256, "attention_seed": 3}
    f = att.forward_moments(m_q, L, **kw)
    bq = att.backward_moments(g, m_q, L, **kw)
    bm = att.memory_backward_moments(g, m_q, L, **kw)
    s = sample_cross_attention(1.0, q_corr, 1.0, 0.3, D, DK, L, L_mem, sqk, sqk, 1 / D, p, 0.0, 0.5, 256, 3)
    assert att.rule_used == "sampled"
    assert s.s2 == pytest.approx(s2, rel=0.15)

    def comb(a, b):
        return H * math.hypot(0.4 * a, 0.6 * b)

    mod = _module_moments(sqk, p, L, L_mem, mix)
    pairs = [("fv", f.var, s.fwd_var_se), ("fc", f.corr * f.var, s.fwd_cov_se),
             ("qv", bq.var, comb(s.sh_var_se, s.in_var_se)), ("qc", bq.corr * bq.var, comb(s.sh_cov_se, s.in_cov_se)),
             ("mv", bm.var, comb(s.mem_sh_var_se, s.mem_in_var_se)),
             ("mc", bm.corr * bm.var, comb(s.mem_sh_cov_se, s.mem_in_cov_se))]
    for key, value, se in pairs:
        est, est_se = mod[key]
        assert abs(value - est) <= Z * math.hypot(se, est_se), (key, value, est, se, est_se)


def test_block_memory_gradient_goes_back_through_the_projection():
    """The block's memory gradient is the attention's memory rule at the gradient that proj and drop hand back:
    a zero-mean projection of variance σ²_o per entry scales the gradient variance by d·σ²_o."""
    blk = CrossAttentionBlock(D, H, p=0.0, norm="none")
    m, mem, g = Moments(0.0, 1.0, 0.2), Moments(0.0, 1.0, 0.3), GradMoments(1.0, 0.0)
    kw = {"L": 32, "memory_moments": mem, "attention_heads": 64}
    at_attn = blk.proj.backward_moments(g, blk.attn.forward_moments(m, **kw))
    direct = blk.attn.memory_backward_moments(at_attn, m, **kw)
    walker = Walker(EXCHANGEABLE, kw)  # the walker collects what the block's cross-attention sends to the memory
    _, tape = walker.forward(blk, Flow(m))
    walker.backward(blk, GradFlow(g), tape)
    (via,) = walker.memory
    assert float(via.var) == pytest.approx(float(direct.var), rel=1e-12)
    assert float(via.corr) == pytest.approx(float(direct.corr), abs=1e-12)


def test_cross_rules_reject_bad_input():
    att = CrossAttention(D, H, DK)
    with pytest.raises(ValueError, match="memory_moments"):
        att.forward_moments(Moments(0.0, 1.0, 0.2), 32)
    with pytest.raises(ValueError, match="memory token correlation"):
        sample_cross_attention(1.0, 0.2, 1.0, 1.5, D, DK, 32, 32, 1e-3, 1e-3, 1e-2)
    with pytest.raises(ValueError, match="memory length"):
        sample_cross_attention(1.0, 0.2, 1.0, 0.5, D, DK, 32, 1, 1e-3, 1e-3, 1e-2)
    with pytest.raises(ValueError, match="not causal"):
        CrossAttention(D, H, DK, causal=True)
