"""The learning-rate schedule and the training config: the schedule's formulas at their defining points, the
config's validation and its round trip through JSON and the command line's overrides."""

from __future__ import annotations

import math

import pytest

from sigprop.train.config import TrainConfig, apply_train_overrides, resolve_precision, train_config_from_dict
from sigprop.train.presets import TRAIN_PRESETS, resolve_train_configs
from sigprop.train.schedule import learning_rate


@pytest.mark.parametrize("schedule", ["cosine", "linear", "constant"])
def test_warmup_rises_linearly_to_the_peak(schedule):
    c = TrainConfig(steps=100, warmup_steps=10, lr=2e-3, schedule=schedule)
    assert [learning_rate(s, c) for s in range(10)] == pytest.approx([2e-3 * (s + 1) / 10 for s in range(10)])
    assert learning_rate(10, c) == pytest.approx(2e-3)


@pytest.mark.parametrize(("schedule", "middle"), [("cosine", 0.55), ("linear", 0.55), ("constant", 1.0)])
def test_decay_ends_at_the_final_fraction(schedule, middle):
    c = TrainConfig(steps=111, warmup_steps=10, lr=1.0, schedule=schedule, final_lr_fraction=0.1)
    assert learning_rate(110, c) == pytest.approx(1.0 if schedule == "constant" else 0.1)
    assert learning_rate(60, c) == pytest.approx(middle)  # t = 1/2: cos and linear meet at the midpoint


def test_cosine_follows_its_formula():
    c = TrainConfig(steps=50, warmup_steps=0, lr=1.0, final_lr_fraction=0.0)
    for s in range(50):
        assert learning_rate(s, c) == pytest.approx(0.5 * (1 + math.cos(math.pi * s / 49)), abs=1e-15)


def test_a_config_round_trips_through_json_and_overrides():
    c = TrainConfig(steps=7, lr=3e-4, clip=None, track_every=5, data="/x")
    assert train_config_from_dict(c.to_dict()) == c
    d = apply_train_overrides(c, ["clip=2", "track_every=none", "schedule=linear", "compile=true"])
    assert (d.clip, d.track_every, d.schedule, d.compile) == (2.0, None, "linear", True)
    with pytest.raises(ValueError, match="unknown training config field"):
        train_config_from_dict({"step": 3})


@pytest.mark.parametrize(("field", "value"), [("steps", 0), ("steps", True), ("batch_size", 2.5), ("lr", -1.0),
                                              ("lr", math.inf), ("final_lr_fraction", 1.5), ("adam_beta2", 1.0),
                                              ("val_fraction", 0.0), ("keep_checkpoints", 0), ("data", " "),
                                              ("track_every", 0), ("schedule", "step"), ("compile", "yes")])
def test_invalid_fields_are_refused_by_name(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})


def test_presets_resolve_and_files_combine(tmp_path):
    for name in TRAIN_PRESETS:
        model, train = resolve_train_configs(name)
        assert model.n_layers >= 12 and train.steps > 0
    model, train = resolve_train_configs("fig1-preln")  # a model preset trains with the default training
    assert model.n_layers == 192 and train == TrainConfig()
    both = tmp_path / "run.json"
    both.write_text('{"model_config": {"n_layers": 3}, "train_config": {"steps": 9}}')
    flat = tmp_path / "flat.json"
    flat.write_text('{"d_model": 64, "lr": 0.01}')
    model, train = resolve_train_configs("cpu-deep", [both, flat], ["n_heads=2"], ["steps=11"])
    assert (model.n_layers, model.d_model, model.n_heads, model.arch) == (3, 64, 2, "decoder")
    assert (train.steps, train.lr) == (11, 0.01)


def test_precision_resolves_per_device_and_refuses_an_unknown_arithmetic():
    assert [resolve_precision(p, d) for p in ("auto", "fp32", "bf16") for d in ("cpu", "cuda")] == [
        "fp32", "bf16", "fp32", "fp32", "bf16", "bf16"]
    with pytest.raises(ValueError, match="precision must be one of"):
        resolve_precision("fp16", "cuda")  # type: ignore[arg-type]
