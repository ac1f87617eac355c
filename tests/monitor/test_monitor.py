"""``sigprop.Monitor`` in a plain training loop: the points, their files and TensorBoard scalars, training unchanged to
the bit (dropout on, gradient accumulation), a user's own module with only ``loss_fn``, compiled and autocast models,
the warning of a layer whose gradient vanishes, and bad input refused before training."""

from __future__ import annotations

import dataclasses
import json
import logging
import time

import pytest
import torch

import sigprop
from sigprop.monitor import TRACK_FILE, AlertKind, read_track
from sigprop.monitor.track_file import read_prediction

from .nanogpt import NanoGPT, nanogpt_batch, nanogpt_loss

CONFIG = dict(n_layers=3, d_model=32, n_heads=2, vocab_size=64, seq_len=16, dropout=0.1)


def _sigprop_model(seed: int = 0):
    torch.manual_seed(seed)
    config = sigprop.TransformerConfig(**CONFIG)
    return config, sigprop.Transformer(config)


def _sigprop_batch(config, seed: int):
    ids = torch.randint(5, config.vocab_size, (4, config.seq_len), generator=torch.Generator().manual_seed(seed))
    return sigprop.make_batch(config, ids)


def _train(model, loss_of, batch_of, steps: int, monitor=None, accumulate: int = 1):
    """Adam on ``loss_of(model, batch_of(step, micro))``; the monitor stepped after every optimiser step and, to
    show it leaves an accumulating gradient alone, between micro-batches too."""
    torch.manual_seed(1)  # the run's dropout stream
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    if monitor is not None:
        monitor.step(0)
    for step in range(steps):
        for micro in range(accumulate):
            (loss_of(model, batch_of(step, micro)) / accumulate).backward()
            if monitor is not None and micro < accumulate - 1:
                monitor.probe.measure()  # a probe in the middle of the accumulation
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if monitor is not None:
            monitor.step(step + 1)
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_a_plain_loop_gets_points_files_and_tensorboard_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config, model = _sigprop_model()
    probe = _sigprop_batch(config, 99)
    with sigprop.Monitor(model, probe, every=4, log_dir=tmp_path / "log") as monitor:
        _train(model, lambda m, b: m.loss(b), lambda s, _: _sigprop_batch(config, s), 12, monitor)
    assert [p.step for p in monitor.history] == [0, 4, 8, 12]
    assert read_track(tmp_path / "log") == [p.to_json() for p in monitor.history]
    assert all(p.columns.layers == (0, 1, 2) and p.diagnosis.findings for p in monitor.history)
    assert all(len(p.attn_entropy) == 3 for p in monitor.history)
    # the weights move, and the statistics with them: every point is a new measurement
    assert len({p.columns.grad_var for p in monitor.history}) == 4
    prediction = read_prediction(tmp_path / "log")
    assert prediction["step"] == 0 and prediction["layers"] == [0, 1, 2] and monitor.theory.note is None
    events = EventAccumulator(str(tmp_path / "log"))
    events.Reload()
    for q in ("fwd_var", "grad_corr"):
        scalars = events.Scalars(f"sigprop/{q}/layer_01")
        assert [s.step for s in scalars] == [0, 4, 8, 12]
        assert [s.value for s in scalars] == pytest.approx([getattr(p.columns, q)[1] for p in monitor.history],
                                                           rel=1e-6)  # stored as float32
    assert [s.value for s in events.Scalars("sigprop/theory/fwd_var/layer_02")] == pytest.approx(
        [prediction["fwd_var"][2]], rel=1e-6)


