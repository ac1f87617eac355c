"""``sigprop.integrations.lightning.SigpropCallback`` in a Lightning ``Trainer`` run (a tiny nanoGPT-style
``LightningModule``, CPU): points at the optimiser steps with gradient accumulation, logged through the Trainer's
TensorBoard logger and read back, and the trained weights bit-identical without the callback."""

from __future__ import annotations

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")

from sigprop.integrations.lightning import SigpropCallback  # noqa: E402
from sigprop.monitor import read_track  # noqa: E402
from tests.monitor.nanogpt import NanoGPT, nanogpt_batch  # noqa: E402


class _Module(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.gpt = NanoGPT(n_layer=3, dropout=0.1)

    def forward(self, idx):
        return self.gpt(idx)[0]

    def training_step(self, batch, batch_idx):
        return self.gpt(batch["idx"], batch["targets"])[1]

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def _train(tmp_path, name: str, callbacks):
    torch.manual_seed(0)
    module = _Module()
    data = [nanogpt_batch(i) for i in range(20)]
    loader = torch.utils.data.DataLoader(data, batch_size=None)
    logger = pl.loggers.TensorBoardLogger(str(tmp_path / name), name="tb", version=0)
    trainer = pl.Trainer(max_steps=10, accumulate_grad_batches=2, accelerator="cpu", devices=1, logger=logger,
                         callbacks=callbacks, enable_progress_bar=False, enable_checkpointing=False,
                         enable_model_summary=False, log_every_n_steps=5, deterministic=True)
    trainer.fit(module, loader)
    return {k: v.clone() for k, v in module.state_dict().items()}, logger


def test_lightning_is_monitored_through_its_logger_without_changing_its_training(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    probe = {"input_ids": nanogpt_batch(99)["idx"]}  # the module's forward gives the logits: the default loss
    callback = SigpropCallback(probe, every=5, log_dir=tmp_path / "track")
    watched, logger = _train(tmp_path, "watched", [callback])
    plain, _ = _train(tmp_path, "plain", [])
    assert plain.keys() == watched.keys() and all(torch.equal(plain[k], watched[k]) for k in plain)

    assert [p.step for p in callback.history] == [0, 5, 10]
    assert read_track(tmp_path / "track") == [p.to_json() for p in callback.history]
    assert all(p.columns.layers == (0, 1, 2) for p in callback.history)
    assert callback.history[0].columns.fwd_var != callback.history[-1].columns.fwd_var
    events = EventAccumulator(logger.log_dir)
    events.Reload()
    scalars = events.Scalars("sigprop/fwd_corr/layer_01")
    assert [s.step for s in scalars] == [0, 5, 10]
    assert [s.value for s in scalars] == pytest.approx([p.columns.fwd_corr[1] for p in callback.history], rel=1e-6)


def test_bad_input_is_refused_before_training(tmp_path):
    with pytest.raises(ValueError, match="every must be"):
        SigpropCallback(nanogpt_batch(0)["idx"], every=0)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="log_dir"):
        SigpropCallback(nanogpt_batch(0)["idx"], every=1, log_dir=tmp_path / "file" / "sub")
    callback = SigpropCallback(nanogpt_batch(0), every=1)  # nanoGPT's own keys: the module's forward cannot read them
    with pytest.raises(ValueError, match="the probe batch cannot be taken by _Module"):
        _train(tmp_path, "bad", [callback])


def test_a_resumed_fit_keeps_its_points(tmp_path):
    """Resuming from a checkpoint once deleted the first fit's points (the track file was made at fit start, before
    Lightning restored the step)."""
    probe = {"input_ids": nanogpt_batch(99)["idx"]}
    loader = torch.utils.data.DataLoader([nanogpt_batch(i) for i in range(20)], batch_size=None)

    def fit(max_steps, checkpoint):
        torch.manual_seed(0)
        callback = SigpropCallback(probe, every=2, log_dir=tmp_path / "probe")
        trainer = pl.Trainer(max_steps=max_steps, accelerator="cpu", devices=1, logger=False, callbacks=[callback],
                             enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)
        trainer.fit(_Module(), loader, ckpt_path=checkpoint)
        return trainer, callback

    trainer, _ = fit(4, None)
    trainer.save_checkpoint(tmp_path / "c.ckpt")
    _, resumed = fit(8, str(tmp_path / "c.ckpt"))
    assert [r["step"] for r in read_track(tmp_path / "probe")] == [0, 2, 4, 6, 8]
    assert resumed.history[0].step == 0
