"""Training objectives (sigprop.model.objective): the batches make_batch builds and the loss objective_loss computes."""

from __future__ import annotations

import math

import pytest
import torch

from sigprop.model import Transformer, TransformerConfig, make_batch
from sigprop.model.batches import batch_fingerprint
from sigprop.model.objective import MASK_ID, PAD_ID, objective_loss, objective_sums
from tests.helpers import Z

BASE = dict(vocab_size=50, max_len=32, seq_len=32, n_layers=2, d_model=16, n_heads=2, d_ff=32)
PATCH = dict(input="patches", image_size=4, patch_size=2, channels=1, seq_len=4, n_classes=3)


def cfg(**kw) -> TransformerConfig:
    return TransformerConfig(**{**BASE, **kw})


def token_ids(b, n, vocab=50, seed=0):
    """Real tokens only (ids ≥ 2: 0 is padding, 1 the mask token)."""
    return torch.randint(2, vocab, (b, n), generator=torch.Generator().manual_seed(seed))


def padded(b=4, n=10, seed=0):
    ids = token_ids(b, n, seed=seed)
    lengths = torch.tensor([n, n - 3, 2, n - 1])[:b]
    mask = torch.arange(n)[None, :] < lengths[:, None]
    return ids.masked_fill(~mask, PAD_ID), mask


# ----------------------------------------------------------------------------------------------------------------
# make_batch
# ----------------------------------------------------------------------------------------------------------------

def test_encoder_batch_masks_and_labels_only_selected_positions():
    c = cfg(mask_prob=0.15)
    ids = token_ids(64, 32)
    batch = make_batch(c, ids, generator=torch.Generator().manual_seed(1))
    assert set(batch.to_dict()) == {"inputs", "labels"}
    inp, lab = batch.inputs, batch.labels
    sel = lab != -100
    assert torch.equal(lab[sel], ids[sel])  # a label is the original token ...
    assert torch.equal(inp[~sel], ids[~sel])  # ... and only labelled positions are corrupted
    assert bool((inp[sel] == MASK_ID).any())
    n = ids.numel()
    rate = float(sel.float().mean())
    assert abs(rate - 0.15) <= Z * math.sqrt(0.15 * 0.85 / n)  # Bernoulli(mask_prob) selection
    k = int(sel.sum())
    masked = float((inp[sel] == MASK_ID).float().mean())
    assert abs(masked - 0.8) <= Z * math.sqrt(0.8 * 0.2 / k)  # BERT's 80 % [MASK]


def test_encoder_batch_with_padding():
    c = cfg(mask_prob=0.5)
    ids, mask = padded()
    batch = make_batch(c, ids, generator=torch.Generator().manual_seed(2), padding_mask=mask)
    assert torch.equal(batch.padding_mask, mask)
    assert torch.all(batch.labels[~mask] == -100)  # padding is never a target
    assert torch.all(batch.inputs[~mask] == PAD_ID)


def test_make_batch_is_reproducible_with_a_generator():
    c = cfg()
    ids = token_ids(8, 16)
    a = make_batch(c, ids, generator=torch.Generator().manual_seed(3))
    b = make_batch(c, ids, generator=torch.Generator().manual_seed(3))
    assert batch_fingerprint(a) == batch_fingerprint(b)  # every tensor equal


def test_decoder_batch_next_token_labels():
    c = cfg(arch="decoder")
    ids = token_ids(3, 9)
    batch = make_batch(c, ids)
    assert set(batch.to_dict()) == {"inputs", "labels"}
    assert torch.equal(batch.inputs, ids)
    assert torch.equal(batch.labels[:, :-1], ids[:, 1:])
    assert torch.all(batch.labels[:, -1] == -100)
    ids, mask = padded()
    batch = make_batch(c, ids, padding_mask=mask)
    lab = batch.labels
    for b in range(ids.shape[0]):
        n_real = int(mask[b].sum())
        assert torch.equal(lab[b, : n_real - 1], ids[b, 1:n_real])  # real → next real token
        assert torch.all(lab[b, n_real - 1:] == -100)  # the last real token has no successor; pads none