@pytest.mark.parametrize("kind", ["sigprop", "nanogpt"])
def test_training_is_bit_identical_with_and_without_the_monitor(tmp_path, kind):
    if kind == "sigprop":
        config = sigprop.TransformerConfig(**CONFIG)

        def make():
            return _sigprop_model(0)[1]

        def loss_of(m, b):
            return m.loss(b)

        def batch_of(step, micro):
            return _sigprop_batch(config, 100 * step + micro)

        probe, loss_fn = _sigprop_batch(config, 99), None
    else:
        def make():
            torch.manual_seed(0)
            return NanoGPT(dropout=0.1)

        loss_of, loss_fn, probe = nanogpt_loss, nanogpt_loss, nanogpt_batch(99)

        def batch_of(step, micro):
            return nanogpt_batch(100 * step + micro)

    plain = _train(make(), loss_of, batch_of, 6, accumulate=2)
    model = make()
    monitor = sigprop.Monitor(model, probe, every=2, loss_fn=loss_fn, log_dir=tmp_path / kind)
    watched = _train(model, loss_of, batch_of, 6, monitor, accumulate=2)
    assert [p.step for p in monitor.history] == [0, 2, 4, 6]
    assert plain.keys() == watched.keys()
    assert all(torch.equal(plain[k], watched[k]) for k in plain), [k for k in plain if not torch.equal(plain[k],
                                                                                                        watched[k])]
    # and the monitor measured something that changes: without dropout's forked masks the points would differ
    assert monitor.history[0].columns.grad_var != monitor.history[-1].columns.grad_var


def test_a_users_own_module_is_monitored_with_only_loss_fn(tmp_path):
    torch.manual_seed(0)
    model = NanoGPT(n_layer=4)
    monitor = sigprop.Monitor(model, nanogpt_batch(1), every=1, loss_fn=nanogpt_loss, log_dir=tmp_path)
    point = monitor.step(0)
    assert point.columns.layers == (0, 1, 2, 3) and point.attn_entropy is None
    assert all(v > 0 for v in point.columns.grad_var) and all(v > 0 for v in point.columns.fwd_var)
    assert monitor.theory.columns is None and "no theory" in monitor.theory.note
    assert json.loads((tmp_path / TRACK_FILE).read_text())["layers"] == [0, 1, 2, 3]
    assert monitor.step(0) is None  # a step already recorded (gradient accumulation calls it again)


