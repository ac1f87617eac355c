"""Pinned corpora: token ids read back and checked against their manifest's SHA-256, refused by name when missing,
damaged or of another vocabulary; and the fingerprints every run records."""

from __future__ import annotations

import hashlib
import json
import lzma

import numpy as np
import pytest

from sigprop.data.fingerprint import data_fingerprint, ids_fingerprint, same_data
from sigprop.data.pinned import is_pinned, pinned_corpus


def _write(root, name="tiny-v1", ids=(5, 6, 3, 7, 8, 9, 3, 10), vocab=300, digest=None):
    folder = root / name
    folder.mkdir(parents=True)
    raw = np.asarray(ids, dtype="<u2").tobytes()
    (folder / "ids.u16.xz").write_bytes(lzma.compress(raw))
    manifest = {"vocab_size": vocab, "sep_id": 3, "ids_sha256": digest or hashlib.sha256(raw).hexdigest()}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_a_pinned_corpus_reads_back_its_ids(tmp_path):
    _write(tmp_path)
    corpus = pinned_corpus("pinned:tiny-v1", tmp_path)
    assert corpus.ids.tolist() == [5, 6, 3, 7, 8, 9, 3, 10] and corpus.vocab_size == 300 and corpus.sep_id == 3
    assert is_pinned("pinned:tiny-v1") and not is_pinned("python") and not is_pinned(None)


def test_a_missing_or_damaged_corpus_is_refused_by_name(tmp_path):
    _write(tmp_path)
    with pytest.raises(ValueError, match="no pinned corpus 'other'.*available: tiny-v1"):
        pinned_corpus("pinned:other", tmp_path)
    _write(tmp_path, "bad-v1", digest="0" * 64)
    with pytest.raises(ValueError, match="do not match the SHA-256"):
        pinned_corpus("pinned:bad-v1", tmp_path)
    with pytest.raises(ValueError, match="pinned:NAME"):
        pinned_corpus("python", tmp_path)


def test_the_repository_s_corpus_matches_its_manifest():
    corpus = pinned_corpus("pinned:python-v1")
    manifest = json.loads((corpus.folder / "manifest.json").read_text())
    assert corpus.ids.size == manifest["tokens"] and corpus.vocab_size == 2048
    assert int(corpus.ids.max()) < corpus.vocab_size and int((corpus.ids == corpus.sep_id).sum()) == \
        manifest["documents"] - 1


def test_a_model_of_another_vocabulary_is_refused():
    from sigprop.model.config import config_from_dict
    from sigprop.train.config import train_config_from_dict
    from sigprop.train.data import make_data

    with pytest.raises(ValueError, match="set vocab_size=2048"):
        make_data(config_from_dict(dict(arch="decoder", vocab_size=300, seq_len=16, max_len=16)),
                  train_config_from_dict(dict(data="pinned:python-v1")))


def test_fingerprints_ignore_the_storage_type_and_old_records_still_match():
    ids = np.array([1, 2, 70000], dtype=np.int64)
    assert ids_fingerprint(ids) == ids_fingerprint(ids.astype(np.uint32)) != ids_fingerprint(ids[:2])
    current = {"kind": "text", "train_tokens": 3, "train_sha256": "a", "validation_sha256": "b"}
    assert same_data({"kind": "text", "train_tokens": 3}, current)  # a checkpoint from before fingerprints
    assert not same_data({**current, "train_sha256": "c"}, current)
    assert not same_data({"kind": "text", "train_tokens": 4}, current) and not same_data(None, current)
    assert data_fingerprint(current) == {"train_sha256": "a", "validation_sha256": "b"}
    assert data_fingerprint({"kind": "text"}) is None
