"""APJN measurement (sigprop.apjn.hutchinson): Hutchinson estimates against the exact Jacobian, their standard
errors against the exact probe variance, and the one-VJP-for-all-blocks identity.

Exact probe statistics. For a Gaussian probe v, X = ‖vᵀJ‖²/(nd) = Σ_i λ_i z_i²/(nd) with λ_i the eigenvalues of
M = J Jᵀ (squared singular values of J) and z_i i.i.d. N(0, 1). Its cumulants are κ_r = 2^{r−1}(r−1)! Σλ^r/(nd)^r,
so E X = Σλ/(nd) = 𝒥, Var X = 2Σλ²/(nd)² and the kurtosis is k = 3 + 12Σλ⁴/(Σλ²)². The sample variance s² of P
i.i.d. draws has Var s² = σ⁴(2/(P−1) + (k−3)/P), so by the delta method the relative standard deviation of
s (and of the reported SE = s/√P) is r(P) = ½√(2/(P−1) + (k−3)/P). Two independent estimates with P and 4P probes
have SE ratio 2·s_P/s_4P, i.e. 2 up to a relative standard deviation √(r(P)² + r(4P)²). Tolerances are Z times
these (tests/helpers.py); nothing is tuned to a run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sigprop.apjn.hutchinson import (
    apjn_pair,
    backward_apjn,
    exact_apjn,
    exact_backward_apjn,
    exact_forward_apjn,
    forward_apjn,
    jvp_norms,
    measure_apjn,
    run_blocks,
    vjp_norms,
)
from sigprop.apjn.inputs import equiangular_tokens
from sigprop.model import Transformer
from sigprop.model.vit import vit_config
from tests.helpers import Z

B, D, HEADS = 3, 16, 2  # 3 blocks, width 16, n = (8/2)² = 16 tokens: nd = 256, exact Jacobians are cheap
NORMS = {"preln": dict(norm="layernorm"), "derf": dict(norm="derf", alpha=1.0)}


def config(norm="preln", **kw):
    return vit_config(B, D, HEADS, image_size=8, patch_size=2, sigma_ov=1.2, sigma_21=1.5, **{**NORMS[norm], **kw})


def model(norm="preln", seed=0, **kw):
    return Transformer(config(norm, **kw), generator=torch.Generator().manual_seed(seed)).double()


def tokens(seed=1):
    return equiangular_tokens(16, D, 1.0, 0.2, generator=torch.Generator().manual_seed(seed))


def gen(seed):
    return torch.Generator().manual_seed(seed)


def jacobian(m, h, b, b_out=B, output="block") -> torch.Tensor:
    """∂h^{b_out}/∂h^b as an (nd) × (nd) matrix, from h^0 = h (written here with torch.func, independently)."""
    with torch.no_grad():
        hb = run_blocks(m, h, 0, b)
    j = torch.func.jacrev(lambda z: run_blocks(m, z, b, b_out, output))(hb).detach()
    n, d = h.shape
    return j.reshape(n * d, n * d)


def probe_stats(j: torch.Tensor) -> tuple[float, float, float]:
    """(𝒥, σ of one Gaussian-probe sample, kurtosis) of X = ‖vᵀJ‖²/(nd) (module docstring)."""
    nd = j.shape[0]
    lam = torch.linalg.eigvalsh(j @ j.T).clamp_min(0.0).numpy()
    s2, s4 = float((lam**2).sum()), float((lam**4).sum())
    return float(lam.sum()) / nd, math.sqrt(2.0 * s2) / nd, 3.0 + 12.0 * s4 / s2**2


def rel_sd_of_se(p: int, kurt: float) -> float:
    """Relative standard deviation of s (and of s/√P) from P i.i.d. samples of kurtosis ``kurt``."""
    return 0.5 * math.sqrt(2.0 / (p - 1) + (kurt - 3.0) / p)


# ----------------------------------------------------------------------------------------------------------------
# exact reference
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("norm", list(NORMS))
def test_exact_paths_agree_and_identity(norm):
    m, h = model(norm), tokens()
    back = exact_backward_apjn(m, h)
    assert back[-1] == pytest.approx(1.0, rel=1e-12)  # J^{B,B} = I
    for b in range(B + 1):
        j = jacobian(m, h, b)
        assert back[b] == pytest.approx(float(j.pow(2).sum()) / j.shape[0], rel=1e-12)
        assert exact_apjn(m, h, b, method="jacfwd") == pytest.approx(back[b], rel=1e-10)
    fwd = exact_forward_apjn(m, h)
    assert fwd[0] == pytest.approx(1.0, rel=1e-12) and fwd[-1] == pytest.approx(back[0], rel=1e-12)


# ----------------------------------------------------------------------------------------------------------------
# Hutchinson against exact, within Z × its reported SE
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("norm", list(NORMS))
@pytest.mark.parametrize("output", ["block", "final_norm"])
def test_backward_hutchinson_agrees_with_exact(norm, output):
    m, h = model(norm), tokens()
    exact = exact_backward_apjn(m, h, output=output)
    est = backward_apjn(m, h, probes=400, generator=gen(11), output=output, chunk=128)
    assert est.blocks.tolist() == list(range(B + 1)) and est.samples.shape == (400, B + 1)
    for b in range(B + 1):
        assert abs(est.mean[b] - exact[b]) <= Z * est.se[b], f"b={b}: {est.mean[b]} ± {est.se[b]} vs {exact[b]}"


@pytest.mark.parametrize("norm", list(NORMS))
def test_forward_hutchinson_agrees_with_exact(norm):
    m, h = model(norm), tokens()
    exact = exact_forward_apjn(m, h)
    est = forward_apjn(m, h, probes=400, generator=gen(12), chunk=200)
    for b in range(B + 1):
        assert abs(est.mean[b] - exact[b]) <= Z * est.se[b], f"b={b}: {est.mean[b]} ± {est.se[b]} vs {exact[b]}"


@pytest.mark.parametrize("mode", ["backward", "forward"])
def test_pair_agrees_with_exact(mode):
    m, h = model("derf"), tokens()
    exact = exact_apjn(m, h, 1, 2)
    est, se = apjn_pair(m, h, 1, 2, probes=400, generator=gen(13), mode=mode)
    assert abs(est - exact) <= Z * se
    # the same pair from h^1 given directly
    with torch.no_grad():
        h1 = run_blocks(m, h, 0, 1)
    assert exact_apjn(m, h1, 1, 2, h_is_input=False) == pytest.approx(exact, rel=1e-12)


def test_reported_se_matches_exact_probe_variance():
    m, h = model("derf"), tokens()
    mu, sigma, kurt = probe_stats(jacobian(m, h, 0))
    p = 1000
    est = backward_apjn(m, h, probes=p, generator=gen(14), blocks=[0], chunk=250)
    assert mu == pytest.approx(exact_apjn(m, h, 0), rel=1e-10)  # Σλ/(nd) = ‖J‖²_F/(nd)
    assert abs(est.mean[0] - mu) <= Z * est.se[0]
    assert abs(est.se[0] * math.sqrt(p) / sigma - 1.0) <= Z * rel_sd_of_se(p, kurt)


@pytest.mark.parametrize("estimator", ["backward", "forward"])
def test_se_shrinks_as_inverse_sqrt_probes(estimator):
    m, h = model("preln"), tokens()
    _, _, kurt = probe_stats(jacobian(m, h, 0))
    fn = backward_apjn if estimator == "backward" else forward_apjn
    blocks = [0] if estimator == "backward" else [B]  # J^{B,0} either way
    p = 1000
    small = fn(m, h, probes=p, generator=gen(15), blocks=blocks, chunk=500)
    large = fn(m, h, probes=4 * p, generator=gen(16), blocks=blocks, chunk=500)
    ratio = small.se[0] / large.se[0]
    tol = Z * math.sqrt(rel_sd_of_se(p, kurt) ** 2 + rel_sd_of_se(4 * p, kurt) ** 2)
    assert abs(ratio / 2.0 - 1.0) <= tol, f"SE ratio {ratio:.3f}, expected 2 within ±{2 * tol:.3f}"


# ----------------------------------------------------------------------------------------------------------------
# one VJP for all blocks == one computation per block, for the same probe
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("norm", list(NORMS))
@pytest.mark.parametrize("output", ["block", "final_norm"])
def test_one_vjp_equals_per_block_computation(norm, output):
    m, h = model(norm), tokens()
    v = torch.randn(3, *h.shape, dtype=torch.float64, generator=gen(17))
    together = vjp_norms(m, h, v, output=output)
    n, d = h.shape
    for b in range(B + 1):
        with torch.no_grad():
            hb = run_blocks(m, h, 0, b)
        x = hb.expand(3, n, d).clone().requires_grad_(True)
        g, = torch.autograd.grad(run_blocks(m, x, b, B, output), x, grad_outputs=v)
        separate = g.pow(2).sum(dim=(-2, -1)).numpy() / (n * d)
        np.testing.assert_allclose(together[:, b], separate, rtol=1e-13, atol=0)
        # and against the exact Jacobian: ‖vᵀJ‖² with J from torch.func
        j = jacobian(m, h, b, output=output)
        exact = (v.reshape(3, -1) @ j).pow(2).sum(dim=-1).numpy() / (n * d)
        np.testing.assert_allclose(together[:, b], exact, rtol=1e-10)


def test_jvp_norms_equal_exact_jacobian_products():
    m, h = model("derf"), tokens()
    u = torch.randn(3, *h.shape, dtype=torch.float64, generator=gen(18))
    got = jvp_norms(m, h, u)
    n, d = h.shape
    for b in range(B + 1):
        j = jacobian(m, h, 0, b)
        exact = (u.reshape(3, -1) @ j.T).pow(2).sum(dim=-1).numpy() / (n * d)
        np.testing.assert_allclose(got[:, b], exact, rtol=1e-10)


def test_rademacher_identity_block_is_exactly_one():
    m, h = model("preln"), tokens()
    est = backward_apjn(m, h, probes=4, generator=gen(19), distribution="rademacher")
    assert np.all(est.samples[:, -1] == 1.0) and est.se[-1] == 0.0


def test_chunking_does_not_change_the_estimate():
    m, h = model("derf"), tokens()
    a = backward_apjn(m, h, probes=6, generator=gen(20))
    b = backward_apjn(m, h, probes=6, generator=gen(20), chunk=4)
    np.testing.assert_allclose(a.samples, b.samples, rtol=1e-12)


# ----------------------------------------------------------------------------------------------------------------
# averaging over initialisations
# ----------------------------------------------------------------------------------------------------------------

def test_measure_apjn_per_seed_models_and_aggregation():
    c = config("derf")
    h = tokens()
    meas = measure_apjn(c, h, seeds=(3, 4), probes=5, dtype=torch.float64, blocks=[0, 2])
    assert meas.per_seed_mean.shape == (2, 2) and meas.blocks.tolist() == [0, 2]
    for i, seed in enumerate((3, 4)):
        m = Transformer(c, generator=gen(seed)).double()
        est = backward_apjn(m, h, 5, gen(seed + 2**31), blocks=[0, 2])
        np.testing.assert_allclose(meas.per_seed_mean[i], est.mean, rtol=1e-12)
        np.testing.assert_allclose(meas.per_seed_se[i], est.se, rtol=1e-12)
    np.testing.assert_allclose(meas.mean, meas.per_seed_mean.mean(axis=0), rtol=1e-15)
    np.testing.assert_allclose(meas.se, meas.per_seed_mean.std(axis=0, ddof=1) / math.sqrt(2), rtol=1e-15)
    assert meas.seconds.shape == (2,) and np.all(meas.seconds > 0)
    assert meas.at(2) == (meas.mean[1], meas.se[1])
    one = measure_apjn(c, h, seeds=(3,), probes=5, dtype=torch.float64, blocks=[0, 2])
    np.testing.assert_allclose(one.se, one.per_seed_se[0], rtol=0)  # one seed: the probe SE


def test_measure_apjn_forward_and_callable_input():
    c = config("preln")
    calls = []

    def embed(m):
        calls.append(m)
        return tokens().to(next(m.parameters()).dtype)

    meas = measure_apjn(c, embed, seeds=(5,), probes=4, kind="forward", reference=1, dtype=torch.float64)
    assert len(calls) == 1 and meas.blocks.tolist() == list(range(1, B + 1)) and meas.reference == 1
    m = Transformer(c, generator=gen(5)).double()
    with torch.no_grad():
        h1 = run_blocks(m, tokens(), 0, 1)
    est = forward_apjn(m, h1, 4, gen(5 + 2**31), start=1)
    np.testing.assert_allclose(meas.mean, est.mean, rtol=1e-12)


# ----------------------------------------------------------------------------------------------------------------
# running blocks, modes and errors
# ----------------------------------------------------------------------------------------------------------------

def test_run_blocks_is_the_models_forward():
    m = model("derf")
    images = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    h0 = m.embed(images)
    torch.testing.assert_close(run_blocks(m, h0), m.hidden_states(images), rtol=1e-14, atol=0)
    torch.testing.assert_close(run_blocks(m, h0, output="final_norm"), m.final_norm(m.hidden_states(images)),
                               rtol=1e-14, atol=0)
    mid = run_blocks(m, h0, 0, 2)
    torch.testing.assert_close(run_blocks(m, mid, 2, B), run_blocks(m, h0), rtol=1e-14, atol=0)


def test_dropout_off_and_state_restored():
    m = model("preln", dropout=0.5, attn_dropout=0.5)
    m.train()
    flags = [p.requires_grad for p in m.parameters()]
    h = tokens()
    a = backward_apjn(m, h, probes=3, generator=gen(21))
    b = backward_apjn(m, h, probes=3, generator=gen(21))
    np.testing.assert_array_equal(a.samples, b.samples)  # eval mode: no dropout noise
    assert m.training and [p.requires_grad for p in m.parameters()] == flags
    first = next(m.children())
    first.eval()  # a submodule the owner left in eval mode stays so
    modes = [x.training for x in m.modules()]
    backward_apjn(m, h, probes=3, generator=gen(21))
    assert [x.training for x in m.modules()] == modes


def test_errors():
    m, h = model("preln"), tokens()
    with pytest.raises(ValueError, match="probes"):
        backward_apjn(m, h, probes=1)
    with pytest.raises(ValueError, match="shape"):
        backward_apjn(m, h[None], probes=2)
    with pytest.raises(ValueError, match="d_model"):
        backward_apjn(m, h[:, :8], probes=2)
    with pytest.raises(ValueError, match="stop"):
        backward_apjn(m, h, probes=2, stop=B + 1)
    with pytest.raises(ValueError, match="final_norm"):
        backward_apjn(m, h, probes=2, stop=2, output="final_norm")
    with pytest.raises(ValueError, match="output"):
        backward_apjn(m, h, probes=2, output="logits")
    with pytest.raises(ValueError, match="distribution"):
        backward_apjn(m, h, probes=2, distribution="uniform")
    with pytest.raises(ValueError, match="blocks"):
        backward_apjn(m, h, probes=2, blocks=[B + 1])
    with pytest.raises(ValueError, match="v must"):
        vjp_norms(m, h, torch.zeros(2, 3, 3))
    with pytest.raises(ValueError, match="mode"):
        apjn_pair(m, h, 0, 1, mode="sideways")
    with pytest.raises(ValueError, match="kind"):
        measure_apjn(config(), h, kind="sideways")
    no_final = Transformer(config(final_norm=False)).double()
    with pytest.raises(ValueError, match="final norm"):
        backward_apjn(no_final, h, probes=2, output="final_norm")
    with pytest.raises(TypeError, match="sigprop Transformer"):
        backward_apjn(torch.nn.Linear(4, 4), h, probes=2)


def test_any_models_block_stack_agrees_with_its_exact_jacobian():
    """as_block_stack: a plain torch TransformerEncoder's layers (dropout on, switched off by the measurement) are
    measured like a sigprop model's blocks; Hutchinson within Z standard errors of the exact ‖J‖²_F/(nd)."""
    from sigprop.apjn.hutchinson import as_block_stack

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True, norm_first=True)
    enc = torch.nn.TransformerEncoder(layer, 3, enable_nested_tensor=False).double()
    stack = as_block_stack(enc.layers)
    h = torch.randn(6, 16, dtype=torch.float64)
    est = backward_apjn(stack, h, probes=400, generator=torch.Generator().manual_seed(1))
    exact = exact_backward_apjn(stack, h)
    assert np.all(np.abs(est.mean[:-1] - exact[:-1]) <= Z * est.se[:-1])
    with pytest.raises(TypeError, match="non-empty sequence"):
        as_block_stack([])
