"""Tests of sigprop.measurement: the recorder's on-the-fly statistics equal those computed from the stored tensors.

The model is a stand-in built from the components (embedding → [Residual(AttentionBlock), Residual(FFNBlock)] × N →
linear head) exposing the site protocol (``sites()``) and ``loss(batch)``. References are computed in float64 from
the tensors stored in the same run (forward outputs, and ``retain_grad`` gradients) by brute force over explicit
token pairs, an implementation independent of the recorder's column-sum identity. Tolerances are the worst-case
bound of recursive summation: relative error ≤ N·eps with N the number of terms of the largest sum (B·T²·D for
the brute-force pair sum), in the dtype the sums are taken in.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sigprop.components.attention_block import AttentionBlock
from sigprop.components.embedding import Embedding
from sigprop.components.ffn import FFNBlock
from sigprop.components.residual import Residual
from sigprop.core.profile import QUANTITIES
from sigprop.core.stats import moment_sums
from sigprop.measurement.hooks import Recorder, TokenSums, masked_sums, measure, merge_sums, pool_sums


class StandIn(nn.Module):
    """A small Pre-LN encoder from the components, implementing the site protocol."""

    def __init__(self, vocab=29, d=16, n_heads=2, n_layers=3, max_len=12, lam=0.9, beta=0.6):
        super().__init__()
        self.embed = Embedding(vocab, d, max_len=max_len)
        self.layers = nn.ModuleList(
            nn.Sequential(Residual(AttentionBlock(d, n_heads), lam, beta), Residual(FFNBlock(d), lam, beta))
            for _ in range(n_layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        h = self.embed(ids)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)

    def sites(self):
        out = [(-1, "input", self.embed)]
        for i, layer in enumerate(self.layers):
            out += [(i, "attn", layer[0].branch), (i, "ffn", layer[1].branch), (i, "layer", layer)]
        return out

    def loss(self, batch):
        ids, targets, mask = batch
        logits = self(ids)
        per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        if mask is None:
            return per_token.mean()
        return (per_token * mask).sum() / mask.sum()


def make_batch(b, t, vocab=29, pad_lengths=None):
    ids = torch.randint(0, vocab, (b, t))
    targets = torch.randint(0, vocab, (b, t))
    if pad_lengths is None:
        return ids, targets, None
    mask = torch.arange(t)[None, :] < torch.tensor(pad_lengths)[:, None]
    return ids, targets, mask


class Capture:
    """Stores every site's output (and, via retain_grad, its gradient) in the same run as the recorder. Wraps the
    instance's ``forward`` as the recorder does, since sigprop's containers call their children's ``forward``."""

    def __init__(self, model):
        self.out = {}
        self.modules = [m for _, _, m in model.sites()]
        for layer, site, m in model.sites():
            m.forward = self._wrap((layer, site), m.forward)

    def _wrap(self, key, forward):
        def wrapped(*args, **kwargs):
            out = forward(*args, **kwargs)
            out.retain_grad()
            self.out.setdefault(key, []).append(out)
            return out
        return functools.update_wrapper(wrapped, forward)

    def remove(self):
        for m in self.modules:
            del m.__dict__["forward"]


def reference(x, mask=None):
    """(mean, var, corr) of x (batch, tokens, hidden) over real tokens, brute force over explicit token pairs."""
    x = x.detach().double()
    b, t, d = x.shape
    mf = torch.ones(b, t, dtype=torch.float64) if mask is None else mask.double()
    n = mf.sum() * d
    mu = (x * mf[..., None]).sum() / n
    xc = (x - mu) * mf[..., None]
    var = (xc * xc).sum() / n
    pairs = mf[:, :, None] * mf[:, None, :] * (1.0 - torch.eye(t, dtype=torch.float64))
    cov = torch.einsum("btj,bsj,bts->", xc, xc, pairs) / (d * pairs.sum())
    return float(mu), float(var), float(cov / var)


def pad_to(x, t):
    return torch.cat([x, x.new_zeros(x.shape[0], t - x.shape[1], x.shape[2])], 1) if x.shape[1] < t else x


def summation_tol(shape, dtype):
    """Worst-case relative rounding of a recursive sum of the brute-force pair sum's B·T²·D terms."""
    b, t, d = shape
    return b * t * t * d * torch.finfo(dtype).eps


