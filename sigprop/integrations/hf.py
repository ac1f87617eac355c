"""``SigpropCallback`` for the Hugging Face ``Trainer``: a :class:`~sigprop.monitor.monitor.Monitor` of the model
the Trainer trains, stepped at the Trainer's optimiser steps (``state.global_step``; with gradient accumulation, once
per optimiser step), made when training begins (the Trainer's model, on its device) and closed when it ends.

Where the points go: ``track.jsonl`` and ``track-prediction.json`` into ``log_dir`` when given, and the Trainer's own
reporters (``TrainingArguments.report_to``): with ``"tensorboard"``, TensorBoard scalars (``sigprop/fwd_var/layer_07``
…) into the folder the Trainer's TensorBoard writer uses when ``TENSORBOARD_LOGGING_DIR`` names it, else into
``<output_dir>/runs/sigprop`` beside the Trainer's own runs; with ``"wandb"``, the W&B run the Trainer started. (The
Trainer hands its logs to its reporters before a user's callback sees them, so the callback writes to the same
destinations itself.) Under torchrun only the process of rank 0 probes and reports (:mod:`sigprop.monitor.monitor`).

Needs ``transformers`` (the extra ``hf``), imported with this module.
"""

from __future__ import annotations

import os
from pathlib import Path

from transformers import TrainerCallback

from ..monitor.pending import HoldsPendingMonitor
from ..monitor.reporters import Reporter, installed

__all__ = ["SigpropCallback", "trainer_reporters"]


def trainer_reporters(args, log_dir: Path | None, resume_step: int | None = None) -> list[Reporter]:
    """The reporters of a Trainer run (module docstring): the track file under ``log_dir`` (a resumed run's, from
    ``resume_step``, keeps its earlier points), TensorBoard when ``args.report_to`` names it (and it is installed),
    the active W&B run when it names ``wandb``."""
    from ..monitor.track_file import TrackFile

    report_to = args.report_to if isinstance(args.report_to, list | tuple) else [args.report_to]
    out: list[Reporter] = [] if log_dir is None else [TrackFile(log_dir, resume_step)]
    if "tensorboard" in report_to and installed("tensorboard"):
        from ..monitor.tensorboard_scalars import TensorBoardScalars

        folder = os.environ.get("TENSORBOARD_LOGGING_DIR") or os.path.join(args.output_dir, "runs", "sigprop")
        out.append(TensorBoardScalars(os.path.expanduser(folder)))
    if "wandb" in report_to and installed("wandb"):
        from ..monitor.wandb_run import WandbRun

        out.append(WandbRun())
    return out


class SigpropCallback(HoldsPendingMonitor, TrainerCallback):
    """Monitors the Trainer's model on ``probe_batch`` every ``every`` optimiser steps (module docstring).

    Args:
        probe_batch: the fixed batch (a tokenizer's or data collator's dict, token ids, a sigprop batch), on the CPU.
        every: optimiser steps between points (>= 1).
        loss_fn: ``loss_fn(model, batch) -> scalar tensor``; default the model's own loss.
        log_dir: a folder for ``track.jsonl`` and ``track-prediction.json`` (``sigprop track plot`` draws it).
        seed: seeds the probe's forked generator.
        theory: whether to add the theory's profile at the first point (a mapped family).

    Raises:
        ValueError: now, ``every`` not a positive integer or a ``log_dir`` that cannot be written; when training
            begins (before the first step), a probe batch the model cannot take.

    Example:
        >>> from sigprop.integrations.hf import SigpropCallback  # doctest: +SKIP
        >>> callback = SigpropCallback(tokenizer(texts, return_tensors="pt"), every=100, log_dir="runs/probe")
        >>> Trainer(model, args, train_dataset=data, callbacks=[callback]).train()
        >>> callback.history[-1].diagnosis.findings
    """

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.pending.monitor is None:  # a resumed run starts at its checkpoint's step: its track file is kept
            self.pending.start(model, lambda resume: trainer_reporters(args, self.pending.log_dir, resume),
                               state.global_step)
        self.pending.step(state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        self.pending.step(state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        self.pending.close()
