"""Checkpoints: what they hold, what they refuse. A truncated, tampered or foreign checkpoint gives one line on
stderr and exit status 2 (never a traceback from inside torch); a run whose loss stops being finite exits 3 with
the step, what went non-finite and the theory's opinion, its last good checkpoint intact and loadable."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from sigprop.model.config import config_from_dict
from sigprop.model.transformer import Transformer
from sigprop.train.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, model_state
from tests.helpers import CliResult, run_cli

from .conftest import tiny_args


def train(*args: str) -> CliResult:
    """``sigprop train ARGS`` in this process (what is checked is the run's files, its exit status and its stderr)."""
    return run_cli(["train", *args])


@pytest.fixture(scope="module")
def run(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "base"
    done = train(*tiny_args(corpus, "steps=6", "checkpoint_every=3"), "--out", str(out))
    assert done.exit_code == 0, done.stderr
    return out


def _copy(run, tmp_path):
    target = tmp_path / "copy"
    shutil.copytree(run, target)
    return target


def _one_line_error(result, *needles):
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_a_checkpoint_holds_the_model_and_loads_into_a_fresh_one(run):
    path = latest_checkpoint(run)
    info = json.loads(path.read_text())
    assert info["step"] == 6 and info["next_step"] == 6
    config = config_from_dict(info["model_config"])
    model = Transformer(config)
    ck = load_checkpoint(path, config.to_dict(), {k: tuple(v.shape) for k, v in model.state_dict().items()})
    model.load_state_dict(model_state(ck))
    assert any(k.startswith("optim/") and k.endswith("exp_avg_sq") for k in ck.tensors)
    assert {"rng/torch", "rng/numpy", "rng/python"} <= set(ck.tensors)
    assert sorted(p.name for p in run.glob("ckpt-*")) == [f"ckpt-0000000{s}.{e}" for s in (3, 6)
                                                          for e in ("json", "safetensors")]


def test_the_tensors_file_holds_no_pickle(run):
    blob = latest_checkpoint(run).with_suffix(".safetensors").read_bytes()
    header_len = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + header_len])  # safetensors: an 8-byte length, a JSON header, raw tensor bytes
    assert "__metadata__" in header and b"\x80\x04" not in blob[:2]


def test_a_truncated_tensors_file_is_refused_in_one_line(run, tmp_path):
    copy = _copy(run, tmp_path)
    f = latest_checkpoint(copy).with_suffix(".safetensors")
    f.write_bytes(f.read_bytes()[:1000])
    _one_line_error(train("--resume", str(copy)), "SHA-256")


def test_a_tampered_tensors_file_is_refused_in_one_line(run, tmp_path):
    copy = _copy(run, tmp_path)
    f = latest_checkpoint(copy).with_suffix(".safetensors")
    data = bytearray(f.read_bytes())
    data[-5] ^= 0x40  # one bit of one weight
    f.write_bytes(bytes(data))
    _one_line_error(train("--resume", str(copy)), "SHA-256")


def test_a_truncated_json_is_refused_in_one_line(run, tmp_path):
    copy = _copy(run, tmp_path)
    f = latest_checkpoint(copy)
    f.write_text(f.read_text()[:200])
    _one_line_error(train("--resume", str(copy)), "truncated")


def test_an_edited_json_whose_hash_still_matches_is_refused_when_its_config_is_foreign(run, tmp_path):
    copy = _copy(run, tmp_path)
    f = latest_checkpoint(copy)
    info = json.loads(f.read_text())
    info["model_config"]["n_layers"] = 3
    f.write_text(json.dumps(info))
    _one_line_error(train("--resume", str(copy)), "another model", "n_layers")


@pytest.mark.parametrize("change", ["n_layers=3", "vocab_size=280"])
def test_a_checkpoint_of_another_model_or_vocabulary_is_refused_in_one_line(corpus, run, tmp_path, change):
    other = tmp_path / "other"
    done = train(*tiny_args(corpus, "steps=4", "checkpoint_every=4", model=(change,)), "--out", str(other))
    assert done.exit_code == 0, done.stderr
    copy = _copy(run, tmp_path)
    for suffix in ("json", "safetensors"):  # the foreign checkpoint, renamed to be the newest
        shutil.copy(other / f"ckpt-00000004.{suffix}", copy / f"ckpt-00000009.{suffix}")
    info = json.loads((copy / "ckpt-00000009.json").read_text())
    info["tensors_file"] = "ckpt-00000009.safetensors"
    (copy / "ckpt-00000009.json").write_text(json.dumps(info))
    _one_line_error(train("--resume", str(copy)), "another model", change.split("=")[0])