def test_encoder_decoder_batch():
    c = cfg(arch="encoder_decoder", mask_prob=0.3)
    ids = token_ids(16, 12)
    batch = make_batch(c, ids, generator=torch.Generator().manual_seed(4))
    assert set(batch.to_dict()) == {"inputs", "decoder_inputs", "labels"}
    assert torch.equal(batch.decoder_inputs, ids)  # the decoder reads the original ...
    assert torch.equal(batch.labels[:, :-1], ids[:, 1:])  # ... and predicts its next token
    assert torch.all(batch.labels[:, -1] == -100)
    changed = batch.inputs != ids  # the encoder reads a corrupted copy
    assert bool(changed.any()) and bool((batch.inputs[changed] != MASK_ID).sum() < changed.sum())
    ids, mask = padded()
    batch = make_batch(c, ids, padding_mask=mask)
    assert torch.equal(batch.padding_mask, mask) and torch.equal(batch.decoder_padding_mask, mask)
    assert torch.all(batch.inputs[~mask] == PAD_ID)


def test_encoder_decoder_batch_masks_with_the_given_mask_id():
    """Another tokenizer's [MASK] id replaces the encoder side's masked tokens, as it does an encoder's."""
    c = cfg(arch="encoder_decoder", mask_prob=0.5)
    ids = token_ids(16, 12)
    own_mask = 3
    default = make_batch(c, ids, generator=torch.Generator().manual_seed(4))
    given = make_batch(c, ids, generator=torch.Generator().manual_seed(4), mask_id=own_mask)
    masked = default.inputs == MASK_ID
    assert bool(masked.any())
    assert torch.all(given.inputs[masked] == own_mask) and torch.equal(given.inputs[~masked],
                                                                          default.inputs[~masked])


def test_patch_batch_needs_labels():
    c = cfg(**PATCH)
    images = torch.randn(5, 1, 4, 4)
    with pytest.raises(ValueError, match="labels"):
        make_batch(c, images)
    labels = torch.tensor([0, 2, 1, 1, 0])
    batch = make_batch(c, images, labels=labels)
    assert set(batch.to_dict()) == {"inputs", "labels"}
    assert batch.inputs is images and batch.labels is labels


# ----------------------------------------------------------------------------------------------------------------
# objective_loss
# ----------------------------------------------------------------------------------------------------------------

def hand_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """−mean over labelled positions of log softmax(logits)[label], written out in float64."""
    logits = logits.detach().double().reshape(-1, logits.shape[-1])
    labels = labels.reshape(-1)
    total, count = 0.0, 0
    for row, y in zip(logits, labels.tolist(), strict=True):
        if y == -100:
            continue
        mx = float(row.max())
        lse = mx + math.log(float(torch.exp(row - mx).sum()))
        total += lse - float(row[y])
        count += 1
    return total / count


def model64(c):
    return Transformer(c, generator=torch.Generator().manual_seed(0)).to(torch.float64).eval()


@pytest.mark.parametrize("arch", ["encoder", "decoder", "encoder_decoder"])
def test_loss_equals_hand_cross_entropy(arch):
    c = cfg(arch=arch, mask_prob=0.4)
    m = model64(c)
    ids, mask = padded(seed=5)
    batch = make_batch(c, ids, generator=torch.Generator().manual_seed(6), padding_mask=mask)
    loss = objective_loss(m, batch)
    assert loss.dim() == 0 and torch.isfinite(loss)
    logits = m(batch.inputs, padding_mask=batch.padding_mask, decoder_inputs=batch.decoder_inputs,
               decoder_padding_mask=batch.decoder_padding_mask)
    assert float(loss.detach()) == pytest.approx(hand_cross_entropy(logits, batch.labels), rel=1e-12)
    assert float(m.loss(batch).detach()) == float(loss.detach())
    loss.backward()
    assert all(p.grad is None or bool(torch.isfinite(p.grad).all()) for p in m.parameters())


