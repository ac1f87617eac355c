"""Patch (ViT) models end to end: their image batches, the input correlation DSLM starts from, the mean-pooled
classifier's gradient at the top, and what the theory refuses (Kedia et al. App. H)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sigprop.analysis.experiment import config_batch
from sigprop.core.moments import Moments
from sigprop.model import TransformerConfig
from sigprop.model.batches import image_batch
from sigprop.model.transformer import Transformer
from sigprop.theory.boundaries import patch_input_correlation, pooled_head_gradient_moments
from sigprop.theory.predict import predict
from tests.helpers import Z

VIT = dict(input="patches", image_size=16, patch_size=4, seq_len=16, n_layers=2, d_model=32, n_heads=2)


def test_image_batches():
    c = TransformerConfig(**VIT)
    b = image_batch(c, batch_size=5, seed=3)
    assert b.inputs.shape == (5, 1, 16, 16) and b.labels.shape == (5,)
    assert b.inputs.min() >= 0 and int(b.labels.min()) >= 0 and int(b.labels.max()) <= 9
    assert torch.equal(image_batch(c, 5, seed=3).inputs, b.inputs)  # reproducible
    s = image_batch(TransformerConfig(**{**VIT, "channels": 3, "n_classes": 4}), 6, synthetic=True)
    assert s.inputs.shape == (6, 3, 16, 16) and int(s.labels.max()) < 4
    with pytest.raises(ValueError, match="n_classes >= 10"):
        image_batch(TransformerConfig(**{**VIT, "n_classes": 4}), 2)
    with pytest.raises(ValueError, match="takes tokens"):
        image_batch(TransformerConfig(n_layers=1, d_model=32, n_heads=2), 2)
    with pytest.raises(ValueError, match="image data not found"):
        config_batch(c, 2, data="somewhere")
    with pytest.raises(ValueError, match="exclude each other"):
        config_batch(c, 2, data="somewhere", synthetic=True)


def test_your_own_images(tmp_path):
    """A folder of images (subfolders as classes) as a patch model's batch, through config_batch and predict."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        (tmp_path / cls).mkdir()
        for i in range(3):
            pixels = rng.integers(0, 256, size=(20, 20), dtype=np.uint8)
            Image.fromarray(pixels, mode="L").save(tmp_path / cls / f"{i}.png")
    c = TransformerConfig(**{**VIT, "init": "dslm"})
    filled, batch = config_batch(c, batch_size=4, data=tmp_path)
    assert batch.inputs.shape == (4, 1, 16, 16) and set(batch.labels.tolist()) <= {0, 1}
    assert filled.input_corr == patch_input_correlation(c, batch.inputs)
    profile = predict(filled, images=batch.inputs, labels=batch.labels)
    assert all(math.isfinite(r.fwd_var) and math.isfinite(r.grad_var) for r in profile.rows)


def test_dslm_patch_model_takes_its_input_correlation_from_the_images():
    c = TransformerConfig(**{**VIT, "init": "dslm"})
    with pytest.raises(ValueError, match="patch_input_correlation"):
        Transformer(c, sample=False)
    filled, batch = config_batch(c, batch_size=4)
    r = patch_input_correlation(c, batch.inputs)
    assert filled.input_corr == r and 0.0 < r < 1.0
    assert filled.to_dict() == {**c.to_dict(), "input_corr": r}
    same, _ = config_batch(filled, batch_size=4)  # a given input_corr is kept
    assert same == filled
    xavier = TransformerConfig(**VIT)
    assert config_batch(xavier, batch_size=4)[0] == xavier


def test_pooled_head_gradient_against_autograd():
    """The gradient at the last layer's output of cross-entropy on the mean-pooled, final-normed tokens, over draws
    of the head and of Gaussian hidden states with the given moments: per-element variance, and correlation 1
    between the tokens of an image (up to the final LayerNorm's backward, whose rule maps it)."""
    c = TransformerConfig(**{**VIT, "n_classes": 10, "d_model": 64})
    model = Transformer(c, generator=torch.Generator().manual_seed(0))
    B, L, d = 4, c.seq_len, c.d_model
    var, r = 1.7, 0.6
    rule, _ = pooled_head_gradient_moments(model, Moments(mean=0.0, var=var, corr=r), n_images=B)
    gen = torch.Generator().manual_seed(1)
    sq, cross = [], []
    std = model.plan.std("head")
    for _ in range(3000):
        with torch.no_grad():
            model.head.weight.normal_(0.0, std, generator=gen)
        h = (math.sqrt(r * var) * torch.randn(B, 1, d, generator=gen)
             + math.sqrt((1 - r) * var) * torch.randn(B, L, d, generator=gen)).double().requires_grad_(True)
        normed = model.final_norm.double()(h) if model.final_norm is not None else h
        logits = (normed * float(model.head_scale)).mean(1) @ model.head.weight.double().T
        labels = torch.randint(10, (B,), generator=gen)
        (g,) = torch.autograd.grad(F.cross_entropy(logits, labels), h)
        sq.append(float(g.pow(2).mean()))
        col = g.sum(1)
        cross.append(float(((col * col).sum() - g.pow(2).sum()) / (B * L * (L - 1) * d)))
    sq, cross = np.array(sq), np.array(cross)
    n = len(sq)
    assert abs(sq.mean() - rule.var) <= Z * sq.std() / math.sqrt(n), (sq.mean(), rule.var)
    assert abs(cross.mean() - rule.corr * rule.var) <= Z * cross.std() / math.sqrt(n), (cross.mean() / sq.mean(),
                                                                                       rule.corr)