def assert_row_matches(row, fwd, grad, tol):
    mu, var, corr = fwd
    assert abs(row.fwd_mean - mu) <= tol * math.sqrt(var + mu * mu), (row, fwd)
    assert abs(row.fwd_var - var) <= tol * var, (row, fwd)
    assert abs(row.fwd_corr - corr) <= tol * (1 + abs(corr)), (row, fwd)
    if grad is None:
        assert math.isnan(row.grad_var) and math.isnan(row.grad_corr)
        return
    _, gvar, gcorr = grad
    assert abs(row.grad_var - gvar) <= tol * gvar, (row, grad)
    assert abs(row.grad_corr - gcorr) <= tol * (1 + abs(gcorr)), (row, grad)


def run_recorded(model, batches, grads=True):
    """Forward + backward of every batch under one Recorder, with the tensors captured in the same run."""
    cap = Capture(model)
    try:
        with Recorder(model, grads=grads) as rec:
            for batch in batches:
                rec.set_mask(batch[2])
                model.loss(batch).backward()
    finally:
        cap.remove()
    return rec, cap


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("padded", [False, True])
def test_recorder_equals_stored_tensors(dtype, padded):
    model = StandIn().to(dtype)
    batch = make_batch(3, 8, pad_lengths=[8, 5, 2] if padded else None)
    rec, cap = run_recorded(model, [batch])
    prof = rec.profile()
    assert prof.kind == "measured"
    assert [(r.layer, r.site) for r in prof.rows] == [(layer, site) for layer, site, _ in model.sites()]
    tol = summation_tol((3, 8, 16), dtype)
    for row in prof.rows:
        (x,) = cap.out[(row.layer, row.site)]
        assert_row_matches(row, reference(x, batch[2]), reference(x.grad, batch[2]), tol)
        if not padded:  # the shared definition of sigprop.core.stats agrees too
            ms = moment_sums(x.detach().double())
            assert abs(row.fwd_corr - float(ms.corr())) <= tol * (1 + abs(row.fwd_corr))


def test_padding_is_excluded():
    """Changing the activations of padded tokens (through their ids) changes nothing at the real tokens' sites of
    the embedding, whose rows are per token; and the measured input statistics equal those of the real rows."""
    model = StandIn().double()
    ids, targets, mask = make_batch(2, 10, pad_lengths=[10, 4])
    with Recorder([(-1, "input", model.embed)], mask=mask, grads=False) as rec:
        model(ids)
        ids2 = ids.clone()
        ids2[~mask] = (ids2[~mask] + 7) % 29
        model(ids2)
    s = rec.sums[(-1, "input")].fwd
    emb = model.embed(ids).detach()
    real = torch.cat([emb[0], emb[1, :4]])  # (14, d)
    assert abs(s.mean() - float(real.mean())) <= summation_tol((2, 10, 16), torch.float64) * float(real.std())
    assert abs(s.var() - float(real.var(correction=0))) <= summation_tol((2, 10, 16), torch.float64) * s.var()


def test_masked_sums_large_mean_and_half_precision():
    """Centring keeps the sums exact when the mean dwarfs the spread; half types are summed in float32."""
    x = torch.randn(4, 9, 8, dtype=torch.float64) + 1e3
    mask = torch.rand(4, 9) < 0.7
    mask[:, :2] = True
    s = masked_sums(x, mask)
    mu, var, corr = reference(x, mask)
    tol = summation_tol(x.shape, torch.float64) * (1 + 1e3) ** 2  # rounding relative to x² ~ (μ + σ)²
    assert abs(s.var() - var) <= tol * var
    assert abs(s.corr() - corr) <= tol * (1 + abs(corr))
    xb = torch.randn(4, 9, 8).to(torch.bfloat16)
    sb = masked_sums(xb, mask)
    mu, var, corr = reference(xb, mask)  # of the bf16 values themselves
    tol = summation_tol(xb.shape, torch.float32)
    assert abs(sb.var() - var) <= tol * var
    assert abs(sb.corr() - corr) <= tol * (1 + abs(corr))


def test_non_finite_values_at_padded_positions_enter_no_sum():
    """A padded position may hold anything, NaN or inf included (a query whose keys are all masked): the statistics
    are those of the real tokens, also when the first sequence (whose real tokens give the centre) is padded."""
    x = torch.randn(3, 7, 8, dtype=torch.float64)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[0, 5:] = False
    mask[2, 3:] = False
    clean = masked_sums(x, mask)
    x[0, 6] = float("nan")
    x[2, 4] = float("inf")
    dirty = masked_sums(x, mask)
    for a, b in zip(dirty.statistics(), clean.statistics(), strict=True):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("flush_every_record", [False, True])