def test_sums_count_top1_only_when_asked():
    c = cfg(arch="decoder")
    m = model64(c)
    ids, mask = padded(seed=8)
    batch = make_batch(c, ids, padding_mask=mask)
    total, count, correct = objective_sums(m, batch)
    total0, count0, correct0 = objective_sums(m, batch, top1=False)
    assert float(total0.detach()) == float(total.detach()) and int(count0) == int(count) and int(correct0) == 0
    logits = m(batch.inputs, padding_mask=batch.padding_mask).reshape(-1, c.vocab_size)
    labels = batch.labels.reshape(-1)
    hand = sum(int(row.argmax()) == y for row, y in zip(logits, labels.tolist(), strict=True) if y != -100)
    assert int(correct) == hand and int(count) == int((labels != -100).sum())


def test_patch_loss_equals_hand_cross_entropy():
    c = cfg(**PATCH)
    m = model64(c)
    images = torch.randn(6, 1, 4, 4, dtype=torch.float64)
    labels = torch.tensor([0, 1, 2, 2, 1, 0])
    batch = make_batch(c, images, labels=labels)
    loss = objective_loss(m, batch)
    assert float(loss.detach()) == pytest.approx(hand_cross_entropy(m(images), labels), rel=1e-12)


def test_loss_at_uniform_logits_is_log_vocab():
    # an identity: with a zero head every logit is 0, so the cross-entropy is ln(vocab_size) exactly
    c = cfg(tie_head=False)
    m = model64(c)
    with torch.no_grad():
        m.head.weight.zero_()
    batch = make_batch(c, token_ids(2, 8), generator=torch.Generator().manual_seed(7))
    assert float(objective_loss(m, batch).detach()) == pytest.approx(math.log(c.vocab_size), rel=1e-14)


@pytest.mark.parametrize("batch", [None, [1, 2], {"inputs": torch.zeros(1, 4, dtype=torch.long)},
                                   {"labels": torch.zeros(1, 4, dtype=torch.long)}])
def test_bad_batch(batch):
    m = Transformer(cfg())
    with pytest.raises(ValueError, match="inputs.*labels"):
        objective_loss(m, batch)


def test_segment_model_batch_is_usable_or_rejected():
    c = cfg(n_segments=2)
    ids = token_ids(2, 8)
    try:
        batch = make_batch(c, ids, generator=torch.Generator().manual_seed(8))
    except ValueError as e:  # asking for segment ids explicitly is a valid fix
        assert "segment" in str(e)
        return
    assert torch.isfinite(model64(c).loss(batch))


def test_a_padding_mask_keeps_padding_of_any_id_unmasked_and_unlabelled():
    """Padding marked by ``padding_mask`` (not filled with id 0) is never selected for masking nor labelled."""

    ids = torch.tensor([[10, 11, 12, 13, 7, 7, 7, 7]] * 16)
    real = ids != 7
    enc = TransformerConfig(arch="encoder", n_layers=1, d_model=16, n_heads=2, vocab_size=64, seq_len=8,
                            mask_prob=0.9)
    batch = make_batch(enc, ids, torch.Generator().manual_seed(0), padding_mask=real)
    assert bool((batch.labels[~real] == -100).all()) and bool((batch.inputs[~real] == 7).all())
    labelled = batch.labels != -100
    assert int(labelled.sum()) > 0 and bool((batch.labels[labelled] == ids[labelled]).all())
    dec = enc.replace(arch="decoder")
    assert make_batch(dec, ids[:1], padding_mask=real[:1]).labels.tolist() == [[11, 12, 13] + [-100] * 5]


def test_with_a_padding_mask_a_real_token_of_id_0_is_labelled():
    """A tokenizer's id 0 may be a real token (GPT-2's "!"): with a padding mask, only the mask says what is padding."""
    dec = TransformerConfig(arch="decoder", n_layers=1, d_model=16, n_heads=2, vocab_size=64, seq_len=8)
    ids = torch.tensor([[10, 0, 12, 0, 13, 50, 50, 50]])
    batch = make_batch(dec, ids, padding_mask=ids != 50)
    assert batch.labels.tolist() == [[0, 12, 0, 13, -100, -100, -100, -100]]
