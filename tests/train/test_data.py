"""The training data: a held-out split by file that depends only on the files' contents, each step's global batch a
function of (seed, step) alone, and the processes' shares adding up to it."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from sigprop.model.batches import batch_fingerprint
from sigprop.model.config import TransformerConfig
from sigprop.train.config import TrainConfig
from sigprop.train.data import ImageData, TextData, make_data, rank_slice

MODEL = dict(n_layers=1, d_model=16, n_heads=2, seq_len=16, max_len=16, vocab_size=300)


def _text(corpus, arch="decoder", **train):
    return make_data(TransformerConfig(arch=arch, **MODEL), TrainConfig(data=str(corpus), **train))


def test_the_split_is_by_file_and_does_not_depend_on_the_folder(corpus, tmp_path):
    data = _text(corpus)
    meta = data.meta()
    assert meta["split"] == "by file" and meta["validation_files"] >= 1
    assert 0.0 < meta["validation_tokens"] / (meta["train_tokens"] + meta["validation_tokens"]) < 0.25
    moved = tmp_path / "renamed"
    shutil.copytree(corpus, moved)
    again = _text(moved)
    assert np.array_equal(again.val_ids, data.val_ids) and np.array_equal(again.train_ids, data.train_ids)


def test_a_one_file_corpus_is_split_by_position(corpus):
    one = sorted(corpus.iterdir())[0]
    data = _text(one, val_fraction=0.1)
    assert data.meta()["split"].startswith("by position")
    assert abs(len(data.val_ids) / (len(data.val_ids) + len(data.train_ids)) - 0.1) < 0.01


def test_a_step_s_batch_depends_on_seed_and_step_only(corpus):
    data = _text(corpus, "encoder")
    a, b = data.train_batch(7, 8), data.train_batch(7, 8)
    assert batch_fingerprint(a) == batch_fingerprint(b)  # every tensor equal
    assert not torch.equal(data.train_batch(8, 8).inputs, a.inputs)
    assert (a.labels != -100).any() and (a.labels == -100).any()  # masked-LM labels


def test_the_processes_shares_make_up_the_global_batch(corpus):
    data = _text(corpus, "encoder")
    whole = data.train_batch(3, 8)
    parts = [rank_slice(whole, r, 4) for r in range(4)]
    for key, tensor in whole.to_dict().items():
        assert torch.equal(torch.cat([p.to_dict()[key] for p in parts]), tensor)


def test_the_continuation_task_predicts_the_next_window(corpus):
    data = _text(corpus, "encoder_decoder")
    batch = data.train_batch(0, 4)
    L = MODEL["seq_len"]
    assert batch.inputs.shape == batch.decoder_inputs.shape == batch.labels.shape == (4, L)
    assert torch.equal(batch.decoder_inputs[:, 0], batch.inputs[:, -1])  # the source's last token first
    assert torch.equal(batch.decoder_inputs[:, 1:], batch.labels[:, :-1])  # teacher forcing
    assert data.tokens(batch) == 2 * 4 * L


def test_validation_batches_are_fixed_and_held_out(corpus):
    data = _text(corpus)
    first, again = data.val_batches(2, 4), data.val_batches(2, 4)
    assert all(torch.equal(x.inputs, y.inputs) for x, y in zip(first, again, strict=True))
    held = set(data.val_ids.tolist())
    assert set(first[0].inputs.flatten().tolist()) <= held


def test_digits_are_split_by_image():
    cfg = TransformerConfig(input="patches", n_layers=1, d_model=16, n_heads=2, seq_len=64, image_size=32,
                            patch_size=4, n_classes=10)
    data = make_data(cfg, TrainConfig(val_fraction=0.2))
    assert isinstance(data, ImageData) and not isinstance(data, TextData)
    n_val, n_train = len(data.val_y), len(data.train_y)
    assert n_val + n_train == 1797 and 0.15 < n_val / 1797 < 0.25
    batch = data.train_batch(0, 16)
    assert batch.inputs.shape == (16, 1, 32, 32) and batch.labels.shape == (16,)
    assert data.tokens(batch) == 16 * 64  # the patches each image feeds the model


@pytest.mark.parametrize(("batch_size", "world"), [(32, 4), (16, 8), (5, 8), (86, 3)])
def test_image_validation_scores_every_held_out_image_once_whatever_the_processes(batch_size, world):
    """Each validation batch is shared out over the processes in near-equal parts: the union over ranks is the
    whole held-out set, each image once (the number of processes cannot change the validation loss)."""
    cfg = TransformerConfig(input="patches", n_layers=1, d_model=16, n_heads=2, seq_len=64, image_size=32,
                            patch_size=4, n_classes=10)
    data = make_data(cfg, TrainConfig(val_fraction=0.05))
    rows = [b.inputs for r in range(world) for b in data.val_batches(1, batch_size, r, world)]
    assert all(len(x) > 0 for x in rows)
    scored = torch.cat(rows)
    assert len(scored) == len(data.val_y)
    assert torch.equal(torch.sort(scored.flatten(1).sum(1)).values, torch.sort(data.val_x.flatten(1).sum(1)).values)