def test_patch_model_sweeps_and_what_the_theory_refuses():
    c = TransformerConfig(**VIT)
    with pytest.raises(ValueError, match="pass images="):
        predict(c)
    batch = image_batch(c, 2)
    resolved = predict(c, images=batch.inputs, labels=batch.labels)
    assert resolved.meta["backward_state"].startswith("token-resolved: each image's")
    exchangeable = predict(c, images=batch.inputs, labels=batch.labels, token_resolved=False)
    assert exchangeable.meta["forward_state"].startswith("exchangeable")
    # the two states start from the same images: the same input variance, and the same token correlation pooled
    inp_r, inp_e = resolved.lookup()[(-1, "input")], exchangeable.lookup()[(-1, "input")]
    assert inp_r.fwd_var == pytest.approx(inp_e.fwd_var, rel=1e-12)
    assert inp_r.fwd_corr == pytest.approx(inp_e.fwd_corr, rel=1e-9)
    with pytest.raises(ValueError, match="one class per image"):
        predict(c, images=batch.inputs, labels=torch.zeros(2, 16, dtype=torch.long))


def test_pooled_head_gradient_gram_is_the_exchangeable_rule_token_by_token():
    """On a top Gram with one variance and one correlation for every pair, the token-resolved boundary pooled is
    the exchangeable one (the same pooled head and final norm, pair by pair)."""
    from sigprop.theory.boundaries import pooled_head_gradient_gram
    from sigprop.theory.resolved import gram_moments

    c = TransformerConfig(**{**VIT, "d_model": 64})
    model = Transformer(c, sample=False)
    var, r, B, L = 1.3, 0.45, 3, c.seq_len
    top = var * ((1 - r) * torch.eye(L, dtype=torch.float64) + r * torch.ones(L, L, dtype=torch.float64))
    gram = pooled_head_gradient_gram(model, top.expand(B, L, L).clone())
    pooled = gram_moments(gram)
    rule, _ = pooled_head_gradient_moments(model, Moments(mean=0.0, var=var, corr=r), n_images=B)
    assert pooled.var == pytest.approx(float(rule.var), rel=1e-9)
    assert pooled.corr == pytest.approx(float(rule.corr), rel=1e-9, abs=1e-12)


def test_cls_head_gradient_gram_against_autograd():
    """A [CLS]-token classifier (``pool="cls"``): by autograd over draws of the head and of Gaussian hidden states
    with a given token Gram, the gradient at the last layer's output lives on token 0 only, with the variance of
    :func:`~sigprop.theory.boundaries.pooled_head_gradient_gram`'s entry (0, 0), through the final LayerNorm."""
    from sigprop.theory.boundaries import pooled_head_gradient_gram

    c = TransformerConfig(**{**VIT, "n_classes": 10, "d_model": 64, "pool": "cls", "seq_len": 17})
    model = Transformer(c, generator=torch.Generator().manual_seed(0))
    B, L, d = 4, c.seq_len, c.d_model
    var, r = 1.7, 0.6
    top = var * ((1 - r) * torch.eye(L, dtype=torch.float64) + r * torch.ones(L, L, dtype=torch.float64))
    top[:, 0] = top[0, :] = 0.0
    top[0, 0] = 0.9  # the [CLS] token apart from the patches, as the embedding makes it
    rule = pooled_head_gradient_gram(model, top.expand(B, L, L).clone())
    assert bool((rule[:, 1:, :] == 0).all() and (rule[:, :, 1:] == 0).all())
    root = torch.linalg.cholesky(top + 1e-12 * torch.eye(L, dtype=torch.float64))
    gen = torch.Generator().manual_seed(1)
    std, sq, rest = model.plan.std("head"), [], []
    for _ in range(3000):
        with torch.no_grad():
            model.head.weight.normal_(0.0, std, generator=gen)
        h = (root @ torch.randn(B, L, d, generator=gen, dtype=torch.float64)).requires_grad_(True)
        logits = model.final_norm.double()(h)[:, 0] * float(model.head_scale) @ model.head.weight.double().T
        (g,) = torch.autograd.grad(F.cross_entropy(logits, torch.randint(10, (B,), generator=gen)), h)
        sq.append(float(g[:, 0].pow(2).mean()))
        rest.append(float(g[:, 1:].abs().max()))
    sq = np.array(sq)
    assert max(rest) == 0.0
    assert abs(sq.mean() - float(rule[:, 0, 0].mean())) <= Z * sq.std() / math.sqrt(len(sq)), (sq.mean(), rule[0, 0, 0])


def test_cls_pooling_needs_patches_and_counts_its_token():
    with pytest.raises(ValueError, match="pool='cls' applies to patch input"):
        TransformerConfig(pool="cls")
    with pytest.raises(ValueError, match=r"plus the \[CLS\] token \(17 = "):
        TransformerConfig(**{**VIT, "pool": "cls"})
    model = Transformer(TransformerConfig(**{**VIT, "pool": "cls", "seq_len": 17}))
    images = torch.randn(2, 1, 16, 16)
    assert model.embed(images).shape == (2, 17, VIT["d_model"]) and model(images).shape == (2, 10)
    gram = model.embed.gram(images)
    assert bool((gram[:, 0, 1:] == 0).all())
    assert float(gram[0, 0, 0]) == pytest.approx(model.embed.cls_std**2 + model.embed.position_std**2)