def test_accumulation_over_batches_and_seeds_equals_pooled(flush_every_record, monkeypatch):
    """Two batches of different lengths (one padded) in one recorder, and two recorders / sums dicts of two model
    seeds, equal the statistics of the concatenated tensors (pairs never cross sequences, so pooling =
    concatenating along the batch, with the shorter batch padded). Hook records are finished in batches: once
    all together (records of both shapes and masks in one batch) and once each on its own."""
    if flush_every_record:
        monkeypatch.setattr("sigprop.measurement.hooks._FLUSH_ELEMENTS", 1)
    b1 = make_batch(3, 8, pad_lengths=[8, 6, 3])
    b2 = make_batch(2, 6)
    b2 = (*b2[:2], torch.ones(2, 6, dtype=torch.bool))
    model = StandIn().double()
    rec, cap = run_recorded(model, [b1, b2])
    mask = torch.cat([b1[2], pad_to(b2[2][..., None].double(), 8)[..., 0].bool()])
    tol = summation_tol((5, 8, 16), torch.float64)

    def ref(outs, which, m):
        ts = [pad_to(o if which == "fwd" else o.grad, 8) for o in outs]
        return reference(torch.cat(ts), m)

    for row in rec.profile().rows:
        outs = cap.out[(row.layer, row.site)]
        assert_row_matches(row, ref(outs, "fwd", mask), ref(outs, "grad", mask), tol)

    torch.manual_seed(1)
    model2 = StandIn().double()
    rec2, cap2 = run_recorded(model2, [b1])
    pooled = (rec + rec2).profile()
    via_dicts = merge_sums(rec.sums, rec2.sums)
    mask3 = torch.cat([mask, b1[2]])
    for row in pooled.rows:
        key = (row.layer, row.site)
        outs = cap.out[key] + cap2.out[key]
        assert_row_matches(row, ref(outs, "fwd", mask3), ref(outs, "grad", mask3), summation_tol((8, 8, 16),
                                                                                                 torch.float64))
        direct = pool_sums([via_dicts[key].fwd])
        assert abs(direct.var() - row.fwd_var) <= summation_tol((8, 8, 16), torch.float64) * row.fwd_var


def test_hooks_removed_on_exit_and_on_exception():
    model = StandIn()
    batch = make_batch(2, 5)
    modules = [m for _, _, m in model.sites()]
    with Recorder(model) as rec:
        assert all(len(m._forward_hooks) == 1 for m in modules)
        loss = model.loss(batch)  # backward after exit: its tensor hooks were removed too
    assert all(len(m._forward_hooks) == 0 for m in modules)
    loss.backward()
    model.loss(batch)
    assert rec.n_passes == (1, 0)
    with pytest.raises(RuntimeError, match="boom"), Recorder(model):
        model.loss(batch)
        raise RuntimeError("boom")
    assert all(len(m._forward_hooks) == 0 for m in modules)


def test_no_gradient_gives_nan_grad_stats():
    model = StandIn()
    batch = make_batch(2, 5)
    with Recorder(model) as rec, torch.no_grad():
        model.loss(batch)
    with Recorder(model, grads=False) as rec2:
        model.loss(batch).backward()
    for prof in (rec.profile(), rec2.profile()):
        for row in prof.rows:
            assert all(math.isfinite(getattr(row, q)) for q in ("fwd_mean", "fwd_var", "fwd_corr"))
            assert math.isnan(row.grad_var) and math.isnan(row.grad_corr)


def test_hooks_change_neither_outputs_nor_gradients():
    model = StandIn()
    batch = make_batch(3, 7, pad_lengths=[7, 7, 3])

    def run(record):
        model.zero_grad(set_to_none=True)
        if record:
            with Recorder(model, mask=batch[2]):
                loss = model.loss(batch)
                loss.backward()
        else:
            loss = model.loss(batch)
            loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    loss0, g0 = run(False)
    loss1, g1 = run(True)
    assert torch.equal(loss0, loss1)
    assert all(torch.equal(a, b) for a, b in zip(g0, g1, strict=True))


