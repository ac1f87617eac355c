"""Corpus selection: the standard library by default, a user's files or folders, caps and unusable files."""

import sysconfig
from pathlib import Path

import pytest

import sigprop.data.corpus as corpusmod
from sigprop.data.corpus import corpus_files, default_corpus_path, read_texts
from tests.data import make_corpus


def test_default_corpus_is_the_stdlib():
    root = Path(sysconfig.get_paths()["stdlib"])
    assert default_corpus_path() == root
    assert (root / "os.py").is_file()  # the folder really is the standard library

    cap = 300_000
    files = corpus_files(max_bytes=cap)
    assert files == sorted(files) and files
    assert sum(f.stat().st_size for f in files) <= cap
    skip = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
    for f in files:
        rel = f.relative_to(root.resolve())
        assert f.suffix == ".py"
        assert not skip & set(rel.parts[:-1]), rel
    assert corpus_files(max_bytes=cap) == files  # deterministic


def test_python_corpus_is_the_stdlib_and_the_installed_packages(tmp_path, monkeypatch):
    """``data="python"``: sources of both the standard library and site-packages, the stdlib's skips applied to
    both, its own cap by default; a folder called ``python`` needs a path that is not the bare name."""
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    packages = Path(sysconfig.get_paths()["purelib"]).resolve()
    files = corpus_files("python", max_bytes=3_000_000)
    assert files == sorted(files) and sum(f.stat().st_size for f in files) <= 3_000_000
    assert any(f.is_relative_to(packages) for f in files)
    assert any(f.is_relative_to(stdlib) and not f.is_relative_to(packages) for f in files)
    skip = {"test", "tests", "idle_test", "__pycache__"}
    assert all(f.suffix == ".py" and not skip & set(f.parts[:-1]) for f in files)
    assert corpus_files("python", max_bytes=3_000_000) == files  # deterministic
    assert corpusmod.default_max_bytes("python", None) == corpusmod.PYTHON_MAX_BYTES
    assert corpusmod.default_max_bytes(None, None) == corpusmod.DEFAULT_MAX_BYTES
    assert corpusmod.default_max_bytes(tmp_path, None) is None
    assert corpusmod.default_max_bytes("python", 10) == 10
    folder = tmp_path / "python"
    folder.mkdir()
    (folder / "a.txt").write_text("hello\n")
    assert corpus_files(folder) == [(folder / "a.txt").resolve()]


def test_default_cap_applies_to_stdlib_only(tmp_path, monkeypatch):
    monkeypatch.setattr(corpusmod, "DEFAULT_MAX_BYTES", 50_000)
    assert 0 < sum(f.stat().st_size for f in corpus_files()) <= 50_000  # the stdlib gets the default cap
    big = tmp_path / "big.txt"
    big.write_text("x" * 60_000 + "\n")
    assert list(read_texts(corpus_files(big))) == ["x" * 60_000 + "\n"]  # a user's file does not


def test_folder_is_walked_recursively_with_suffixes(tmp_path):
    made = make_corpus(tmp_path, n_files=6, n_words=50)
    (tmp_path / "notes.MD").write_text("# heading\n")
    (tmp_path / "data.bin").write_bytes(b"\x00\x01\x02")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    hidden = tmp_path / ".git"
    hidden.mkdir()
    (hidden / "config.txt").write_text("secret\n")
    (tmp_path / ".hidden.txt").write_text("hidden\n")

    files = corpus_files(tmp_path)
    assert files == sorted(made + [(tmp_path / "notes.MD").resolve()])
    assert corpus_files(tmp_path, suffixes=["txt"]) == made  # dot optional
    assert corpus_files(tmp_path, suffixes=".md") == [(tmp_path / "notes.MD").resolve()]  # case-insensitive, str ok
    assert corpus_files(made[0]) == [made[0]]


def test_single_file_any_suffix(tmp_path):
    f = tmp_path / "log.weird"
    f.write_text("hello world\n")
    assert corpus_files(f) == [f.resolve()]
    assert list(read_texts(corpus_files(f))) == ["hello world\n"]


def test_unusable_files_are_skipped(tmp_path):
    good = tmp_path / "good.txt"
    good.write_text("good text\n", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1"))  # not UTF-8
    (tmp_path / "nul.txt").write_bytes(b"abc\x00def")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("  \n\n")
    bom = tmp_path / "bom.txt"
    bom.write_bytes("\ufeffwith bom\n".encode())
    files = corpus_files(tmp_path)
    assert files == sorted([good.resolve(), bom.resolve()])
    assert list(read_texts(files)) == ["with bom\n", "good text\n"]  # BOM dropped, order kept
    # read_texts is given an undecodable file directly: skipped, not raised
    assert list(read_texts([tmp_path / "latin1.txt", good, tmp_path / "missing.txt"])) == ["good text\n"]


def test_max_bytes_caps_the_total(tmp_path):
    made = make_corpus(tmp_path, n_files=9, n_words=200)
    sizes = {f: f.stat().st_size for f in made}
    cap = int(sum(sizes.values()) * 0.5)
    files = corpus_files(tmp_path, max_bytes=cap)
    assert 0 < len(files) < len(made)
    assert files == sorted(files)
    assert sum(sizes[f] for f in files) <= cap
    # greedy: no file left out would still have fitted
    room = cap - sum(sizes[f] for f in files)
    assert all(sizes[f] > room for f in made if f not in files)
    assert corpus_files(tmp_path, max_bytes=cap) == files
    assert corpus_files(tmp_path, max_bytes=float("inf")) == made


def test_file_larger_than_cap_is_truncated(tmp_path):
    f = tmp_path / "one.txt"
    f.write_text("abcdefghij" * 100)
    files = corpus_files(f, max_bytes=25)
    assert files == [f.resolve()]
    assert "".join(read_texts(files, max_bytes=25)) == ("abcdefghij" * 3)[:25]
    # a cap inside a multi-byte character drops only that character
    g = tmp_path / "utf8.txt"
    g.write_text("ab\u00e9cd", encoding="utf-8")  # é is 2 bytes: a b é(2) c d
    assert list(read_texts([g], max_bytes=3)) == ["ab"]
    assert list(read_texts([g], max_bytes=4)) == ["ab\u00e9"]


def test_read_texts_total_cap_across_files(tmp_path):
    made = make_corpus(tmp_path, n_files=3, n_words=100)
    first = made[0].stat().st_size
    texts = list(read_texts(made, max_bytes=first + 10))
    assert len(texts) == 2 and len(texts[1]) == 10


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        corpus_files(tmp_path / "nope")
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    with pytest.raises(ValueError, match="no files with suffixes"):
        corpus_files(empty)
    (empty / "x.bin").write_bytes(b"\x00")
    (empty / "y.txt").write_bytes(b"\xff\xfe\x00\x00")
    with pytest.raises(ValueError, match="no usable text"):
        corpus_files(empty)
    with pytest.raises(ValueError, match="max_bytes"):
        corpus_files(tmp_path, max_bytes=0)
    with pytest.raises(ValueError, match="max_bytes"):
        corpus_files(tmp_path, max_bytes="8MB")
    with pytest.raises(ValueError, match="suffixes"):
        corpus_files(tmp_path, suffixes=["."])
    with pytest.raises(ValueError, match="suffixes"):
        corpus_files(tmp_path, suffixes=[])
