"""Bad input to ``sigprop train`` gets one ``error:`` line on stderr and exit status 2 before any work starts: no
tokenizer trained, no model built, nothing written into the run directory."""

from __future__ import annotations

import pytest

from tests.cli.test_front_door import refused
from tests.helpers import run_cli

TINY = ["--set", "n_layers=2", "--set", "d_model=32", "--set", "n_heads=2", "--set", "vocab_size=300",
        "--set", "seq_len=16", "--set", "max_len=16"]


@pytest.mark.parametrize(("args", "needle"), [
    (["--train-set", "steps=0"], "steps"),
    (["--train-set", "steps=-3"], "steps"),
    (["--train-set", "batch_size=0"], "batch_size"),
    (["--train-set", "lr=0"], "lr"),
    (["--train-set", "lr=nan"], "lr"),
    (["--train-set", "schedule=exp"], "schedule"),
    (["--train-set", "clip=-1"], "clip"),
    (["--train-set", "warmup_steps=1.5"], "warmup_steps"),
    (["--train-set", "eval_every=0"], "eval_every"),
    (["--train-set", "precision=fp16"], "precision"),
    (["--train-set", "compile=maybe"], "compile"),
    (["--train-set", "nonsense=1"], "nonsense"),
    (["--train-set", "steps"], "key=value"),
    (["--track-every", "0"], "track_every"),
    (["--set", "n_layers=0"], "n_layers"),
    (["--set", "lam=0", "--set", "beta=0"], "lam and beta"),
    (["--preset", "no-such-preset"], "unknown preset"),
])
def test_invalid_configurations(tmp_path, args, needle):
    refused(["train", *TINY, *args, "--out", str(tmp_path / "run")], needle)
    assert not (tmp_path / "run").exists()


def test_no_run_directory_named():
    refused(["train", *TINY], "--out")


def test_resume_of_a_folder_that_does_not_exist(tmp_path):
    refused(["train", "--resume", str(tmp_path / "missing")], "no such folder")


def test_resume_of_a_folder_that_holds_no_run(tmp_path):
    refused(["train", "--resume", str(tmp_path)], "not a run directory")


def test_resume_with_other_options(tmp_path):
    refused(["train", "--resume", str(tmp_path), "--set", "n_layers=3"], "--resume")


def test_resume_of_a_run_whose_run_json_is_damaged(tmp_path):
    (tmp_path / "run.json").write_text('{"model_config": {"n_layers": 0}, "train_config": {}}')
    refused(["train", "--resume", str(tmp_path)], "n_layers")
    (tmp_path / "run.json").write_text('{"model_config": ')
    refused(["train", "--resume", str(tmp_path)], "unreadable")


def test_an_unwritable_run_directory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    refused(["train", *TINY, "--out", str(blocker)], "--out", "is a file")
    refused(["train", *TINY, "--out", str(blocker / "run")], "--out", "is a file")
    refused(["train", *TINY, "--out", "/proc/self/run"], "--out", "cannot write")


def test_a_run_directory_that_already_holds_a_run(tmp_path):
    (tmp_path / "run.json").write_text("{}")
    refused(["train", *TINY, "--out", str(tmp_path)], "already holds a run", "--resume")


def test_data_without_text(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "blob.bin").write_bytes(b"\x00\x01")
    refused(["train", *TINY, "--data", str(empty), "--out", str(tmp_path / "run")], "no files")
    (empty / "a.txt").write_bytes(b"\x00\x00binary")
    refused(["train", *TINY, "--data", str(empty), "--out", str(tmp_path / "run")], "no usable text")
    refused(["train", *TINY, "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "run")], "does not exist")


def test_an_empty_device_name(tmp_path):
    refused(["train", *TINY, "--device", "", "--out", str(tmp_path / "run")], "--device")


def test_train_plot_of_a_folder_that_is_no_run(tmp_path):
    refused(["train", "plot", str(tmp_path), "--out", str(tmp_path / "f.png")], "not a run directory")
    refused(["train", "plot", str(tmp_path), "--out", str(tmp_path / "f.txt")], ".png")


def test_train_help_lists_the_interface():
    out = run_cli(["train", "--help"]).stdout
    for option in ("--preset", "--config", "--set", "--train-set", "--out", "--resume", "--track-every", "plot"):
        assert option in out


@pytest.mark.parametrize("data", ["./python", "none", "my corpus/part=1"])
def test_data_reaches_training_as_typed(data, monkeypatch, tmp_path):
    """``--data`` is a path as typed: `./python` is a folder (not the corpus named `python`), `none` a folder named
    so (not the default corpus), and a value with `=` or spaces is not parsed as an override."""
    import sigprop.train

    got = []

    def fit(model_config, train_config, out, **kwargs):
        got.append(train_config.data)
        raise SystemExit(0)

    monkeypatch.setattr(sigprop.train, "fit", fit)
    run_cli(["train", *TINY, "--data", data, "--out", str(tmp_path / "run")])
    assert got == [data]
