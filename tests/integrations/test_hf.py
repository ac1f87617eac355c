"""``sigprop.integrations.hf.SigpropCallback`` in a Hugging Face ``Trainer`` run (a tiny GPT-2 from its config, CPU):
the points at the Trainer's optimiser steps with gradient accumulation, TensorBoard scalars in the Trainer's own
TensorBoard folder, the theory of the mapped family, and the trained weights bit-identical without the callback."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from sigprop.integrations.hf import SigpropCallback  # noqa: E402
from sigprop.monitor import read_track  # noqa: E402

VOCAB, LENGTH = 64, 16


class _Ids(torch.utils.data.Dataset):
    def __init__(self, n: int):
        self.ids = torch.randint(0, VOCAB, (n, LENGTH), generator=torch.Generator().manual_seed(7))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _train(tmp_path, name: str, callbacks, report_to):
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=32, n_layer=3, n_head=2)
    transformers.set_seed(0)
    model = transformers.GPT2LMHeadModel(config)  # dropout 0.1 everywhere, on while training
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / name), max_steps=10, per_device_train_batch_size=4, gradient_accumulation_steps=2,
        learning_rate=1e-3, logging_steps=5, save_strategy="no", report_to=report_to, seed=0, use_cpu=True,
        disable_tqdm=True, dataloader_num_workers=0)
    transformers.Trainer(model=model, args=args, train_dataset=_Ids(64), callbacks=callbacks).train()
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_the_trainer_is_monitored_without_changing_its_training(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    probe = {"input_ids": torch.randint(0, VOCAB, (4, LENGTH), generator=torch.Generator().manual_seed(99))}
    callback = SigpropCallback(probe, every=5, log_dir=tmp_path / "track")
    watched = _train(tmp_path, "watched", [callback], ["tensorboard"])
    plain = _train(tmp_path, "plain", [], [])
    assert plain.keys() == watched.keys() and all(torch.equal(plain[k], watched[k]) for k in plain)

    assert [p.step for p in callback.history] == [0, 5, 10]
    assert read_track(tmp_path / "track") == [p.to_json() for p in callback.history]
    assert all(p.columns.layers == (0, 1, 2) for p in callback.history)
    assert callback.history[0].columns.grad_var != callback.history[-1].columns.grad_var
    theory = callback.monitor.theory
    assert theory.columns is not None and theory.columns.layers == (0, 1, 2)  # GPT-2 is a mapped family
    events = EventAccumulator(str(tmp_path / "tb"))  # the Trainer's own TensorBoard folder: its scalars and ours
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert "train/loss" in tags and "sigprop/theory/fwd_var/layer_00" in tags
    scalars = events.Scalars("sigprop/grad_var/layer_02")
    assert [s.step for s in scalars] == [0, 5, 10]
    assert [s.value for s in scalars] == pytest.approx([p.columns.grad_var[2] for p in callback.history], rel=1e-6)


def test_bad_input_is_refused_before_training(tmp_path):
    with pytest.raises(ValueError, match="every must be"):
        SigpropCallback({"input_ids": torch.zeros(1, 4, dtype=torch.long)}, every=0)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="log_dir"):
        SigpropCallback({"input_ids": torch.zeros(1, 4, dtype=torch.long)}, every=1, log_dir=tmp_path / "file")
    callback = SigpropCallback({"input_ids": torch.full((2, LENGTH), VOCAB + 5)}, every=1)
    with pytest.raises(ValueError, match="the probe batch cannot be taken by GPT2LMHeadModel"):
        _train(tmp_path, "bad", [callback], [])


def test_a_resumed_run_keeps_its_points_and_its_step_zero_theory(tmp_path):
    """Resuming from a checkpoint once deleted the first run's points and recomputed the theory from the trained
    weights, which then became the alerts' reference."""
    import json

    probe = {"input_ids": torch.randint(0, VOCAB, (2, LENGTH), generator=torch.Generator().manual_seed(99))}
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=32, n_layer=2, n_head=2)
    log_dir = tmp_path / "probe"

    def run(max_steps, resume):
        transformers.set_seed(0)
        callback = SigpropCallback(probe, every=2, log_dir=log_dir)
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / "out"), max_steps=max_steps, per_device_train_batch_size=4, use_cpu=True,
            report_to=[], save_strategy="steps", save_steps=3, logging_strategy="no", disable_tqdm=True, seed=0)
        transformers.Trainer(model=transformers.GPT2LMHeadModel(config), args=args, train_dataset=_Ids(64),
                             callbacks=[callback]).train(resume_from_checkpoint=resume)
        return callback

    run(3, None)
    theory = (log_dir / "track-prediction.json").read_text()
    assert [r["step"] for r in read_track(log_dir)] == [0, 2]
    resumed = run(6, str(tmp_path / "out" / "checkpoint-3"))
    assert [r["step"] for r in read_track(log_dir)] == [0, 2, 4, 6]
    assert (log_dir / "track-prediction.json").read_text() == theory and json.loads(theory)["step"] == 0
    assert resumed.history[0].step == 0  # the alerts' reference is the first run's first point


def test_the_probe_runs_in_the_weights_precision_under_the_trainer_s_mixed_precision(tmp_path):
    """bf16=True makes accelerate wrap the model's forward in autocast itself, which the probe's autocast-off
    context around the call could not undo: every probe ran in bf16."""
    probe = {"input_ids": torch.randint(0, VOCAB, (2, LENGTH), generator=torch.Generator().manual_seed(99))}
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=32, n_layer=2, n_head=2)
    transformers.set_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    dtypes: list[set] = []
    seen: set = set()
    model.transformer.h[0].mlp.c_fc.register_forward_hook(lambda module, args, out: seen.add(out.dtype))
    callback = SigpropCallback(probe, every=1, theory=False)
    step = callback.pending.step

    def probed(at):  # what the probe's own forward passes ran in; the Trainer's forward back in place after
        seen.clear()
        wrapped = model.__dict__.get("forward")
        point = step(at)
        if point is not None:
            dtypes.append(set(seen))
        assert model.__dict__.get("forward") is wrapped
        return point

    callback.pending.step = probed
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=4, bf16=True, use_cpu=True,
        report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True)
    transformers.Trainer(model=model, args=args, train_dataset=_Ids(16), callbacks=[callback]).train()
    assert dtypes == [{torch.float32}] * 3
