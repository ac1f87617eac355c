"""Single- and multi-head attention: identities of the rules, exact weight moments, the sweep's estimator
(subsampling, two backward passes, control variates) and the rules against Monte Carlo on the real modules."""

import math

import numpy as np
import pytest
import torch

from sigprop.components.attention import (
    MultiHeadAttention,
    SingleHeadAttention,
    attention_backward,
    attention_forward,
    mha_backward,
    mha_forward,
)
from sigprop.components.attention_theory import mm_moments
from sigprop.core.moments import GradMoments, Moments
from sigprop.verify.specs.attention import estimates_from_replicates, simulate_attention, surrogate_expectations
from tests.helpers import Z, assert_close_mc, mc_mean

#: Accuracy of the "exact" rules documented in sigprop.components.attention for Table 22's ranges (measured by the
#: full sweep: p99 of the relative variance errors and of the correlation errors, in percent / points).
DOC_REL_ERR = 0.01
DOC_CORR_ERR = 0.005


def _rules(L, d, e, sq2, sv2, p, var, r, gvar, rg, approx="exact"):
    m = Moments(0.0, var, r)
    f = attention_forward(m, d, e, L, sq2, sq2, sv2, p, approx=approx)
    b = attention_backward(GradMoments(gvar, rg), m, d, e, L, sq2, sq2, sv2, p, approx=approx)
    return f, b


# ---------------------------------------------------------------- tier 1: identities


@pytest.mark.parametrize("p", [0.0, 0.4])
def test_uniform_attention_limit(p):
    """σ_q → 0 gives uniform attention, whose moments are elementary (the sweep's surrogate, tested below)."""
    L, d, e, sv2, var, r, gvar, rg = 300.0, 100.0, 32.0, 0.02, 1.3, 0.4, 2.0, 0.3
    f, b = _rules(L, d, e, 1e-16, sv2, p, var, r, gvar, rg)
    rho, tau, q = r * var, (1 - r) * var, p / (1 - p)
    assert f.var == pytest.approx(d * sv2 * (rho * (1 + q / L) + tau / ((1 - p) * L)), rel=1e-12)
    assert f.corr * f.var == pytest.approx(d * sv2 * (rho + tau / L), rel=1e-12)
    om = sv2 * e * gvar
    assert b.var == pytest.approx(om * (rg * (1 + q / L) + (1 - rg) / ((1 - p) * L)), rel=1e-12)
    assert b.corr * b.var == pytest.approx(om * (rg + (1 - rg) / L), rel=1e-12)


def test_identical_tokens_limit():
    """r = 1 (all tokens equal) without dropout: y = c W_V exactly, and the gradient is the uniform value path."""
    L, d, e, sq2, sv2, gvar, rg = 500.0, 200.0, 64.0, 0.3**2 / 200, 1.0 / 200, 1.5, 0.25
    f, b = _rules(L, d, e, sq2, sv2, 0.0, 0.8, 1.0, gvar, rg)
    assert f.var == pytest.approx(d * sv2 * 0.8, rel=1e-12)
    assert f.corr == pytest.approx(1.0, abs=1e-12)
    assert b.var == pytest.approx(sv2 * e * gvar * (rg + (1 - rg) / L), rel=1e-12)


def test_mean_is_absorbed_into_the_shared_part():
    args = (300.0, 100.0, 32.0, 0.05**2, 0.05**2, 0.01, 0.2)
    a = attention_forward(Moments(0.5, 1.0, 0.2), *args)
    b = attention_forward(Moments(0.0, 1.25, (0.2 + 0.25) / 1.25), *args)
    assert a.var == pytest.approx(b.var, rel=1e-14) and a.corr == pytest.approx(b.corr, rel=1e-14)


def test_kedia_forms_as_printed():
    """The paper's closed forms (App. A.8; simulations/SHA.py) transcribed term by term."""
    L, d, e, sq, sv, p, r, sg2, rg = 1000.0, 316.0, 64.0, 0.3 / math.sqrt(316), 1.0 / math.sqrt(316), 0.3, 0.4, 2.0, 0.6
    sqk = sq * sq
    sw2 = d * sqk**2
    var_term1 = (1 - r) ** 2 * (L - 1) * sw2
    var_term2 = math.exp((1 - r) * d * sw2) / (1 - p)
    var_term3 = (1 - r) ** 2 * 4 * sw2 + (1 - r)
    pred_var = ((var_term1 + var_term2 * var_term3) / L + r) * d * sv**2
    pred_cov = (r + (2 * (1 - r) ** 2 * d * sqk**2 + (1 - r)) / L) * d * sv**2
    pred_gvar = sg2 * e * sv**2 * (1 + (L - 1) * rg * (1 - p)) / (L * (1 - p))
    pred_gcov = sg2 * e * sv**2 * (1 + (L - 1) * rg) / L
    f, b = _rules(L, d, e, sq**2, sv**2, p, 1.0, r, sg2, rg, approx="kedia")
    assert f.var == pytest.approx(pred_var, rel=1e-12)
    assert f.corr == pytest.approx(pred_cov / pred_var, rel=1e-12)
    assert b.var == pytest.approx(pred_gvar, rel=1e-12)
    assert b.corr == pytest.approx(pred_gcov / pred_gvar, rel=1e-12)


