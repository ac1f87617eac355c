"""Token streams and batches: exact encoding of the corpus, uniform reproducible windows, the .npy cache."""

import itertools
import logging
import math

import numpy as np
import pytest
import torch

import sigprop.data.batches as batchmod
from sigprop.data.batches import TokenStream, load_batch, token_batches
from sigprop.data.corpus import corpus_files, read_texts
from sigprop.data.tokenizer import SPECIAL_TOKENS
from tests.data import count_calls, token_bytes
from tests.helpers import Z

VOCAB = 300


def test_stream_is_the_corpus_joined_by_sep(corpus):
    stream = TokenStream.from_corpus(corpus, vocab_size=VOCAB)
    texts = list(read_texts(corpus_files(corpus)))
    sep = stream.tokenizer.token_to_id("[SEP]")
    assert int((stream.ids == sep).sum()) == len(texts) - 1
    assert token_bytes(stream.tokenizer, stream.ids) == "[SEP]".join(texts).encode()
    assert stream.vocab_size == stream.tokenizer.get_vocab_size() <= VOCAB
    assert int(stream.ids.max()) < stream.vocab_size


def test_special_strings_in_text_stay_text(tmp_path):
    f = tmp_path / "doc.txt"
    f.write_text("a [MASK] b [PAD] c [SEP] d\n" * 50)
    stream = TokenStream.from_corpus(f, vocab_size=VOCAB)
    assert not np.isin(stream.ids, np.arange(len(SPECIAL_TOKENS))).any()


def test_batches_are_windows_of_the_stream(corpus):
    stream = TokenStream.from_corpus(corpus, vocab_size=VOCAB)
    b, L = 8, 32
    batches = list(token_batches(b, L, corpus, vocab_size=VOCAB, n_batches=3))
    assert len(batches) == 3
    ids = torch.from_numpy(stream.ids.astype(np.int64))
    windows = ids.unfold(0, L, 1)  # every window of the stream
    for batch in batches:
        assert batch.shape == (b, L) and batch.dtype == torch.int64
        for row in batch:
            assert (windows == row).all(dim=1).any()


def test_offsets_are_uniform():
    """On the stream 0, 1, …, n−1 a window's first id is its offset: uniform on {0, …, n − L}, mean (n − L)/2 and
    variance ((n − L + 1)² − 1)/12; rows are consecutive."""
    n, L, b, k = 1000, 50, 64, 50
    stream = TokenStream(np.arange(n))
    batches = torch.cat(list(stream.batches(b, L, seed=3, n_batches=k)))
    assert (batches[:, 1:] - batches[:, :-1] == 1).all()
    off = batches[:, 0].double()
    assert int(off.min()) >= 0 and int(off.max()) <= n - L
    m = n - L + 1
    se = math.sqrt((m * m - 1) / 12.0 / off.numel())
    assert abs(float(off.mean()) - (n - L) / 2.0) <= Z * se
    counts = torch.bincount(off.long(), minlength=m).double()  # no offset favoured: chi-square ~ m−1 ± sqrt(2(m−1))
    expected = off.numel() / m
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert abs(chi2 - (m - 1)) <= Z * math.sqrt(2 * (m - 1))


def test_reproducible_from_seed(corpus):
    a = list(token_batches(4, 16, corpus, vocab_size=VOCAB, seed=7, n_batches=3))
    b = list(token_batches(4, 16, corpus, vocab_size=VOCAB, seed=7, n_batches=3))
    c = list(token_batches(4, 16, corpus, vocab_size=VOCAB, seed=8, n_batches=3))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))
    first = load_batch(4, 16, corpus, vocab_size=VOCAB, seed=7)
    assert torch.equal(first, a[0])
    g = torch.Generator().manual_seed(7)
    assert torch.equal(next(token_batches(4, 16, corpus, vocab_size=VOCAB, generator=g)), a[0])


def test_endless_when_n_batches_is_none(corpus):
    it = token_batches(2, 8, corpus, vocab_size=VOCAB)
    assert len(list(itertools.islice(it, 5))) == 5
    assert list(token_batches(2, 8, corpus, vocab_size=VOCAB, n_batches=0)) == []
    (on_device,) = token_batches(2, 8, corpus, vocab_size=VOCAB, n_batches=1, device="cpu")
    assert on_device.device.type == "cpu"


def test_token_cache(corpus, cache_env, monkeypatch, caplog):
    calls = count_calls(monkeypatch, batchmod, "encode_texts")
    first = TokenStream.from_corpus(corpus, vocab_size=VOCAB)
    (npy,) = cache_env.glob("tokens-*.npy")
    second = TokenStream.from_corpus(corpus, vocab_size=VOCAB)
    assert len(calls) == 1 and np.array_equal(first.ids, second.ids)
    assert not [p for p in cache_env.iterdir() if p.name.startswith(".")]

    npy.write_bytes(b"\x93NUMPY garbage")
    with caplog.at_level(logging.WARNING, logger="sigprop.data"):
        third = TokenStream.from_corpus(corpus, vocab_size=VOCAB)
    assert len(calls) == 2 and "re-encoding" in caplog.text and np.array_equal(third.ids, first.ids)

    np.save(npy, np.full(10, VOCAB + 5, dtype=np.int64))  # ids outside the vocabulary
    fourth = TokenStream.from_corpus(corpus, vocab_size=VOCAB)
    assert len(calls) == 3 and np.array_equal(fourth.ids, first.ids)

    np.save(npy, np.array([object()]), allow_pickle=True)  # a pickle is never loaded
    fifth = TokenStream.from_corpus(corpus, vocab_size=VOCAB)
    assert len(calls) == 4 and np.array_equal(fifth.ids, first.ids)


def test_default_corpus_is_the_stdlib():
    """The default path, end to end, on a 300 kB slice of the standard library (the only test that trains on it)."""
    cap = 300_000
    stream = TokenStream.from_corpus(vocab_size=VOCAB, max_bytes=cap)
    texts = list(read_texts(corpus_files(max_bytes=cap)))
    assert any("def " in t and "import " in t for t in texts)  # Python source
    joined = "[SEP]".join(texts).encode()
    assert token_bytes(stream.tokenizer, stream.ids) == joined
    batch = load_batch(4, 64, vocab_size=VOCAB, max_bytes=cap, seed=1)
    assert batch.shape == (4, 64) and int(batch.max()) < VOCAB
    for row in batch:
        assert token_bytes(stream.tokenizer, row) in joined


def test_errors(corpus, tmp_path):
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("just a few words\n")
    with pytest.raises(ValueError, match="seq_len 100 exceeds the corpus"):
        token_batches(2, 100, tiny, vocab_size=VOCAB)  # raised at the call, not at the first next()
    for kw in ({"batch_size": 0}, {"seq_len": 0}, {"batch_size": 2.0}, {"n_batches": -1}, {"seed": -1}):
        args = {"batch_size": 2, "seq_len": 4, "n_batches": 1, "seed": 0} | kw
        with pytest.raises(ValueError, match=next(iter(kw))):
            token_batches(path=corpus, vocab_size=VOCAB, **args)
    with pytest.raises(ValueError, match="1-D integer"):
        TokenStream(np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="1-D integer"):
        TokenStream(np.zeros(3))
    with pytest.raises(ValueError, match="empty"):
        TokenStream(np.zeros(0, dtype=np.int64))
    with pytest.raises(FileNotFoundError):
        load_batch(2, 4, tmp_path / "missing", vocab_size=VOCAB)
