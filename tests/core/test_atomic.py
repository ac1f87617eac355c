"""The one atomic write (:mod:`sigprop.core.atomic`): a file or a folder is replaced whole or not at all, with the
permissions a plain ``open`` / ``mkdir`` gives, and an error leaves the old content and no temporary behind."""

from __future__ import annotations

import os
import stat

import pytest

from sigprop.core.atomic import atomic_path


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_file_is_replaced_whole_with_plain_permissions(tmp_path):
    out = tmp_path / "sub" / "a.json"
    for text in ("first", "second"):
        with atomic_path(out, durable=True) as tmp:
            assert tmp.parent == out.parent and tmp.name.startswith(".a.json.")
            tmp.write_text(text)
        assert out.read_text() == text
    umask = os.umask(0)
    os.umask(umask)
    assert _mode(out) == 0o666 & ~umask
    assert sorted(p.name for p in out.parent.iterdir()) == ["a.json"]


def test_an_error_leaves_the_old_file_and_no_temporary(tmp_path):
    out = tmp_path / "a.txt"
    out.write_text("old")
    with pytest.raises(RuntimeError, match="half"), atomic_path(out) as tmp:
        tmp.write_text("half of the new")
        raise RuntimeError("half written")
    assert out.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_a_folder_replaces_the_old_one_whole(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "stale.bin").write_text("x")
    with atomic_path(out, folder=True) as tmp:
        (tmp / "config.json").write_text("{}")
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]
    with pytest.raises(ValueError), atomic_path(out, folder=True) as tmp:
        (tmp / "partial").write_text("")
        raise ValueError
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_an_interruption_while_the_old_folder_goes_leaves_a_whole_folder(tmp_path, monkeypatch):
    """The old folder was deleted file by file before the new one was renamed in: a Ctrl-C during the delete left
    it half gone and the new content lost."""
    import shutil

    out = tmp_path / "model"
    out.mkdir()
    for i in range(3):
        (out / f"old-{i}.bin").write_text("x")
    real = shutil.rmtree

    def interrupted(path, *args, **kwargs):  # the delete of the old folder is where Ctrl-C lands
        if os.path.basename(path) == "model" or ".model.old." in str(path):
            raise KeyboardInterrupt
        return real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", interrupted)
    with pytest.raises(KeyboardInterrupt), atomic_path(out, folder=True) as tmp:
        (tmp / "config.json").write_text("{}")
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]  # the new folder, whole


def test_a_durable_folder_flushes_every_file_in_it_before_the_rename(tmp_path, monkeypatch):
    """``durable=True`` with a folder: each file written into it (nested ones too) is flushed to disk before the
    folder is renamed into place."""
    import sigprop.core.atomic as atomic

    flushed = []
    monkeypatch.setattr(atomic, "_fsync_file", lambda p: flushed.append(p.name))
    out = tmp_path / "export"
    with atomic_path(out, folder=True, durable=True) as tmp:
        (tmp / "a.bin").write_bytes(b"1")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "b.json").write_text("{}")
    assert sorted(flushed) == ["a.bin", "b.json"] and (out / "sub" / "b.json").read_text() == "{}"