def test_mha_composes_heads():
    m, g = Moments(0.0, 1.0, 0.3), GradMoments(1.0, 0.2)
    args = (100.0, 64.0, 600.0, 0.02, 0.02, 0.01, 0.1)
    one_f = attention_forward(m, *args)
    one_b = attention_backward(g, m, *args)
    f = mha_forward(m, 8, *args)
    b = mha_backward(g, m, 8, *args)
    assert f == one_f
    assert b.var == pytest.approx(8 * one_b.var, rel=1e-14) and b.corr == pytest.approx(one_b.corr, rel=1e-14)


def test_rules_broadcast_over_configurations():
    L = np.array([300.0, 1000.0, 5000.0])
    f, b = _rules(L, 100.0, 32.0, np.array([1e-4, 4e-4, 1e-5]), 0.01, np.array([0.0, 0.5, 0.9]), 1.0,
                  np.array([0.0, 0.5, 0.99]), 1.0, 0.5)
    assert f.var.shape == (3,) and b.corr.shape == (3,)


def test_invalid_inputs_raise():
    m, g = Moments(0.0, 1.0, 0.3), GradMoments(1.0, 0.2)
    args = dict(d_in=100, d_k=32, L=300, sigma_q2=1e-4, sigma_k2=1e-4, sigma_v2=0.01)
    with pytest.raises(NotImplementedError, match="causal"):
        attention_forward(m, **args, causal=True, approx="kedia")
    with pytest.raises(NotImplementedError, match="causal"):
        attention_backward(g, m, **args, causal=True, approx="kedia")
    with pytest.raises(ValueError, match="dropout p"):
        attention_forward(m, **args, p=1.0)
    with pytest.raises(ValueError, match="d_k"):
        attention_forward(m, **{**args, "d_k": 0})
    with pytest.raises(ValueError, match="sigma_v2"):
        attention_forward(m, **{**args, "sigma_v2": 0.0})
    with pytest.raises(ValueError, match="sequence length L"):
        attention_backward(g, m, **{**args, "L": 1})
    with pytest.raises(ValueError, match="Moments.corr"):
        attention_forward(Moments(0.0, 1.0, -0.1), **args)
    with pytest.raises(ValueError, match="approx"):
        attention_forward(m, **args, approx="nope")
    with pytest.raises(ValueError, match="dropout p"):
        SingleHeadAttention(10, 4, dropout_p=1.5)
    with pytest.raises(ValueError, match="n_heads"):
        mha_forward(m, 0, **{k: v for k, v in args.items() if k != "d_k"}, d_head=32)


# ---------------------------------------------------------------- modules


def test_cross_attention_rows_equal_self_attention_rows():
    torch.manual_seed(0)
    mod = SingleHeadAttention(24, 8, sigma_q=0.5, sigma_k=0.5, batch_shape=(2,)).eval()
    x = torch.randn(2, 3, 40, 24)
    torch.testing.assert_close(mod(x)[..., :10, :], mod(x[..., :10, :], x))


def test_dropout_mask_and_per_configuration_p():
    torch.manual_seed(1)
    mod = SingleHeadAttention(16, 8, dropout_p=torch.tensor([0.0, 0.5]), batch_shape=(2,)).train()
    x = torch.randn(2, 5, 16)
    keep = torch.rand(2, 5, 5) >= 0.5
    a = mod.attention_probs(x)
    y = mod(x, dropout_mask=keep)
    v = x @ mod.w_v
    expect0 = a[0] @ v[0]  # p = 0 scales by 1/(1 − 0) but still applies the given mask
    torch.testing.assert_close(y[0], (a[0] * keep[0]) @ v[0])
    torch.testing.assert_close(y[1], (a[1] * keep[1] / 0.5) @ v[1])
    assert not torch.allclose(y[0], expect0)