def test_measure_equals_recorder_and_leaves_grads_alone():
    model = StandIn().double()
    batch = make_batch(3, 8, pad_lengths=[8, 8, 5])
    rec, _ = run_recorded(model, [batch])
    model.zero_grad(set_to_none=True)
    prof = measure(model, batch, mask=batch[2], n_repeats=2)
    assert all(p.grad is None for p in model.parameters())
    assert prof.meta["forward_passes"] == 2 and prof.meta["gradient_passes"] == 2
    tol = summation_tol((3, 8, 16), torch.float64)
    ref = rec.profile().lookup()
    for row in prof.rows:
        r = ref[(row.layer, row.site)]
        for q in QUANTITIES:  # the same pass twice pools to the same statistics
            assert abs(getattr(row, q) - getattr(r, q)) <= tol * (abs(getattr(r, q)) + math.sqrt(r.fwd_var)), q
    custom = measure(model, batch, loss_fn=lambda m, b: m(b[0])[..., 0].sum(), sites=model.sites()[:2])
    assert [(r.layer, r.site) for r in custom.rows] == [(-1, "input"), (0, "attn")]


def test_bad_input_raises():
    model = StandIn()
    with pytest.raises(ValueError, match="at most once"):
        Recorder([(0, "layer", model.embed), (1, "layer", model.embed)])
    with pytest.raises(ValueError, match="mask"):
        Recorder(model, mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match="mask has shape"), Recorder(model, mask=torch.ones(2, 4, dtype=torch.bool)):
        model(torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="n_repeats"):
        measure(model, make_batch(2, 5), n_repeats=0)
    with pytest.raises(ValueError, match="shape"):
        TokenSums(torch.zeros(3))


def test_per_site_masks_and_batch_dict_masks():
    """A mapping {(layer, site): mask} masks only those sites; measure() reads ``padding_mask`` from a batch dict."""
    model = StandIn().double()
    ids, targets, mask = make_batch(3, 8, pad_lengths=[8, 6, 3])
    cap = Capture(model)
    try:
        with Recorder(model, mask={(-1, "input"): mask}, grads=False) as rec:
            model(ids)
    finally:
        cap.remove()
    tol = summation_tol((3, 8, 16), torch.float64)
    for row in rec.profile().rows:
        (x,) = cap.out[(row.layer, row.site)]
        assert_row_matches(row, reference(x, mask if row.layer == -1 else None), None, tol)

    def loss_fn(m, b):
        return m.loss((b["ids"], b["targets"], b["padding_mask"]))

    auto = measure(model, {"ids": ids, "targets": targets, "padding_mask": mask}, loss_fn=loss_fn)
    explicit = measure(model, (ids, targets, mask), mask=mask)
    for a, e in zip(auto.rows, explicit.rows, strict=True):
        for q in QUANTITIES:
            assert abs(getattr(a, q) - getattr(e, q)) <= tol * (abs(getattr(e, q)) + math.sqrt(e.fwd_var)), q


def test_sigprop_transformer_every_site_reached():
    """Integration with sigprop's Transformer (site protocol, batch dicts, encoder–decoder masks): every site gets
    finite forward and gradient statistics."""
    model_mod = pytest.importorskip("sigprop.model")
    cfg = model_mod.TransformerConfig(arch="encoder_decoder", n_layers=2, d_model=16, n_heads=2, vocab_size=40,
                                      max_len=8, seq_len=8, dropout=0.0)
    model = model_mod.Transformer(cfg)
    mask = torch.arange(8)[None, :] < torch.tensor([8, 5])[:, None]
    batch = model_mod.make_batch(cfg, torch.randint(2, 40, (2, 8)), padding_mask=mask)
    prof = measure(model, batch)
    assert "sites_not_reached" not in prof.meta and prof.meta["padding_excluded"]
    assert [(r.layer, r.site) for r in prof.rows] == [(layer, site) for layer, site, _ in model.sites()]
    for row in prof.rows:
        assert all(math.isfinite(getattr(row, q)) for q in QUANTITIES), row


def test_recorder_takes_its_model_and_collects_outputs_through_its_constructor():
    """A recorder of a site list reports the config of the ``model`` it is given; with ``collect_outputs`` it hands
    over every site output that requires grad, once, and a gradient taken with respect to them is recorded."""
    model = StandIn().double()
    model.config = {"d_model": 16}
    ids, targets, _ = make_batch(2, 6)
    plain = Recorder(model.sites())
    assert plain.take_outputs() == [] and plain.profile().config == {}
    with Recorder(model.sites(), model=model, collect_outputs=True) as rec:
        loss = model.loss((ids, targets, None))
        outs = rec.take_outputs()
        assert len(outs) == len(model.sites()) and rec.take_outputs() == []
        torch.autograd.grad(loss, outs)
    assert rec.take_outputs() == []
    profile = rec.profile()
    assert profile.config == {"d_model": 16}
    assert all(math.isfinite(r.grad_var) for r in profile.rows)
