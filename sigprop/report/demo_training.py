"""The demo's training section: the deep model the theory calls unstable and its DeepScaleLM twin, trained side by
side for a few hundred steps (two single-thread processes; their time: docs/results/performance.md), their losses
and tracked per-layer statistics beside the theory's prediction at step 0.

The pair: 16-layer decoders (d = 64, two heads) without normalisation layers, next-token prediction on the
standard library's source. With Xavier initialisation and plain residuals (x + f(x)) the theory predicts a forward
variance that grows by orders of magnitude with depth (every block adds its branch's variance to the stream's),
logits of enormous variance and a loss far above ln V at step 0; DeepScaleLM's λ·x + β·f(x) with λ² + β² = 1
(Kedia et al. Sec. 3.5) keeps it O(1). Without normalisation the contrast shows within seconds; with LayerNorm
(Post-LN) the Xavier model's failure shows only over a far longer run (the ``depth`` experiment,
docs/results/experiments/depth.md).

What so short a run can show: whether a model starts to learn (leaves the unigram loss, ln V at best) and whether
its statistics stay where the theory put them. What it cannot: which model ends better after the tokens a real
comparison needs (20 tokens per parameter and more: ``sigprop experiment depth``).
"""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import numpy as np

from ..core.errors import Terminated
from ..core.figures import pyplot, save_figure
from ..core.progress import Progress, tasks
from ..model.config import TransformerConfig

__all__ = ["DEMO_TRAINING_MODELS", "DEMO_TRAINING", "run_demo_training"]

_BASE = dict(arch="decoder", n_layers=16, d_model=64, n_heads=2, norm_position="none", vocab_size=2048,
             seq_len=64, max_len=64, dropout=0.0)

#: The two models trained side by side (name → config).
DEMO_TRAINING_MODELS = {
    "xavier, no norm": TransformerConfig(**_BASE, init="xavier"),
    "dslm, no norm": TransformerConfig(**_BASE, init="dslm"),
}

#: The training both get (TrainConfig fields): ~0.4 M tokens each.
DEMO_TRAINING = dict(steps=200, batch_size=32, lr=3e-3, warmup_steps=20, eval_every=50, eval_batches=4,
                     checkpoint_every=200, keep_checkpoints=1, track_every=50)


def _runs():
    from ..experiments.spec import RunSpec
    from ..train.config import train_config_from_dict

    train = train_config_from_dict(DEMO_TRAINING).to_dict()
    return [RunSpec(name, config.to_dict(), train, train["seed"], train["lr"], False)
            for name, config in DEMO_TRAINING_MODELS.items()]