def test_mha_equals_independent_heads():
    torch.manual_seed(2)
    d, h, dh = 20, 3, 6
    mha = MultiHeadAttention(d, h, dh).eval()
    x = torch.randn(4, 11, d)
    y = mha(x)
    for i in range(h):
        sha = SingleHeadAttention(d, dh).eval()
        with torch.no_grad():
            for name in ("w_q", "w_k", "w_v"):
                getattr(sha, name).copy_(getattr(mha, name)[:, i * dh:(i + 1) * dh])
        torch.testing.assert_close(y[..., i * dh:(i + 1) * dh], sha(x), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- tier 2/3: exact weight moments


def test_weight_moments_monte_carlo():
    d, e, sqk2, n = 12, 5, 1.0, 40000
    gen = torch.Generator().manual_seed(5)
    wq = torch.randn(n, d, e, generator=gen, dtype=torch.float64)
    wk = torch.randn(n, d, e, generator=gen, dtype=torch.float64)
    m = wq @ wk.transpose(1, 2) / math.sqrt(e)
    mmt = m @ m.transpose(1, 2)
    trb2 = (mmt * mmt).sum(dim=(1, 2))
    fro = mmt.diagonal(dim1=1, dim2=2).sum(-1)
    ex_trb2, ex_var = mm_moments(d, e, sqk2)
    est, se = mc_mean(trb2)
    assert_close_mc(ex_trb2, est, se, what="E tr((MMᵀ)²)")
    est, se = mc_mean(fro)
    assert_close_mc(d * d * sqk2, est, se, what="E‖M‖²")
    est, se = mc_mean((fro - d * d * sqk2) ** 2)
    assert_close_mc(ex_var, est, se, what="Var‖M‖²")


# ---------------------------------------------------------------- the sweep's estimator


def _params(**kw):
    base = dict(q_scale=0.6, v_scale=1.0, p=0.5, corr=0.5, grad_var=1.0, grad_corr=0.5, d_in=64, d_k=16, L=64)
    base.update(kw)
    return {k: np.array([float(v)]) for k, v in base.items()}


def test_surrogate_expectations():
    """E of every surrogate statistic of the control variates, against plain Monte Carlo of the surrogates."""
    prm = _params(L=80, d_in=40, d_k=8, p=0.6, corr=0.3)
    gen = torch.Generator().manual_seed(9)
    sur = simulate_attention(prm, 600, gen, nq_max=24, n_out=40, parts=True)
    d, e, L = 40, 8, 80
    sq2, sv2 = 0.6**2 / d, 1.0 / d
    ex = surrogate_expectations(L, d, e, 24, sq2**2, sv2, 0.6, 0.3, 0.7)
    for key, ev in ex.items():
        est, se = mc_mean(sur[key][0], groups=30)
        assert_close_mc(float(ev), est, se, what=key)


def _plain_full_attention(prm, n_seq, gen):
    """Unbiased plain Monte Carlo of the full self-attention: per-sequence per-element statistics."""
    L, d, e = int(prm["L"][0]), int(prm["d_in"][0]), int(prm["d_k"][0])
    sq, sv = prm["q_scale"][0] / math.sqrt(d), prm["v_scale"][0] / math.sqrt(d)
    p, r, rg = prm["p"][0], prm["corr"][0], prm["grad_corr"][0]
    mod = SingleHeadAttention(d, e, sigma_q=sq, sigma_k=sq, sigma_v=sv, dropout_p=p, batch_shape=(n_seq,))
    mod.reset_parameters(generator=gen)
    mod.requires_grad_(False)
    x = (math.sqrt(1 - r) * torch.randn(n_seq, L, d, generator=gen)
         + math.sqrt(r) * torch.randn(n_seq, 1, d, generator=gen)).requires_grad_(True)
    y = mod(x, generator=gen)
    g = math.sqrt(1 - rg) * torch.randn(n_seq, L, e, generator=gen) + math.sqrt(rg) * torch.randn(n_seq, 1, e,
                                                                                                 generator=gen)
    y.backward(g)

    def stats(t):
        t = t.detach().double()
        s2 = (t * t).sum(dim=(1, 2))
        col = t.sum(1)
        n, w = t.shape[1], t.shape[2]
        return s2 / (n * w), ((col * col).sum(-1) - s2) / (n * (n - 1) * w)

    return stats(y) + stats(x.grad)


def test_subsampled_estimator_matches_plain_full_attention():
    """The sweep's estimator (query subsampling, two passes, control variates) and a plain full self-attention
    Monte Carlo are both unbiased for the same moments."""
    prm = _params()
    gen = torch.Generator().manual_seed(13)
    fast = simulate_attention(prm, 64, gen, nq_max=16, n_out=24)
    plain = _plain_full_attention(prm, 3000, gen)
    for name, a, b in (("var", fast["var"][0], plain[0]), ("cov", fast["cov"][0], plain[1]),
                       ("grad_var", fast["grad_var"][0], plain[2]), ("grad_cov", fast["grad_cov"][0], plain[3])):
        ma, sa = mc_mean(a, groups=16)
        mb, sb = mc_mean(b, groups=30)
        assert abs(ma - mb) <= Z * math.hypot(sa, sb), f"{name}: {ma:.6g} ± {sa:.2g} vs {mb:.6g} ± {sb:.2g}"


# ---------------------------------------------------------------- tier 3: rules against Monte Carlo


@pytest.mark.parametrize("kw", [
    dict(L=300, d_in=100, d_k=32, q_scale=0.6, p=0.5, corr=0.5, grad_corr=0.5),
    dict(L=1200, d_in=100, d_k=32, q_scale=0.6, p=0.0, corr=0.0, grad_corr=0.0),  # query path ≈ 1.5× value path
    dict(L=300, d_in=464, d_k=128, q_scale=0.4, p=0.8, corr=0.9, grad_corr=0.9),
])
def test_rules_against_module_monte_carlo(kw):
    prm = _params(**kw)
    gen = torch.Generator().manual_seed(17)
    est = estimates_from_replicates(simulate_attention(prm, 24, gen))
    d = prm["d_in"][0]
    f, b = _rules(prm["L"][0], d, prm["d_k"][0], prm["q_scale"][0] ** 2 / d, prm["v_scale"][0] ** 2 / d,
                  prm["p"][0], 1.0, prm["corr"][0], prm["grad_var"][0], prm["grad_corr"][0])
    for name, pred, rel in (("var", f.var, True), ("corr", f.corr, False), ("grad_var", b.var, True),
                            ("grad_corr", b.corr, False)):
        e_ = est[name]
        err = DOC_REL_ERR * abs(pred) if rel else DOC_CORR_ERR
        assert_close_mc(float(pred), float(e_.value[0]), float(e_.se[0]), model_err=err, what=name)


def test_paper_rule_misses_the_query_path():
    """Where the query path dominates (r_g = 0, L/d_in large) the paper's gradient rule is far off while ours holds."""
    prm = _params(L=1200, d_in=100, d_k=32, q_scale=0.6, p=0.0, corr=0.0, grad_corr=0.0)
    gen = torch.Generator().manual_seed(19)
    est = estimates_from_replicates(simulate_attention(prm, 16, gen))
    d = 100.0
    _, kedia = _rules(1200.0, d, 32.0, 0.36 / d, 1.0 / d, 0.0, 1.0, 0.0, 1.0, 0.0, approx="kedia")
    assert kedia.var < 0.5 * est["grad_var"].value[0]


# ---------------------------------------------------------------- multi-head attention (SDPA)


def test_sdpa_dropout_mask_is_reproduced():
    """The MHA sweep's control variate regenerates SDPA's dropout mask from the same generator state."""
    from sigprop.verify.specs.mha import sdpa_dropout_mask

    torch.manual_seed(4)
    d, h, dh, L, p = 12, 2, 4, 9, 0.4
    mha = MultiHeadAttention(d, h, dh, dropout_p=p).train()
    x = torch.randn(3, L, d)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(99)
        y = mha(x)
        torch.manual_seed(99)
        keep = sdpa_dropout_mask((3, h, L, L), p)
    heads = lambda t: t.unflatten(-1, (h, dh)).transpose(-2, -3)  # noqa: E731
    q, k, v = heads(x @ mha.w_q), heads(x @ mha.w_k), heads(x @ mha.w_v)
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), -1) * keep / (1 - p)
    torch.testing.assert_close(y, (a @ v).transpose(-2, -3).flatten(-2), rtol=1e-5, atol=1e-6)