def test_a_compiled_model_under_bf16_autocast_is_probed_as_the_module_in_full_precision():
    config, model = _sigprop_model()
    compiled = torch.compile(model, backend="eager")
    probe = _sigprop_batch(config, 99)
    monitor = sigprop.Monitor(compiled, probe, every=1)
    assert monitor.model is model
    outside = monitor.record(0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compiled.loss(probe).dtype == torch.float32  # the run itself is under autocast
        inside = monitor.record(1)
    assert inside.columns == outside.columns


def test_a_layer_whose_gradient_vanishes_is_warned_of_once_with_its_layer_and_step(caplog):
    """Post-LN blocks: zeroing block 2's last norm makes its output constant, so no gradient reaches the stream
    after blocks 0 and 1 from step 10 on; blocks 2 and 3 keep theirs."""
    torch.manual_seed(0)
    model = NanoGPT(n_layer=4, dropout=0.0, post_ln=True)
    monitor = sigprop.Monitor(model, nanogpt_batch(99), every=5, loss_fn=nanogpt_loss)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    monitor.step(0)
    with caplog.at_level(logging.WARNING, logger="sigprop.monitor"):
        for step in range(1, 21):
            nanogpt_loss(model, nanogpt_batch(step)).backward()
            optimizer.step()
            optimizer.zero_grad()
            if step == 10:
                with torch.no_grad():
                    model.h[2].ln_2.weight.zero_()
            monitor.step(step)
    vanished = [(a.layer, a.step) for a in monitor.alerts if a.kind is AlertKind.GRADIENT_VANISHES]
    assert vanished == [(0, 10), (1, 10)]
    messages = [r.getMessage() for r in caplog.records if "gradient variance fell" in r.getMessage()]
    assert len(messages) == 2 and "step 10, layer 0" in messages[0] and "step 10, layer 1" in messages[1]


def test_a_model_that_diverges_is_flagged_and_warned_of_once_per_layer(caplog):
    """The Hugging Face Trainer and Lightning train on after a NaN loss: the monitor is what says so."""
    config, model = _sigprop_model()
    monitor = sigprop.Monitor(model, _sigprop_batch(config, 99), every=1)
    assert not any(a.kind is AlertKind.NOT_FINITE for a in monitor.alerts)
    monitor.step(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(float("nan"))
    with caplog.at_level(logging.WARNING, logger="sigprop.monitor"):
        point = monitor.step(1)
        monitor.step(2)
    assert point.diagnosis.flagged
    diverged = [(a.layer, a.step) for a in monitor.alerts if a.kind is AlertKind.NOT_FINITE]
    assert diverged == [(layer, 1) for layer in point.columns.layers]
    assert sum("the model has diverged" in r.getMessage() for r in caplog.records) == len(diverged)


def test_bad_input_is_refused_before_training(tmp_path):
    config, model = _sigprop_model()
    probe = _sigprop_batch(config, 0)
    for every in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="every must be an integer number of steps >= 1"):
            sigprop.Monitor(model, probe, every=every)
    too_big = dataclasses.replace(probe, inputs=probe.inputs + config.vocab_size)
    with pytest.raises(ValueError, match="the probe batch cannot be taken by Transformer"):
        sigprop.Monitor(model, too_big, every=1)
    with pytest.raises(ValueError, match="the probe batch cannot be taken by NanoGPT"):
        sigprop.Monitor(NanoGPT(), nanogpt_batch(0), every=1)  # its keys are its own: it needs loss_fn
    (tmp_path / "file").write_text("x")
    for log_dir in (tmp_path / "file", tmp_path / "file" / "sub", "/proc/sigprop-monitor"):
        with pytest.raises(ValueError, match="log_dir"):
            sigprop.Monitor(model, probe, every=1, log_dir=log_dir)
    with pytest.raises(ValueError) as err:
        sigprop.Monitor(model, too_big, every=1)
    assert "\n" not in str(err.value)


def test_the_active_wandb_run_receives_the_points(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    config, model = _sigprop_model()
    run = wandb.init(project="sigprop-test", dir=str(tmp_path))
    try:
        monitor = sigprop.Monitor(model, _sigprop_batch(config, 0), every=1)
        monitor.step(0)
        monitor.step(1)
    finally:
        run.finish()
    points = (b"sigprop/fwd_var/layer_02", b"sigprop/theory/grad_var/layer_00")
    deadline = time.monotonic() + 60.0  # wandb's own service process writes the file; on a loaded machine its
    while True:  # records were seen landing after finish() returned (the file held only its header)
        files = list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
        assert len(files) == 1
        logged = files[0].read_bytes()
        if all(p in logged for p in points) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert all(p in logged for p in points)


class _WithBatchNorm(torch.nn.Module):
    """A user's model with a BatchNorm and a frozen (eval-mode) first block."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(64, 16)
        self.blocks = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh())
                                           for _ in range(2)])
        self.norm = torch.nn.BatchNorm1d(16)
        self.head = torch.nn.Linear(16, 64)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = x + block(x)
        return self.head(self.norm(x.transpose(1, 2)).transpose(1, 2))


def test_a_probe_leaves_every_module_s_mode_and_every_buffer_as_it_found_them():
    """The probe runs in training mode; afterwards a submodule kept in eval mode is still in eval mode, and a
    BatchNorm's running statistics are the training's, not moved by the probe."""
    model = _WithBatchNorm().train()
    model.blocks[0].eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))
    monitor = sigprop.Monitor(model, ids, every=1, theory=False, reporters=[],
                              loss_fn=lambda m, b: m(b).logsumexp(-1).mean())
    monitor.step(0)
    assert model.training and not model.blocks[0].training and model.blocks[1].training
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


class _FakeRun:
    """A W&B run's step bookkeeping: a row logged at a step below the next one is dropped, as wandb drops it."""

    def __init__(self):
        self.step, self.rows, self.dropped, self._row = 0, [], [], {}

    def define_metric(self, *args, **kwargs):
        pass

    def log(self, data, step=None, commit=True):
        if step is not None and step < self.step:
            self.dropped.append(data)
            return
        if step is not None and step > self.step:
            self._commit()
            self.step = step
        self._row.update(data)
        if commit:
            self._commit()

    def _commit(self):
        if self._row:
            self.rows.append(self._row)
        self._row = {}
        self.step += 1


def test_the_wandb_run_s_own_steps_are_left_to_its_owner(monkeypatch):
    """The owner logs with step=s after each monitor point: nothing is dropped, and every point lands; a monitor
    whose owner logs nothing between its points still keeps each of them."""
    import sys
    import types

    from sigprop.monitor.wandb_run import WandbRun

    config, model = _sigprop_model()
    for owner_logs in (True, False):
        run = _FakeRun()
        monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(run=run))
        monitor = sigprop.Monitor(model, _sigprop_batch(config, 0), every=1, reporters=[WandbRun()])
        for s in range(3):
            monitor.step(s)
            if owner_logs:
                run.log({"loss": float(s)}, step=s)
        run._commit()  # wandb.finish
        assert run.dropped == []
        assert [r["sigprop/step"] for r in run.rows if "sigprop/step" in r] == [0, 1, 2]
        if owner_logs:
            assert [r["loss"] for r in run.rows if "loss" in r] == [0.0, 1.0, 2.0]


def test_a_framework_s_monitor_makes_its_reporters_on_rank_0_only(tmp_path, monkeypatch):
    """Another rank once built the reporters before the monitor found it inactive: each deleted the shared track
    file and left a TensorBoard event file open."""
    from sigprop.monitor import monitor as module
    from sigprop.monitor.pending import PendingMonitor

    config, model = _sigprop_model()
    made: list = []
    monkeypatch.setattr(module, "_rank", lambda: 1)
    pending = PendingMonitor(_sigprop_batch(config, 0), every=1, log_dir=tmp_path)
    monitor = pending.start(model, lambda resume: made.append(resume) or [])
    assert made == [] and not monitor.active and monitor.reporters == []
    monkeypatch.setattr(module, "_rank", lambda: 0)
    PendingMonitor(_sigprop_batch(config, 0), every=1, log_dir=tmp_path).start(
        model, lambda resume: made.append(resume) or [], step=7)
    assert made == [7]  # rank 0, resumed at step 7


def test_a_new_run_in_a_used_folder_does_not_inherit_the_last_run_s_theory(tmp_path):
    from sigprop.monitor.track_file import PREDICTION_FILE, TrackFile

    (tmp_path / PREDICTION_FILE).write_text(json.dumps({"step": 0, "layers": [0, 1]}))
    TrackFile(tmp_path)  # a new run (no resume step)
    assert read_prediction(tmp_path) is None


@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")
@pytest.mark.parametrize("reentrant", [False, True])
def test_a_model_under_activation_checkpointing_is_refused_when_the_monitor_is_made(reentrant):
    """Checkpointed blocks re-run in the backward pass, which only a backward shows: the monitor probes once when it
    is made, so the refusal comes before any training step, in one line (not inside the loop at the first point)."""
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(NanoGPT):
        def forward(self, idx, targets=None):
            x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device)))
            for block in self.h:
                x = checkpoint(block, x, use_reentrant=reentrant)
            logits = self.lm_head(self.ln_f(x))
            return logits, torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                             targets.reshape(-1))

    with pytest.raises(ValueError, match="the monitor cannot measure Checkpointed.*checkpointing") as err:
        sigprop.Monitor(Checkpointed(n_layer=2), nanogpt_batch(0), every=10, loss_fn=nanogpt_loss)
    assert "\n" not in str(err.value)
