"""Signal propagation while the model trains: every ``track_every`` steps, every layer's forward variance, token
correlation, gradient variance and gradient correlation measured on one fixed probe batch (the measurement
recorder, :func:`sigprop.measurement.hooks.measure`), with the diagnosis of the measured profile, and every layer's
normalised attention entropy (:func:`sigprop.measurement.attention_entropy.attention_entropies`: 1 uniform, 0
collapsed onto one key; an eval-mode forward pass without gradients); at step 0 the theory's prediction for that
very model and batch beside it.

The probe pass runs in training mode (dropout on, as the theory assumes) with torch's generator forked and seeded
the same way every time, so the masks are the same at every track point and the run's own random stream is left
untouched; it computes no parameter gradient (``autograd.grad`` to the site tensors only), so it cannot change the
training. Files: ``track.jsonl`` (a line per track point), ``track-prediction.json`` (the step-0 theory).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from ..core.jsonio import read_jsonl, write_json_atomic, write_text_atomic

__all__ = ["Tracker", "TRACK_FILE", "PREDICTION_FILE", "read_track", "QUANTITIES"]

TRACK_FILE = "track.jsonl"
PREDICTION_FILE = "track-prediction.json"
QUANTITIES = ("fwd_var", "fwd_corr", "grad_var", "grad_corr")
_PROBE_SEED = 0x5EED


def _columns(profile) -> dict:
    rows = sorted(profile.site("layer"), key=lambda r: r.layer)
    out = {"layers": [r.layer for r in rows]}
    for q in QUANTITIES:
        out[q] = [float(getattr(r, q)) for r in rows]
    return out


class Tracker:
    """Records the probe batch's statistics of ``model`` into ``run_dir``; ``resume_step`` drops the lines a killed
    run wrote after its checkpoint."""

    def __init__(self, model, probe_batch: dict, run_dir, seed: int, resume_step: int | None = None):
        self.model = model
        self.device = next(model.parameters()).device
        self.batch = {k: v.to(self.device) for k, v in probe_batch.items()}
        self.cpu_batch = probe_batch
        self.run_dir = Path(run_dir)
        self.seed = seed
        self.path = self.run_dir / TRACK_FILE
        if resume_step is None:  # a new run starts an empty file
            self.path.unlink(missing_ok=True)
        else:
            kept = [r for r in read_track(self.run_dir) if r["step"] <= resume_step]
            write_text_atomic(self.path, "".join(json.dumps(r, allow_nan=False) + "\n" for r in kept))

    def predict_initial(self) -> str | None:
        """The theory's profile of the model as it is now (its weights' standard deviations) on the probe batch.
        Returns None, or what the theory could not give: where the backward sweep fails (e.g. logits of variance
        ~1e10 in a model without normalisation overflow the head's gradient formula) the forward profile is kept
        alone; where the forward fails too there is no overlay. The measurements are tracked regardless."""
        from ..analysis.experiment import batch_prediction
        from ..core.jsonio import finite_or_null

        failures = (ValueError, FloatingPointError, OverflowError)
        note = None
        with np.errstate(over="ignore", invalid="ignore"):
            try:
                profile = batch_prediction(self.model, self.cpu_batch).profile()
            except failures as exc:
                note = f"gradient theory unavailable: {str(exc).splitlines()[0]}; forward theory only"
                try:
                    profile = batch_prediction(self.model, self.cpu_batch).profile(gradients=False)
                except failures as exc2:
                    return f"no theory: {str(exc2).splitlines()[0]}"
        columns = _columns(profile)
        if note is not None:  # no gradient theory: nothing to draw, rather than the zeros of a skipped sweep
            columns.update(grad_var=None, grad_corr=None)
        write_json_atomic(self.run_dir / PREDICTION_FILE, finite_or_null({"step": 0, **columns}))
        return note

    def record(self, step: int) -> dict:
        """Measure the probe batch now; append its line; return the diagnosis for the metrics."""
        from ..analysis.diagnosis import diagnose
        from ..core.jsonio import finite_or_null
        from ..measurement.hooks import measure

        was_training = self.model.training
        self.model.train()
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(self.seed + _PROBE_SEED)
            profile = measure(self.model, self.batch)
        self.model.train(was_training)
        from ..measurement.attention_entropy import attention_entropies

        entropy = attention_entropies(self.model, self.batch)
        diagnosis = diagnose(profile)
        summary = {"flagged": diagnosis.flagged, "findings": diagnosis.lines(),
                   "flagged_findings": [f.describe() for f in diagnosis.findings if f.flagged], "hint": diagnosis.hint}
        line = finite_or_null({"step": step, **_columns(profile), "attn_entropy": entropy, "diagnosis": summary})
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, allow_nan=False) + "\n")
        return summary


def read_track(run_dir) -> list[dict]:
    """The track points of a run directory (a line cut by a killed process is skipped)."""
    return read_jsonl(Path(run_dir) / TRACK_FILE)
