"""Embedding rules: repetition correlation, Zipf expectation, segments, measured inputs (Kedia et al. App. A.1)."""

import numpy as np
import pytest
import torch

from sigprop.components.embedding import (
    Embedding,
    embedding_forward,
    input_moments,
    repetition_correlation,
    segment_correlation,
    zipf_correlation,
)
from tests.helpers import Z, mc_mean


def test_repetition_correlation_identities():
    assert repetition_correlation(torch.tensor([[1, 2, 3, 4]])) == 0.0
    assert repetition_correlation(torch.tensor([[7, 7, 7]])) == 1.0
    # [1, 1, 2]: one repeated pair (ordered: 2) out of 3·2 ordered pairs.
    assert repetition_correlation(torch.tensor([[1, 1, 2]])) == pytest.approx(2 / 6)
    # Padding is excluded.
    assert repetition_correlation(torch.tensor([[1, 1, 0, 0]]), pad_id=0) == 1.0


def test_embedding_output_correlation_equals_repetition_fraction():
    """Tier 3: the measured token correlation of the real module's output is the repetition fraction."""
    ids = torch.randint(0, 20, (64, 50))
    emb = Embedding(20, 512, token_std=0.5)
    with torch.no_grad():
        m = input_moments(emb(ids))
    r = repetition_correlation(ids)
    # Different tokens' rows have sample cross-correlation of order 1/sqrt(d · pairs); same-token pairs give exactly 1.
    assert m.corr == pytest.approx(r, abs=0.02)


def test_zipf_exact_is_multinomial_expectation():
    """Tier 3: Σ p_i² equals the mean repetition fraction of i.i.d. Zipf sequences (any L)."""
    v, length = 500, 40
    p = 1.0 / np.arange(1, v + 1)
    p /= p.sum()
    ids = torch.multinomial(torch.tensor(p), 4000 * length, replacement=True).reshape(4000, length)
    fractions = []
    for row in ids:
        counts = torch.unique(row, return_counts=True)[1].double()
        fractions.append(float((counts * (counts - 1)).sum()) / (length * (length - 1)))
    est, se = mc_mean(np.array(fractions))
    assert abs(zipf_correlation(v) - est) <= Z * se
    # The paper's plug-in form is biased low at this length.
    assert zipf_correlation(v, length, approx="kedia") < est - Z * se


def test_zipf_simplified_forms_are_close_for_large_vocab():
    exact = zipf_correlation(32000)
    assert zipf_correlation(32000, approx="kedia_simplified") == pytest.approx(exact, rel=0.15)


def test_segment_correlation_exact_by_enumeration():
    for length in (2, 5, 64):
        rs = [(x * x + (length - x) ** 2 - length) / (length * (length - 1)) for x in range(length + 1)]
        assert np.mean(rs) == pytest.approx(segment_correlation(length))
    assert segment_correlation(256, approx="kedia") == pytest.approx(2 / 3, abs=0.002)


def test_embedding_forward_weights_by_variance():
    m = embedding_forward(1.0, 0.1, position_var=1.0, segment_var=1.0, segment_corr=2 / 3)
    assert m.var == 3.0
    assert m.corr == pytest.approx((0.1 + 2 / 3) / 3)  # the paper's "average of the three"


def test_input_moments_excludes_padding():
    x = torch.randn(4, 10, 8, dtype=torch.float64)
    mask = torch.ones(4, 10, dtype=torch.bool)
    mask[:, 7:] = False
    x[~mask] = 1e6
    m = input_moments(x, mask)
    ref = input_moments(x[:, :7])
    assert m.var == pytest.approx(ref.var) and m.corr == pytest.approx(ref.corr)


@pytest.mark.parametrize("call, field", [
    (lambda: zipf_correlation(1), "vocab_size"),
    (lambda: embedding_forward(-1.0, 0.1), "token_var"),
    (lambda: embedding_forward(1.0, 1.5), "token_corr"),
    (lambda: Embedding(10, 4, token_std=0.0), "token_std"),
    (lambda: zipf_correlation(100, approx="bogus"), "approx"),
])
def test_bad_input(call, field):
    with pytest.raises(ValueError, match=field):
        call()


def test_scaled_token_rows_against_monte_carlo():
    """``token_scale`` (Gemma's √d) multiplies the token rows' output, not the table: the output variance over
    tables equals scale²·σ²_tok + σ²_pos (Monte Carlo over 64 tables, z·SE), the Gram rule says the same, and the
    correlation of a repeated token is unchanged."""
    scale, d = 8.0, 64
    ids = torch.tensor([[5, 6, 5, 7]])
    rule = Embedding(50, d, max_len=4, token_std=0.02, position_std=0.02, token_scale=scale)
    samples = []
    for seed in range(64):
        torch.manual_seed(seed)
        emb = Embedding(50, d, max_len=4, token_std=0.02, position_std=0.02, token_scale=scale)
        samples.append(emb(ids).detach().double().square().mean(-1).reshape(-1))
    mean, se = mc_mean(torch.stack(samples))
    want = scale**2 * 0.02**2 + 0.02**2
    assert abs(mean - want) <= Z * se
    gram = rule.gram(ids)
    assert float(gram[0, 0, 0]) == pytest.approx(want, rel=1e-12)
    assert float(gram[0, 0, 2]) == pytest.approx(scale**2 * 0.02**2, rel=1e-12)
    m = rule.forward_moments(0.25)
    assert float(m.var) == pytest.approx(want, rel=1e-12)
    assert float(emb.token.weight.std()) == pytest.approx(0.02, rel=0.05)  # the table itself is unscaled