def _last_step(run_dir: Path) -> int:
    try:
        with open(run_dir / "metrics.jsonl", "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 4096))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def _failed(runs, folder: Path, results) -> list:
    """The runs that crashed (their record in ``failed.json``, retried by the next demo): shown in the table with
    their fate and why, not left out of it."""
    from ..experiments.runner import FAILED_FILE, RunResult

    done, out = {r.run_id for r in results}, []
    for spec in runs:
        path = folder / spec.run_id / FAILED_FILE
        if spec.run_id not in done and path.is_file():
            try:
                out.append(RunResult.from_record(json.loads(path.read_text(encoding="utf-8"))))
            except (ValueError, KeyError, TypeError):
                continue
    return out


def run_demo_training(out_dir, progress: Progress | None = None) -> dict:
    """Train :data:`DEMO_TRAINING_MODELS` with :data:`DEMO_TRAINING`, one single-thread process each (two at a time),
    into ``out_dir/training/``; finished runs found there are reused. Writes ``demo-training.png`` (loss against
    step; forward and gradient variance per layer: theory at step 0, measured at step 0 and at the end). Returns
    {"runs": [RunResult], "figure": path, "lines": Markdown lines for the report}."""
    from ..experiments.runner import execute, unigram_loss

    out = Path(out_dir)
    runs = _runs()
    folder = out / "training"
    progress = tasks(progress)
    unigram = unigram_loss(runs[0].model_config, runs[0].train_config)
    ticks = {r.run_id: (progress.task(f"demo training {r.model_name}: {DEMO_TRAINING['steps']} steps",
                                      DEMO_TRAINING["steps"]), [0]) for r in runs}

    def watch(running):
        for spec in running:
            tick, seen = ticks[spec.run_id]
            step = _last_step(folder / spec.run_id)
            if step > seen[0]:
                tick(step - seen[0])
                seen[0] = step

    results, stopped = execute(runs, folder, min(2, os.cpu_count() or 1), "cpu", {r.model_name: unigram for r in runs},
                               0.1, say=lambda s: None, watch=watch)
    if stopped == signal.SIGINT:
        raise KeyboardInterrupt
    if stopped is not None:  # SIGTERM: "terminated", status 143
        raise Terminated
    results = results + _failed(runs, folder, results)
    for spec in runs:  # complete the bars of runs that finished between two looks
        tick, seen = ticks[spec.run_id]
        tick(max(0, DEMO_TRAINING["steps"] - seen[0]))
    figure = _figure(out / "demo-training.png", folder, results, unigram)
    return {"runs": results, "figure": figure, "lines": _lines(folder, results, unigram, figure)}


def _track(run_dir: Path):
    from ..train.tracking import PREDICTION_FILE, read_track

    track = read_track(run_dir)
    try:
        prediction = json.loads((run_dir / PREDICTION_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        prediction = None
    return track, prediction


def _value(row, key, index):
    if row is None or row.get(key) is None:
        return math.nan
    v = row[key][index]
    return math.nan if v is None else float(v)


def _ratio(row) -> float:
    last = _value(row, "grad_var", -1)
    return _value(row, "grad_var", 0) / last if last != 0 else math.nan


def _lines(folder: Path, results, unigram: float, figure: Path) -> list[str]:
    tokens = DEMO_TRAINING["steps"] * DEMO_TRAINING["batch_size"] * _BASE["seq_len"]
    lines = ["## Training: the unstable model and its DeepScaleLM twin", "",
             f"{_BASE['n_layers']}-layer decoders, d = {_BASE['d_model']}, no normalisation layers, next-token "
             f"prediction on the standard library's source: {DEMO_TRAINING['steps']} steps of "
             f"{DEMO_TRAINING['batch_size']} × {_BASE['seq_len']} tokens ({tokens / 1e6:.2f} M tokens), AdamW at "
             f"{DEMO_TRAINING['lr']:g}, one process each. Figure: `{figure.name}`.", "",
             "| model | σ²_x last layer, step 0: theory / measured | σ²_g first ÷ last layer: theory / measured | "
             "loss at step 1 | fate | final validation loss | unigram loss | wall |",
             "|---|---:|---:|---:|---|---:|---:|---:|"]
    from ..train.run_dir import read_metrics

    for r in results:
        run_dir = folder / r.run_id
        track, prediction = _track(run_dir)
        start = track[0] if track else None
        fwd = f"{_value(prediction, 'fwd_var', -1):.3g} / {_value(start, 'fwd_var', -1):.3g}"
        grad = f"{_ratio(prediction):.3g} / {_ratio(start):.3g}"
        metrics = read_metrics(run_dir)
        first = metrics[0].get("loss") if metrics else None
        final = "–" if r.final_val is None else f"{r.final_val:.3f}"
        lines.append(f"| {r.model_name} | {fwd} | {grad} | {'–' if first is None else f'{first:.4g}'} | {r.fate} | "
                     f"{final} | {unigram:.3f} | {r.wall:.0f} s |")
    lines += ["", f"What {tokens / 1e6:.1f} M tokens can show: whether a model starts to learn at all (leaves the "
              "unigram loss, what token frequencies alone give) and whether its statistics stay where the theory "
              "put them. What they cannot: which model ends better after the tokens a real comparison needs "
              "(`sigprop experiment depth`, 20 tokens per parameter, with LayerNorm, in docs/results/experiments/). "
              "Where "
              "theory and measurement part at step 0 (dashed lines against dots in the figure), the model lies "
              "outside the range in which the moment rules were checked (docs/results/accuracy.md): here, "
              "an unnormalised "
              "model whose forward variance reaches 10⁴–10⁵.", ""]
    return lines


def _figure(path: Path, folder: Path, results, unigram: float) -> Path:
    plt = pyplot()

    from ..train.plots import smooth
    from ..train.run_dir import read_metrics

    fig, ax = plt.subplots(1, 3, figsize=(16, 4.4))
    for i, r in enumerate(results):
        color = f"C{i}"
        run_dir = folder / r.run_id
        metrics = read_metrics(run_dir)
        steps = np.array([m["step"] for m in metrics], dtype=np.float64)
        loss = np.array([np.nan if m.get("loss") is None else m["loss"] for m in metrics], dtype=np.float64)
        if steps.size:
            ax[0].plot(steps, smooth(loss, max(1, steps.size // 40)), color=color, label=f"{r.model_name}: training")
        val = [(m["step"], m["val_loss"]) for m in metrics if m.get("val_loss") is not None]
        if val:
            ax[0].plot(*zip(*val, strict=True), "o", color=color, ms=4, label=f"{r.model_name}: validation")
        track, prediction = _track(run_dir)
        for k, q in ((1, "fwd_var"), (2, "grad_var")):
            if prediction is not None and prediction.get(q) is not None:
                y = np.array([np.nan if v is None else v for v in prediction[q]], dtype=np.float64)
                ax[k].plot(prediction["layers"], y, "--", color=color, lw=1.2, label=f"{r.model_name}: theory, step 0")
            if track:
                for row, style, when in ((track[0], "o", "step 0"), (track[-1], "-", f"step {track[-1]['step']}")):
                    y = np.array([np.nan if v is None else v for v in row[q]], dtype=np.float64)
                    ax[k].plot(row["layers"], y, style, color=color, ms=3, alpha=0.9 if style == "-" else 0.6,
                               label=f"{r.model_name}: measured, {when}")
    ax[0].axhline(unigram, color="0.5", ls=":", lw=1, label="unigram loss")
    ax[0].set(xlabel="step", ylabel="cross-entropy (nats)", yscale="log", title="loss")
    ax[1].set(xlabel="layer", ylabel="forward variance", yscale="log", title="forward variance per layer")
    ax[2].set(xlabel="layer", ylabel="gradient variance", yscale="log", title="gradient variance per layer")
    for a in ax:
        a.grid(alpha=0.3)
        a.legend(fontsize=6.5)
    fig.suptitle("demo: training the model the theory calls unstable beside its DeepScaleLM twin", fontsize=11)
    return save_figure(fig, path, dpi=110)