def test_a_foreign_tensors_file_is_refused_before_torch_sees_it(run, tmp_path):
    copy = _copy(run, tmp_path)
    path = latest_checkpoint(copy)
    config = config_from_dict(json.loads(path.read_text())["model_config"])
    wrong = {k: (1,) for k in Transformer(config).state_dict()}
    with pytest.raises(CheckpointError, match="does not fit the model"):
        load_checkpoint(path, config.to_dict(), wrong)


def test_a_diverging_run_stops_with_the_step_and_keeps_its_last_good_checkpoint(corpus, tmp_path):
    out = tmp_path / "diverged"
    args = tiny_args(corpus, "steps=60", "checkpoint_every=2", "lr=1000", "warmup_steps=0", "clip=none",
                     "schedule=constant")
    result = train(*args, "--out", str(out))
    assert result.exit_code == 3, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr
    step = int(errors[0].split("step ")[1].split(":")[0])
    assert "not finite" in errors[0] and "last good checkpoint" in errors[0]
    path = latest_checkpoint(out)
    assert path is not None and int(path.stem.split("-")[1]) < step
    info = json.loads(path.read_text())
    config = config_from_dict(info["model_config"])
    model = Transformer(config)
    ck = load_checkpoint(path, config.to_dict(), {k: tuple(v.shape) for k, v in model.state_dict().items()})
    model.load_state_dict(model_state(ck))
    assert all(torch.isfinite(p).all() for p in model.parameters())
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["step"] == step and last["non_finite"] in ("loss", "gradient norm")


def test_a_model_that_overflows_at_initialisation_gets_the_theory_s_hint(corpus, tmp_path):
    args = tiny_args(corpus, "steps=3", model=("init=deepnorm", "n_layers=40", "dropout=0"))
    result = train(*args, "--out", str(tmp_path / "deepnet"))
    assert result.exit_code == 3
    assert "step 1: the loss is not finite" in result.stderr and "--set init=dslm" in result.stderr


def test_a_checkpoint_from_before_a_field_was_added_still_resumes(run, tmp_path):
    copy = _copy(run, tmp_path)  # a field missing from an older checkpoint was written with its default
    for name in ("run.json", latest_checkpoint(copy).name):
        info = json.loads((copy / name).read_text())
        del info["train_config"]["tensorboard"], info["model_config"]["shaped_gamma"]
        (copy / name).write_text(json.dumps(info))
    result = train("--resume", str(copy))
    assert result.exit_code == 0, result.stderr
    assert "the run is complete (6 of 6 steps)" in result.stderr


def test_a_run_stopped_before_its_first_checkpoint_starts_again_from_step_0(run, tmp_path):
    copy = _copy(run, tmp_path)
    for f in copy.glob("ckpt-*"):
        f.unlink()
    (copy / ".ckpt-00000003.safetensors.x.tmp").write_bytes(b"cut short")
    (copy / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text().splitlines()[0] + "\n")
    result = train("--resume", str(copy))
    assert result.exit_code == 0, result.stderr
    assert "starting it again from step 0" in result.stderr
    assert (copy / "metrics.jsonl").read_text().count("\n") == 6
    losses = [json.loads(line)["loss"] for line in (copy / "metrics.jsonl").read_text().splitlines()]
    assert losses == [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert not list(copy.glob(".ckpt-*.tmp"))


def test_checkpoints_past_step_10_8_sort_by_their_step(tmp_path):
    """Names are zero-padded to 8 digits; from step 10⁸ on they grow, and the newest is still the newest."""
    from sigprop.train.checkpoint import list_checkpoints

    for step in (99_999_999, 100_000_000, 7):
        (tmp_path / f"ckpt-{step:08d}.json").write_text("{}")
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt-00000007.json", "ckpt-99999999.json",
                                                             "ckpt-100000000.json"]
    assert latest_checkpoint(tmp_path).name == "ckpt-100000000.json"


