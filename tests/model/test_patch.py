"""Patch embedding (sigprop.components.patch): patchify's ordering, the embedding's forward, its errors."""

import math

import numpy as np
import pytest
import torch

from sigprop.components.patch import PatchEmbedding, patchify
from tests.helpers import Z


def test_patchify_hand_example_one_channel():
    # 4×4 image with pixel (i, j) = 4i + j, patch 2: patches in row-major order, each flattened row-major
    img = torch.arange(16.0).reshape(1, 1, 4, 4)
    expected = torch.tensor([[0, 1, 4, 5],        # top-left
                             [2, 3, 6, 7],        # top-right
                             [8, 9, 12, 13],      # bottom-left
                             [10, 11, 14, 15]],   # bottom-right
                            dtype=torch.float32)
    out = patchify(img, 2)
    assert out.shape == (1, 4, 4)
    assert torch.equal(out[0], expected)


def test_patchify_channels_flattened_as_c_p_p():
    # two channels: channel 1 = channel 0 + 16; each patch is (channel 0's P×P, then channel 1's)
    img = torch.arange(32.0).reshape(1, 2, 4, 4)
    out = patchify(img, 2)
    assert out.shape == (1, 4, 8)
    assert out[0, 0].tolist() == [0, 1, 4, 5, 16, 17, 20, 21]
    assert out[0, 3].tolist() == [10, 11, 14, 15, 26, 27, 30, 31]


def test_patchify_against_a_loop():
    b, c, h, w, p = 2, 3, 6, 9, 3
    img = torch.randn(b, c, h, w)
    out = patchify(img, p)
    assert out.shape == (b, (h // p) * (w // p), c * p * p)
    k = 0
    for i in range(h // p):
        for j in range(w // p):
            assert torch.equal(out[:, k], img[:, :, i * p:(i + 1) * p, j * p:(j + 1) * p].reshape(b, -1))
            k += 1


def test_patchify_shape_errors():
    with pytest.raises(ValueError, match="shape"):
        patchify(torch.zeros(1, 4, 4), 2)
    with pytest.raises(ValueError, match="patch_size"):
        patchify(torch.zeros(1, 1, 4, 6), 4)
    with pytest.raises(ValueError, match="patch_size"):
        patchify(torch.zeros(1, 1, 5, 4), 2)


def test_patch_embedding_forward():
    emb = PatchEmbedding(image_size=4, patch_size=2, channels=2, d_model=8)
    assert emb.n_patches == 4
    assert emb.proj.weight.shape == (8, 8) and emb.position.weight.shape == (4, 8)
    img = torch.randn(3, 2, 4, 4)
    expected = patchify(img, 2) @ emb.proj.weight.T + emb.proj.bias + emb.position.weight
    torch.testing.assert_close(emb(img), expected)
    assert torch.all(emb.proj.bias == 0)


def test_patch_embedding_errors():
    with pytest.raises(ValueError, match="divisible"):
        PatchEmbedding(image_size=6, patch_size=4, channels=1, d_model=8)
    with pytest.raises(ValueError, match="channels"):
        PatchEmbedding(image_size=4, patch_size=2, channels=0, d_model=8)
    emb = PatchEmbedding(image_size=4, patch_size=2, channels=1, d_model=8)
    with pytest.raises(ValueError, match="expected images"):
        emb(torch.zeros(1, 2, 4, 4))
    with pytest.raises(ValueError, match="expected images"):
        emb(torch.zeros(1, 1, 4, 6))


def test_patch_embedding_default_init_and_measured_moments():
    # standalone construction samples N(0, std²): root mean square within Z·σ/√(2n), mean within Z·σ/√n
    emb = PatchEmbedding(image_size=16, patch_size=4, channels=3, d_model=64, patch_std=0.1, position_std=0.2)
    for w, std in ((emb.proj.weight, 0.1), (emb.position.weight, 0.2)):
        x = w.detach().double().reshape(-1)
        assert abs(float(x.pow(2).mean().sqrt()) - std) <= Z * std / math.sqrt(2 * x.numel())
        assert abs(float(x.mean())) <= Z * std / math.sqrt(x.numel())
    # measured_moments are the statistics of the forward output pooled over batch, patches and hidden units
    images = torch.randn(8, 3, 16, 16)
    m = emb.measured_moments(images)
    y = emb(images).detach().double()
    assert m.mean == pytest.approx(float(y.mean()), rel=1e-9, abs=1e-12)
    assert m.var == pytest.approx(float(y.var(unbiased=False)), rel=1e-9)
    assert -1.0 <= m.corr <= 1.0


def test_expected_moments_and_gram_against_weight_draws():
    """forward_moments / gram: the expectation over the projection and position weights on fixed images, against
    the mean over draws of each (tolerance Z standard errors of that mean)."""
    emb = PatchEmbedding(image_size=8, patch_size=4, channels=2, d_model=16, patch_std=0.3, position_std=0.5)
    gen = torch.Generator().manual_seed(0)
    images = torch.rand(3, 2, 8, 8, generator=gen)  # non-negative pixels: positive patch inner products
    rule, gram = emb.forward_moments(images), emb.gram(images)
    assert gram.shape == (3, 4, 4) and rule.mean == 0.0 and rule.corr_hidden == 0.0
    draws = 4000
    products, variances, covariances = [], [], []
    for _ in range(draws):
        with torch.no_grad():
            emb.proj.weight.normal_(0.0, 0.3, generator=gen)
            emb.position.weight.normal_(0.0, 0.5, generator=gen)
            y = emb(images).double()  # (3, 4, 16)
        products.append(torch.einsum("bti,bsi->bts", y, y) / y.shape[-1])
        variances.append(float(y.pow(2).mean()))
        col = y.sum(1)
        covariances.append(float(((col * col).sum() - y.pow(2).sum()) / (3 * 4 * 3 * 16)))
    products = torch.stack(products)
    mean, se = products.mean(0), products.std(0) / math.sqrt(draws)
    assert torch.all((mean - gram).abs() <= Z * se), (mean - gram).abs().max()
    v, c = np.array(variances), np.array(covariances)
    assert abs(v.mean() - rule.var) <= Z * v.std() / math.sqrt(draws)
    assert abs(c.mean() - rule.corr * rule.var) <= Z * c.std() / math.sqrt(draws)
    with pytest.raises(ValueError, match="expected images"):
        emb.forward_moments(torch.rand(3, 1, 8, 8))
    with pytest.raises(ValueError, match="no segments"):
        emb.gram(images, segment_ids=torch.zeros(3, 4))