def test_mha_causal_cross_attention_raises():
    mha = MultiHeadAttention(8, 2, 4, causal=True)
    with pytest.raises(NotImplementedError, match="causal"):
        mha(torch.randn(3, 8), torch.randn(5, 8))


def test_mha_rules_against_module_monte_carlo():
    from sigprop.verify.specs.mha import simulate_mha

    prm = {k: np.array([float(v)]) for k, v in dict(q_scale=0.6, v_scale=1.0, corr=0.4, grad_var=1.0, grad_corr=0.3,
                                                       p=0.45, n_heads=4, d_head=32, d_in=100, L=300).items()}
    est = estimates_from_replicates(simulate_mha(prm, 16, torch.Generator().manual_seed(23)))
    m, g = Moments(0.0, 1.0, 0.4), GradMoments(1.0, 0.3)
    args = (4, 100.0, 32.0, 300.0, 0.0036, 0.0036, 0.01, 0.45)
    f, b = mha_forward(m, *args), mha_backward(g, m, *args)
    for name, pred, rel in (("var", f.var, True), ("corr", f.corr, False), ("grad_var", b.var, True),
                            ("grad_corr", b.corr, False)):
        err = DOC_REL_ERR * abs(pred) if rel else DOC_CORR_ERR
        assert_close_mc(float(pred), float(est[name].value[0]), float(est[name].se[0]), model_err=err, what=name)
