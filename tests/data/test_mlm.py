"""Masked-LM corruption (BERT 15% / 80-10-10) and causal next-token labels."""

import math

import pytest
import torch

from sigprop.data.mlm import IGNORE_INDEX, causal_lm_labels, mask_tokens
from tests.helpers import Z

V, MASK, PAD = 1000, 1, 0


def _padded_batch(g, b=64, L=512):
    """Ids in [5, V) with right padding: row j keeps its first L − 4j positions (rows beyond L/4 unpadded)."""
    ids = torch.randint(5, V, (b, L), generator=g)
    for j in range(b):
        if 4 * j < L:
            ids[j, L - 4 * j:] = PAD
    return ids


def _binomial_ok(k, n, p, what):
    se = math.sqrt(p * (1.0 - p) / n)
    assert abs(k / n - p) <= Z * se, f"{what}: {k / n:.5f} vs {p:.5f} ± {se:.2g}"


@pytest.mark.parametrize("prob", [0.15, 0.4])
def test_rates(prob):
    """Selection ~ Bernoulli(prob) on real tokens; of the selected, [MASK] w.p. 0.8 + 0.1/V (a random id can be the
    mask id), unchanged w.p. 0.1 + 0.1/V (a random id can equal the original), another id w.p. 0.1(1 − 2/V)."""
    g = torch.Generator().manual_seed(3)
    ids = _padded_batch(g)
    inputs, labels = mask_tokens(ids, MASK, prob=prob, generator=g, pad_id=PAD, vocab_size=V)
    real = ids != PAD
    selected = labels != IGNORE_INDEX
    n_real, n_sel = int(real.sum()), int(selected.sum())
    _binomial_ok(n_sel, n_real, prob, "selected")
    masked = int((inputs[selected] == MASK).sum())
    same = int((inputs[selected] == ids[selected]).sum())
    other = n_sel - masked - same
    _binomial_ok(masked, n_sel, 0.8 + 0.1 / V, "masked")
    _binomial_ok(same, n_sel, 0.1 + 0.1 / V, "unchanged")
    _binomial_ok(other, n_sel, 0.1 * (1 - 2 / V), "random")


def test_structure():
    g = torch.Generator().manual_seed(4)
    ids = _padded_batch(g, b=8, L=64)
    inputs, labels = mask_tokens(ids, MASK, prob=0.3, generator=g, pad_id=PAD, vocab_size=V, random_low=5)
    assert inputs.shape == labels.shape == ids.shape
    assert inputs.dtype == labels.dtype == torch.int64
    selected = labels != IGNORE_INDEX
    pad = ids == PAD
    assert not (selected & pad).any()  # padding is never selected
    assert torch.equal(inputs[pad], ids[pad])
    assert torch.equal(labels[selected], ids[selected])
    assert torch.equal(inputs[~selected], ids[~selected])  # only selected positions change
    changed = inputs[selected & (inputs != MASK)]
    assert int(changed.min()) >= 5 and int(changed.max()) < V  # random ids from [random_low, vocab_size)
    assert torch.equal(ids, _padded_batch(torch.Generator().manual_seed(4), b=8, L=64))  # ids not modified


def test_prob_one_selects_every_real_token():
    g = torch.Generator().manual_seed(5)
    ids = _padded_batch(g, b=4, L=32)
    _, labels = mask_tokens(ids, MASK, prob=1.0, generator=g, pad_id=PAD)
    assert torch.equal(labels != IGNORE_INDEX, ids != PAD)


def test_at_least_one_position_is_selected():
    ids = torch.tensor([[7, 8, 9, PAD, PAD]])
    for seed in range(20):
        _, labels = mask_tokens(ids, MASK, prob=1e-12, generator=torch.Generator().manual_seed(seed), pad_id=PAD)
        sel = (labels != IGNORE_INDEX).nonzero()
        assert len(sel) == 1 and int(sel[0, 1]) < 3
    logits = torch.randn(1, 5, 10)
    loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels)  # a finite loss exists
    assert torch.isfinite(loss)


def test_reproducible_and_default_vocab():
    ids = torch.randint(5, 50, (4, 16))
    a = mask_tokens(ids, MASK, generator=torch.Generator().manual_seed(1))
    b = mask_tokens(ids, MASK, generator=torch.Generator().manual_seed(1))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert int(a[0].max()) <= max(int(ids.max()), MASK)  # default vocab_size = max id + 1
    one_d = mask_tokens(torch.tensor([5, 6, 7, 8]), MASK)
    assert one_d[0].shape == (4,)


def test_mask_errors():
    ids = torch.tensor([[5, 6, 7]])
    cases = [
        ({"ids": ids.float()}, "integer"),
        ({"ids": torch.zeros(0, dtype=torch.long)}, "non-empty"),
        ({"prob": 0.0}, "prob"),
        ({"prob": 1.5}, "prob"),
        ({"mask_id": -1}, "mask_id"),
        ({"ids": torch.tensor([[PAD, PAD]]), "pad_id": PAD}, "padding"),
        ({"vocab_size": 7}, "vocab_size"),
        ({"ids": torch.tensor([[-1, 3]])}, "non-negative"),
        ({"random_low": 100, "vocab_size": 10}, "random_low"),
        ({"mask_id": 600, "vocab_size": 100}, "mask_id"),
    ]
    for kw, field in cases:
        args = {"ids": ids, "mask_id": MASK} | kw
        with pytest.raises(ValueError, match=field):
            mask_tokens(**args)


def test_causal_labels():
    ids = torch.tensor([[10, 11, 12, 13], [20, 21, PAD, PAD]])
    labels = causal_lm_labels(ids, pad_id=PAD)
    assert labels.tolist() == [[11, 12, 13, -100], [21, -100, -100, -100]]
    assert causal_lm_labels(torch.tensor([1, 2, 3])).tolist() == [2, 3, -100]
    # no pad_id: PAD is an ordinary token
    assert causal_lm_labels(ids)[1].tolist() == [21, PAD, PAD, -100]
    # left padding: a padded input position has no target
    assert causal_lm_labels(torch.tensor([[PAD, 5, 6]]), pad_id=PAD).tolist() == [[-100, 6, -100]]
    with pytest.raises(ValueError, match="integer"):
        causal_lm_labels(torch.ones(2, 3))
    with pytest.raises(ValueError, match="pad_id"):
        causal_lm_labels(ids, pad_id=-3)
