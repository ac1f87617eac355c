"""Byte-level BPE tokenizer: special ids, lossless round trip, and the on-disk cache (keys, corruption, atomicity)."""

import logging
import os

import pytest

import sigprop.data.tokenizer as tokmod
from sigprop.data.corpus import corpus_files
from sigprop.data.tokenizer import (
    MIN_VOCAB_SIZE,
    SPECIAL_TOKENS,
    corpus_key,
    default_cache_dir,
    load_or_train_tokenizer,
    mask_id,
    pad_id,
    special_id,
    tokenizer_cache_path,
)
from tests.data import count_calls

VOCAB = 300


def test_special_tokens_and_vocab(corpus):
    tok = load_or_train_tokenizer(corpus, vocab_size=VOCAB)
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    assert pad_id(tok) == 0 and mask_id(tok) == 1 and special_id(tok, "[SEP]") == 3
    assert MIN_VOCAB_SIZE < tok.get_vocab_size() <= VOCAB  # merges were learned, within the budget
    with pytest.raises(ValueError, match="no special token"):
        special_id(tok, "[BOS]")


def test_byte_level_round_trip_is_lossless(corpus):
    tok = load_or_train_tokenizer(corpus, vocab_size=VOCAB)
    text = "The signal\tvariance σ² → ∞ at depth 768, café 🙂\r\n  indented [not special]\n"
    enc = tok.encode(text)
    assert tok.token_to_id("[UNK]") not in enc.ids
    assert tok.decode(enc.ids) == text
    # merges learned from the corpus compress it: fewer tokens than bytes on corpus-like text
    prose = "the signal of the layer is the variance of the token and the gradient"
    assert len(tok.encode(prose).ids) < len(prose.encode())


def test_cache_is_used(corpus, cache_env, monkeypatch):
    calls = count_calls(monkeypatch, tokmod, "train_tokenizer")
    first = load_or_train_tokenizer(corpus, vocab_size=VOCAB)
    assert len(calls) == 1
    cached = list(cache_env.glob("tokenizer-*.json"))
    assert len(cached) == 1
    assert cache_env == default_cache_dir()
    second = load_or_train_tokenizer(corpus, vocab_size=VOCAB)
    assert len(calls) == 1  # loaded, not retrained
    assert second.to_str() == first.to_str()
    assert not [p for p in cache_env.iterdir() if p.name.startswith(".")]  # no temporary files left behind
    # explicit cache_dir wins over the environment
    other = cache_env.parent / "other"
    load_or_train_tokenizer(corpus, vocab_size=VOCAB, cache_dir=other)
    assert len(calls) == 2 and len(list(other.glob("tokenizer-*.json"))) == 1


def test_cache_key_tracks_corpus_and_recipe(corpus, monkeypatch):
    files = corpus_files(corpus)
    key = corpus_key(files, VOCAB)
    assert corpus_key(files, VOCAB) == key
    assert corpus_key(files, VOCAB + 1) != key
    assert corpus_key(files, VOCAB, max_bytes=10_000) != key
    assert corpus_key(files[:-1], VOCAB) != key
    st = files[0].stat()
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert corpus_key(files, VOCAB) != key

    calls = count_calls(monkeypatch, tokmod, "train_tokenizer")
    load_or_train_tokenizer(corpus, vocab_size=VOCAB)
    with files[1].open("a") as fh:
        fh.write("A new sentence.\n")
    load_or_train_tokenizer(corpus, vocab_size=VOCAB)
    assert len(calls) == 2  # an edited file invalidates the cache


@pytest.mark.parametrize("garbage", [b"", b"{not json", b'{"version": "1.0", "model": 3}'])
def test_corrupt_cache_is_retrained(corpus, garbage, monkeypatch, caplog):
    key = corpus_key(corpus_files(corpus), VOCAB)
    path = tokenizer_cache_path(key)
    path.parent.mkdir(parents=True)
    path.write_bytes(garbage)
    calls = count_calls(monkeypatch, tokmod, "train_tokenizer")
    with caplog.at_level(logging.WARNING, logger="sigprop.data"):
        tok = load_or_train_tokenizer(corpus, vocab_size=VOCAB)
    assert len(calls) == 1 and "retraining" in caplog.text
    assert pad_id(tok) == 0
    assert tokmod._load_cached(path, VOCAB) is not None  # overwritten with a good file


def test_cache_of_a_foreign_tokenizer_is_retrained(corpus, monkeypatch):
    """A loadable tokenizer file that breaks our layout (here: a larger vocabulary) is not trusted."""
    big = load_or_train_tokenizer(corpus, vocab_size=VOCAB + 100)
    path = tokenizer_cache_path(corpus_key(corpus_files(corpus), VOCAB))
    path.write_text(big.to_str())
    calls = count_calls(monkeypatch, tokmod, "train_tokenizer")
    tok = load_or_train_tokenizer(corpus, vocab_size=VOCAB)
    assert len(calls) == 1 and tok.get_vocab_size() <= VOCAB


def test_unwritable_cache_degrades_to_no_cache(corpus, tmp_path, caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with caplog.at_level(logging.WARNING, logger="sigprop.data"):
        tok = load_or_train_tokenizer(corpus, vocab_size=VOCAB, cache_dir=blocker / "cache")
    assert pad_id(tok) == 0 and "could not write cache" in caplog.text


def test_progress_goes_to_stderr_only_when_asked(corpus, capfd):
    load_or_train_tokenizer(corpus, vocab_size=VOCAB)
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # quiet by default
    load_or_train_tokenizer(corpus, vocab_size=VOCAB + 1, progress=True)
    out, err = capfd.readouterr()
    assert out == "" and "training BPE tokenizer on 6 files" in err


def test_errors(corpus, tmp_path):
    for bad in (100, MIN_VOCAB_SIZE - 1, 300.0, True, None):
        with pytest.raises(ValueError, match="vocab_size"):
            load_or_train_tokenizer(corpus, vocab_size=bad)
    with pytest.raises(FileNotFoundError):
        load_or_train_tokenizer(tmp_path / "missing", vocab_size=VOCAB)
