"""Figures of training runs: a run's curves (``curves.png``), several runs overlaid (``sigprop train plot``), and the
tracked statistics over layers × steps (``track.png``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..core.figures import pyplot, save_figure
from ..monitor.plot import plot_track
from .run_dir import read_metrics

__all__ = ["write_run_figures", "plot_runs", "plot_track", "smooth"]


def smooth(values, window: int) -> np.ndarray:
    """Trailing mean over ``window`` steps (shorter at the start); NaN stays out of the mean."""
    v = np.asarray(values, dtype=np.float64)
    out = np.empty_like(v)
    for i in range(v.size):
        part = v[max(0, i - window + 1):i + 1]
        part = part[np.isfinite(part)]
        out[i] = part.mean() if part.size else np.nan
    return out


def _save(fig, path: Path) -> Path:
    return save_figure(fig, path, dpi=110, crop=True)


def _initial_validation(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("initial_validation")
    except (OSError, ValueError):
        return None


def _series(run_dir: Path):
    metrics = read_metrics(run_dir)
    steps = np.array([m["step"] for m in metrics], dtype=np.float64)
    loss = np.array([np.nan if m.get("loss") is None else m["loss"] for m in metrics])
    val = [(m["step"], m["val_loss"]) for m in metrics if m.get("val_loss") is not None]
    first = _initial_validation(run_dir)
    if first and first.get("val_loss") is not None:
        val.insert(0, (0, first["val_loss"]))
    return metrics, steps, loss, val


def plot_runs(run_dirs, out, labels=None) -> Path:
    """Training loss (smoothed) and validation loss of every run in ``run_dirs`` against the step, on one figure
    written to ``out`` (a .png)."""
    plt = pyplot()

    fig, ax = plt.subplots(1, 2, figsize=(12, 4.2))
    for i, run_dir in enumerate(map(Path, run_dirs)):
        _, steps, loss, val = _series(run_dir)
        label = labels[i] if labels else run_dir.name
        color = f"C{i % 10}"
        if steps.size:
            ax[0].plot(steps, smooth(loss, max(1, steps.size // 50)), color=color, label=label)
        if val:
            vs, vl = zip(*val, strict=True)
            ax[1].plot(vs, vl, "o-", color=color, ms=3, label=label)
    ax[0].set(xlabel="step", ylabel="training loss (smoothed)", title="training loss")
    ax[1].set(xlabel="step", ylabel="validation loss", title="validation loss (held-out files)")
    for a in ax:
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    return _save(fig, Path(out))


def _curves(run_dir: Path) -> Path | None:
    plt = pyplot()

    metrics, steps, loss, val = _series(run_dir)
    if not metrics:
        return None
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    ax[0].plot(steps, loss, color="0.75", lw=0.8, label="training loss")
    ax[0].plot(steps, smooth(loss, max(1, steps.size // 50)), color="C0", label="smoothed")
    if val:
        vs, vl = zip(*val, strict=True)
        ax[0].plot(vs, vl, "o-", color="C3", ms=3, label="validation loss")
    ax[0].set(xlabel="step", ylabel="cross-entropy", title=run_dir.name)
    ax[0].legend(fontsize=8)
    ax[1].plot(steps, [m.get("lr") for m in metrics], color="C2")
    ax[1].set(xlabel="step", ylabel="learning rate", title="schedule")
    gn = np.array([np.nan if m.get("grad_norm") is None else m["grad_norm"] for m in metrics])
    ax[2].semilogy(steps, gn, color="C1", lw=0.8)
    ax[2].set(xlabel="step", ylabel="gradient norm (before clipping)", title="gradient norm")
    for a in ax:
        a.grid(alpha=0.3)
    return _save(fig, run_dir / "curves.png")


def write_run_figures(run_dir) -> tuple[Path, ...]:
    """The figures of a finished run: ``curves.png``, and ``track.png`` when it was tracked."""
    run_dir = Path(run_dir)
    return tuple(p for p in (_curves(run_dir), plot_track(run_dir)) if p is not None)
