"""The one batch type: sigprop's dicts, Hugging Face dicts and tensors of ids turned into the same validated Batch."""

from __future__ import annotations

import pytest
import torch

from sigprop.data.mlm import causal_lm_labels
from sigprop.model.batch import Batch, shift_causal_labels, unshift_causal_labels
from sigprop.model.config import TransformerConfig
from sigprop.model.objective import make_batch


def test_sigprop_dict_round_trips():
    config = TransformerConfig(n_layers=1, d_model=16, n_heads=2, vocab_size=50, seq_len=8, arch="encoder")
    ids = torch.randint(5, 50, (3, 8), generator=torch.Generator().manual_seed(0))
    pad = torch.ones(3, 8, dtype=torch.bool)
    pad[1, 5:] = False
    made = make_batch(config, ids, generator=torch.Generator().manual_seed(1), padding_mask=pad)
    d = made.to_dict()
    assert set(d) == {"inputs", "labels", "padding_mask"}
    b = Batch.from_any(d)
    assert Batch.from_any(made) is made
    assert all(torch.equal(t, d[k]) for k, t in b.to_dict().items()) and b.to_dict().keys() == d.keys()
    assert b.tokens == 3 * 8 - 3 and b.sequences == 3 and not b.is_images
    assert all(torch.equal(t, d[k][1:3]) for k, t in b.rows(1, 3).to_dict().items())
    assert b.to("cpu").to_dict().keys() == d.keys()


def test_hf_dict_causal_labels_are_shifted_and_back():
    ids = torch.tensor([[11, 12, 13, 14, 0], [21, 22, 23, 24, 25]])
    attention = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    hf_labels = ids.masked_fill(attention == 0, -100)
    b = Batch.from_any({"input_ids": ids, "attention_mask": attention, "labels": hf_labels}, causal=True)
    assert b.labels.tolist() == [[12, 13, 14, -100, -100], [22, 23, 24, 25, -100]]
    assert b.padding_mask.dtype == torch.bool and b.padding_mask.tolist()[0] == [True] * 4 + [False]
    back = b.hf_kwargs(causal=True)
    # position 0's label is never read by a causal LM's loss; every other one comes back as it was
    assert torch.equal(back["labels"][:, 1:], hf_labels[:, 1:]) and bool((back["labels"][:, 0] == -100).all())
    assert back["attention_mask"].dtype == torch.long and torch.equal(back["attention_mask"], attention)
    # a masked LM's labels are aligned in both conventions: untouched
    m = Batch.from_any({"input_ids": ids, "labels": hf_labels}, causal=False)
    assert torch.equal(m.labels, hf_labels) and torch.equal(m.hf_kwargs()["labels"], hf_labels)


def test_shift_helpers_are_inverse_where_read():
    labels = torch.randint(0, 9, (4, 7), generator=torch.Generator().manual_seed(2))
    assert torch.equal(shift_causal_labels(unshift_causal_labels(labels))[:, :-1], labels[:, :-1])
    ids = torch.tensor([[5, 6, 7, 8]])
    mask = torch.tensor([[True, True, True, False]])
    assert causal_lm_labels(ids, padding_mask=mask).tolist() == [[6, 7, -100, -100]]
    assert causal_lm_labels(ids).tolist() == [[6, 7, 8, -100]]


def test_tensor_and_images():
    assert Batch.from_any(torch.tensor([3, 4, 5])).inputs.shape == (1, 3)
    img = Batch.from_any({"pixel_values": torch.rand(2, 3, 8, 8), "labels": torch.tensor([0, 1])})
    assert img.is_images and img.tokens == 2 and "pixel_values" in img.hf_kwargs()


@pytest.mark.parametrize("bad, match", [
    ({"ids": torch.zeros(1, 3, dtype=torch.long)}, "none of the known keys.*input_ids.*attention_mask"),
    ({"inputs": torch.zeros(1, 3, dtype=torch.long), "extra": 1}, "unknown: extra"),
    ({"input_ids": torch.zeros(1, 3)}, "must hold integers"),
    ({"input_ids": torch.zeros(1, 3, dtype=torch.long), "attention_mask": torch.ones(1, 4)}, "shape"),
    ({"input_ids": torch.zeros(1, 3, dtype=torch.long), "attention_mask": torch.full((1, 3), 2)}, "0/1"),
    ({"input_ids": torch.zeros(1, 3, dtype=torch.long), "padding_mask": torch.ones(1, 3)}, "unknown: padding_mask"),
    ({"input_ids": torch.zeros(1, 3, dtype=torch.long), "attention_mask": torch.zeros(1, 3, dtype=torch.long)},
     "no real token"),
    ({"input_ids": torch.zeros(1, 3, dtype=torch.long), "labels": torch.zeros(1, 2, dtype=torch.long)}, "labels"),
    ([1, 2, 3], "a batch is a tensor"),
])
def test_bad_batches_are_refused_with_the_reason(bad, match):
    with pytest.raises(ValueError, match=match):
        Batch.from_any(bad)


def test_a_float_attention_mask_is_read_as_hugging_face_takes_it():
    b = Batch.from_any({"input_ids": torch.tensor([[5, 6, 7]]), "attention_mask": torch.tensor([[1.0, 1.0, 0.0]])})
    assert b.padding_mask.tolist() == [[True, True, False]]
