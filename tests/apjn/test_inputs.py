"""APJN inputs (sigprop.apjn.inputs): the equiangular construction is exact, Eq. 21's estimator recovers it and
matches a direct double loop, and the digits pipeline gives normalised images and the model's first hidden states."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sigprop.apjn.inputs import digits_hidden_states, digits_images, embed_images, equiangular_tokens, estimate_q0_p0
from sigprop.model import Transformer
from sigprop.model.vit import vit_config

CASES = [(64, 256, 1.0, 0.2), (8, 8, 0.5, 0.25), (5, 40, 2.0, 0.0), (30, 7, 1.3, 1.3), (2, 3, 1e-3, 9e-4),
         (16, 1000, 3.0, 2.999)]


@pytest.mark.parametrize("n, d, q0, p0", CASES)
def test_equiangular_gram_is_exact(n, d, q0, p0):
    h = equiangular_tokens(n, d, q0, p0, generator=torch.Generator().manual_seed(n + d))
    assert h.shape == (n, d) and h.dtype == torch.float64
    gram = h @ h.T / d
    expected = torch.full((n, n), p0, dtype=torch.float64) + (q0 - p0) * torch.eye(n, dtype=torch.float64)
    torch.testing.assert_close(gram, expected, rtol=0, atol=1e-13 * q0)


@pytest.mark.parametrize("n, d, q0, p0", CASES)
def test_eq21_estimator_recovers_the_construction(n, d, q0, p0):
    q, p = estimate_q0_p0(equiangular_tokens(n, d, q0, p0, generator=torch.Generator().manual_seed(3)))
    assert isinstance(q, float) and isinstance(p, float)
    assert q == pytest.approx(q0, rel=1e-13) and p == pytest.approx(p0, rel=1e-12, abs=1e-13 * q0)


def test_eq21_estimator_against_a_double_loop_batched():
    h = torch.randn(3, 2, 7, 5, dtype=torch.float64) + 0.3
    q, p = estimate_q0_p0(h)
    assert q.shape == (3, 2) and p.shape == (3, 2)
    n, d = 7, 5
    for i in range(3):
        for j in range(2):
            x = h[i, j]
            q_loop = sum(float(x[s] @ x[s]) / d for s in range(n)) / n
            p_loop = sum(float(x[s] @ x[t]) / d for s in range(n) for t in range(n) if s != t) / (n * (n - 1))
            assert q[i, j] == pytest.approx(q_loop, rel=1e-13) and p[i, j] == pytest.approx(p_loop, rel=1e-12)


def test_equiangular_is_random_and_reproducible():
    a = equiangular_tokens(4, 16, 1.0, 0.2, generator=torch.Generator().manual_seed(0))
    b = equiangular_tokens(4, 16, 1.0, 0.2, generator=torch.Generator().manual_seed(0))
    c = equiangular_tokens(4, 16, 1.0, 0.2, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and not torch.allclose(a, c)
    assert equiangular_tokens(4, 16, 1.0, 0.2, dtype=torch.float32).dtype == torch.float32


@pytest.mark.parametrize("kw, match", [
    (dict(n=4, d=16, q0=1.0, p0=1.5), "p0"), (dict(n=4, d=16, q0=1.0, p0=-0.1), "p0"),
    (dict(n=4, d=16, q0=0.0, p0=0.0), "q0"), (dict(n=4, d=16, q0=float("nan"), p0=0.0), "q0"),
    (dict(n=17, d=16, q0=1.0, p0=0.2), "n <= d"), (dict(n=1, d=16, q0=1.0, p0=0.2), "n"),
    (dict(n=4, d=0, q0=1.0, p0=0.2), "d"), (dict(n=4.0, d=16, q0=1.0, p0=0.2), "n"),
])
def test_equiangular_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        equiangular_tokens(**kw)


def test_estimator_errors():
    with pytest.raises(ValueError, match="shape"):
        estimate_q0_p0(torch.zeros(5))
    with pytest.raises(ValueError, match="n >= 2"):
        estimate_q0_p0(torch.zeros(1, 5))


# ----------------------------------------------------------------------------------------------------------------
# digits
# ----------------------------------------------------------------------------------------------------------------

def test_digits_images_are_normalised_over_the_data_set():
    x = digits_images(size=16)
    assert x.shape == (1797, 1, 16, 16) and x.dtype == torch.float32
    assert float(x.double().mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(x.double().std()) == pytest.approx(1.0, rel=1e-5)


def test_digits_selection_and_channels():
    every = digits_images(size=16)
    some = digits_images(indices=[5, 0, 9], size=16, channels=3)
    assert some.shape == (3, 3, 16, 16)
    torch.testing.assert_close(some[:, 1:2], every[[5, 0, 9]], rtol=0, atol=0)  # same transform for any subset
    torch.testing.assert_close(digits_images(count=4, size=16), every[:4], rtol=0, atol=0)
    r1 = digits_images(count=4, size=16, generator=torch.Generator().manual_seed(2))
    r2 = digits_images(count=4, size=16, generator=torch.Generator().manual_seed(2))
    assert torch.equal(r1, r2)
    native = digits_images(indices=[0], size=8)
    from sklearn.datasets import load_digits

    raw = torch.from_numpy(load_digits().images[0]).float()
    corr = np.corrcoef(native.reshape(-1).numpy(), raw.reshape(-1).numpy())[0, 1]
    assert corr == pytest.approx(1.0, abs=1e-6)  # size 8: an affine map of the raw pixels
    with pytest.raises(ValueError, match="indices"):
        digits_images(indices=[5000])
    with pytest.raises(ValueError, match="count"):
        digits_images(count=10_000)
    with pytest.raises(ValueError, match="mode"):
        digits_images(count=1, mode="area")
    with pytest.raises(ValueError, match="normalise"):
        digits_images(count=1, normalise="minmax")
    unit = digits_images(indices=[0], size=8, normalise="unit")
    torch.testing.assert_close(unit[0, 0], raw / 16.0, rtol=0, atol=1e-7)  # size 8: no resampling, pixel/16
    assert float(digits_images(size=16, normalise="unit").min()) >= 0.0


def test_digits_hidden_states_are_the_embedding_output():
    c = vit_config(2, 32, 4, image_size=16, patch_size=4, channels=1)
    m = Transformer(c, generator=torch.Generator().manual_seed(0))
    h = digits_hidden_states(m, indices=[1, 2])
    assert h.shape == (2, 16, 32)
    torch.testing.assert_close(h, m.embed(digits_images(indices=[1, 2], size=16)), rtol=0, atol=0)
    torch.testing.assert_close(h, embed_images(m, digits_images(indices=[1, 2], size=16)), rtol=0, atol=0)
    q, p = estimate_q0_p0(h)
    assert np.all(q > 0) and np.all(p <= q)  # Cauchy–Schwarz: the mean pairwise product is at most the mean square
    tokens_model = Transformer(vit_config(1, 32, 4).replace(input="tokens", seq_len=16))
    with pytest.raises(ValueError, match="patches"):
        digits_hidden_states(tokens_model, count=1)