def test_a_folder_with_another_run_s_checkpoints_is_refused_for_a_new_run(corpus, tmp_path):
    out = tmp_path / "stale"
    out.mkdir()
    (out / "ckpt-00000009.json").write_text("{}")
    _one_line_error(train(*tiny_args(corpus, "steps=2"), "--out", str(out)), "holds checkpoints")


def test_what_cannot_train_is_refused_before_the_run_folder_is_written(corpus, tmp_path):
    """A decoder of one token has no next token to predict; one image leaves nothing to validate on; images of one
    class (a .npy array, which carries no labels) leave nothing to learn."""
    out = tmp_path / "one-token"
    _one_line_error(train(*tiny_args(corpus, "steps=2"), "--set", "seq_len=1", "--out", str(out)),
                    "needs seq_len >= 2")
    assert not (out / "run.json").exists()
    import numpy as np

    np.save(tmp_path / "one.npy", np.ones((1, 8, 8)))
    vit = ["--set", "input=patches", "--set", "image_size=8", "--set", "patch_size=4", "--set", "n_classes=2",
           "--set", "n_layers=1", "--set", "d_model=16", "--set", "n_heads=2", "--set", "seq_len=4"]
    out = tmp_path / "one-image"
    _one_line_error(train(*vit, "--train-set", "steps=2", "--data", str(tmp_path / "one.npy"), "--out", str(out)),
                    "at least 2")
    assert not (out / "run.json").exists()
    np.save(tmp_path / "noise.npy", np.random.default_rng(0).random((40, 8, 8)))  # no labels: one class
    out = tmp_path / "one-class"
    _one_line_error(train(*vit, "--train-set", "steps=2", "--data", str(tmp_path / "noise.npy"), "--out", str(out)),
                    "at least two classes")
    assert not (out / "run.json").exists()


def test_a_run_that_raises_closes_its_progress(corpus, tmp_path):
    """The progress display is ended also when the loop raises (a terminal's live bar would keep the cursor
    hidden): here the display itself raises at the second step."""
    from sigprop.train import fit
    from sigprop.train.presets import resolve_train_configs

    calls = []

    class Recorder:
        def begin(self, total, first):
            calls.append("begin")

        def update(self, record):
            if record["step"] == 2:
                raise RuntimeError("stop here")

        def note(self, text):
            pass

        def end(self):
            calls.append("end")

    args = tiny_args(corpus, "steps=6")
    sets = [args[i + 1] for i in range(len(args) - 1) if args[i] == "--set"]
    train_sets = [args[i + 1] for i in range(len(args) - 1) if args[i] == "--train-set"]
    model_config, train_config = resolve_train_configs(None, None, sets, [*train_sets, f"data={corpus}"])
    with pytest.raises(RuntimeError, match="stop here"):
        fit(model_config, train_config, tmp_path / "raises", progress=Recorder())
    assert calls == ["begin", "end"]


def test_resuming_a_complete_run_without_its_figures_draws_them(run, tmp_path):
    """A run stopped between its last checkpoint and its figures is complete: resuming it trains nothing and
    draws the figures."""
    copy = _copy(run, tmp_path)
    (copy / "curves.png").unlink()
    done = train("--resume", str(copy))
    assert done.exit_code == 0, done.stderr
    assert "nothing to resume" in done.output and (copy / "curves.png").exists()


def test_a_broken_checkpoint_is_refused_before_the_corpus_is_read(run, tmp_path, monkeypatch):
    import importlib

    fit_module = importlib.import_module("sigprop.train.fit")  # the module (the package exports a function fit)

    copy = _copy(run, tmp_path)
    path = latest_checkpoint(copy)
    path.write_text(path.read_text()[:40])
    monkeypatch.setattr(fit_module, "make_data", lambda *a, **k: pytest.fail("the corpus was read first"))
    with pytest.raises(CheckpointError, match="unreadable or truncated"):
        fit_module.resume(copy)
