"""The library call behind ``sigprop train``: every kind of model trains on its objective (the validation loss
falls), tracking records the statistics without changing the training by one bit, and the figures are written."""

from __future__ import annotations

import json
import math

import pytest

from sigprop.train import TrainConfig, fit
from sigprop.train.presets import resolve_train_configs
from sigprop.train.tracking import read_track
from tests.helpers import run_cli

from .conftest import TINY_MODEL, TINY_TRAIN, tiny_args


def _configs(corpus, *train, model=()):
    return resolve_train_configs(None, (), [*TINY_MODEL, *model], [*TINY_TRAIN, f"data={corpus}", *train])


def _losses(run_dir):
    return [json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("model", [("arch=decoder",), ("arch=encoder", "norm_position=post"),
                                   ("arch=encoder_decoder", "n_decoder_layers=2")])
def test_each_token_objective_lowers_the_validation_loss(corpus, tmp_path, model):
    m, t = _configs(corpus, "steps=40", "eval_every=20", "eval_batches=2", "lr=3e-3", model=model)
    result = fit(m, t, tmp_path / "run")
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert result.steps_done == 40 and result.stopped is None
    # it falls, and below log V: better than a uniform guess over the vocabulary
    assert result.validation["val_loss"] < min(run["initial_validation"]["val_loss"], math.log(m.vocab_size))
    assert {p.name for p in result.figures} == {"curves.png"}
    assert (tmp_path / "run" / "model_config.json").exists() and (tmp_path / "run" / "train_config.json").exists()


def test_a_vit_learns_the_digits(tmp_path):
    m, t = resolve_train_configs(None, (), ["input=patches", "n_layers=2", "d_model=32", "n_heads=2", "seq_len=64",
                                            "image_size=32", "patch_size=4", "n_classes=10", "dropout=0",
                                            "init=dslm"],
                                 ["steps=40", "batch_size=32", "lr=3e-3", "eval_every=40", "warmup_steps=4"])
    result = fit(m, t, tmp_path / "vit")
    assert result.validation["val_acc"] > 0.3  # chance is 0.1
    # DeepScaleLM's schedule starts from the images' token correlation, taken from the first batch (App. H)
    assert 0.0 < json.loads((tmp_path / "vit" / "run.json").read_text())["model_config"]["input_corr"] < 1.0


def test_tracking_records_without_changing_the_training(corpus, tmp_path):
    m, t = _configs(corpus, "steps=12")
    plain = fit(m, t, tmp_path / "plain")
    tracked = fit(m, t.replace(track_every=4), tmp_path / "tracked")
    assert _losses(tmp_path / "plain") == _losses(tmp_path / "tracked")
    track = read_track(tmp_path / "tracked")
    assert [p["step"] for p in track] == [0, 4, 8, 12]
    assert all(len(p["fwd_var"]) == m.n_layers and p["diagnosis"]["findings"] for p in track)
    assert all(len(p["attn_entropy"]) == m.n_layers and all(0.0 <= e <= 1.0 + 1e-9 for e in p["attn_entropy"])
               for p in track)
    assert all(set(p["diagnosis"]["flagged_findings"]) <= set(p["diagnosis"]["findings"]) for p in track)
    prediction = json.loads((tmp_path / "tracked" / "track-prediction.json").read_text())
    assert prediction["layers"] == list(range(m.n_layers))
    metrics = [json.loads(line) for line in (tmp_path / "tracked" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in metrics if "diagnosis" in r] == [4, 8, 12]
    assert {p.name for p in tracked.figures} == {"curves.png", "track.png"}
    assert plain.last["loss"] == tracked.last["loss"]
    figure = tmp_path / "both.png"
    result = run_cli(["train", "plot", str(tmp_path / "plain"), str(tmp_path / "tracked"), "--out", str(figure)])
    assert result.exit_code == 0 and figure.stat().st_size > 10_000


def test_learnable_residual_scales_are_logged(corpus, tmp_path):
    m, t = _configs(corpus, "steps=3", model=("learnable_beta=true",))
    fit(m, t, tmp_path / "beta")
    last = json.loads((tmp_path / "beta" / "metrics.jsonl").read_text().splitlines()[-1])
    assert len(last["beta"]) == 2 * m.n_layers  # one per residual branch


def test_the_library_refuses_what_is_not_a_config(tmp_path):
    with pytest.raises(ValueError, match="TrainConfig"):
        fit(resolve_train_configs("cpu-deep")[0], {"steps": 3}, tmp_path / "x")
    assert TrainConfig().steps > 0


def test_tensorboard_scalars_hold_the_metrics(corpus, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    m, t = _configs(corpus, "steps=4", "tensorboard=true")
    fit(m, t, tmp_path / "tb")
    events = EventAccumulator(str(tmp_path / "tb" / "tensorboard"))
    events.Reload()
    losses = [e.value for e in events.Scalars("loss")]
    assert losses == pytest.approx(_losses(tmp_path / "tb"), rel=1e-6)  # stored as float32
    assert {"lr", "grad_norm", "val_loss"} <= set(events.Tags()["scalars"])


@pytest.mark.long
def test_compile_compiles_one_layer_for_every_layer_of_its_shape(corpus, tmp_path):
    import torch
    from torch._dynamo.utils import counters

    m, t = _configs(corpus, "steps=4", "eval_every=4", model=("n_layers=6", "dropout=0"))
    fit(m, t, tmp_path / "eager")
    torch._dynamo.reset()
    counters.clear()
    fit(m, t.replace(compile=True), tmp_path / "compiled")
    # six layers, two graphs: one layer in training mode, one in eval mode (the validation), not one per layer
    assert counters["stats"]["unique_graphs"] == 2
    eager, compiled = _losses(tmp_path / "eager"), _losses(tmp_path / "compiled")
    assert compiled == pytest.approx(eager, rel=1e-5)  # fused kernels round differently
    torch._dynamo.reset()


def test_a_flagged_track_point_is_shown_while_the_run_goes_on(corpus, tmp_path):
    # DeepNet's skip scale compounds in a Pre-LN stack: the forward variance explodes, the final norm hides it
    args = tiny_args(corpus, "steps=2", "track_every=2", model=("init=deepnorm", "n_layers=8", "dropout=0"))
    result = run_cli(["train", *args, "--out", str(tmp_path / "flagged")])
    assert result.exit_code == 0, result.stderr
    assert "step 2, tracked: forward variance explodes" in result.stderr


def test_a_shaped_recover_model_is_annealed_by_the_trainer(corpus, tmp_path):
    """App. D's "recover": γ₁, γ₂ of every shaped attention (and s₋ of the shaped ReLU) fall linearly to 0 over
    shaped_anneal_steps optimiser steps; the trainer anneals once per step, so the final checkpoint holds zeros."""
    from safetensors.torch import load_file

    m, t = _configs(corpus, "steps=8", "eval_every=8", "checkpoint_every=8",
                    model=("arch=encoder", "attention=shaped", "activation=shaped_relu", "init=shaped",
                           "norm_position=none", "dropout=0", "shaped_mode=recover", "shaped_anneal_steps=4"))
    fit(m, t, tmp_path / "run")
    tensors = load_file(str(next((tmp_path / "run").glob("ckpt-*.safetensors"))))
    gammas = {k: v for k, v in tensors.items() if k.endswith(("gamma1", "gamma2"))}
    assert len(gammas) == 2 * m.n_layers and all(float(v.abs().max()) == 0.0 for v in gammas.values())


def test_a_relative_data_path_is_recorded_whole_and_a_restart_on_other_data_is_refused(corpus, tmp_path,
                                                                                        monkeypatch):
    """``--data corpus`` from one folder is recorded as its absolute path, so resuming from elsewhere reads the
    same corpus; a run resumed before its first checkpoint on data that changed since is refused by name, not
    silently started on the other data."""
    import shutil

    from sigprop.train.run_dir import read_run

    shutil.copytree(corpus, tmp_path / "corpus")
    monkeypatch.chdir(tmp_path)
    args = [a if a != str(corpus) else "corpus" for a in tiny_args(corpus, "steps=2", "checkpoint_every=100")]
    done = run_cli(["train", *args, "--out", "run"])
    assert done.exit_code == 0, done.stderr
    assert read_run(tmp_path / "run")["train_config"]["data"] == str((tmp_path / "corpus").resolve())
    for ck in (tmp_path / "run").glob("ckpt-*"):  # as if killed before its first checkpoint
        ck.unlink()
    (tmp_path / "corpus" / "json___init__.py").write_text("x = 1\n" * 500)
    monkeypatch.chdir(tmp_path.parent)
    done = run_cli(["train", "--resume", str(tmp_path / "run")])
    assert done.exit_code == 2 and "started on other data" in done.stderr, done.output
