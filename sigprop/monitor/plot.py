"""The figure of a monitored run (``track.png``): for each statistic, its value over the layers with a colour per
point (early → late), the theory's profile at the first point dashed. A model that starts to explode or collapse
shows as curves fanning out. Drawn from any log folder with a ``track.jsonl``: a :class:`~sigprop.monitor.Monitor`'s
``log_dir``, a callback's, or a ``sigprop train`` run directory."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.figures import pyplot, save_figure
from .point import QUANTITIES
from .track_file import TRACK_FILE, read_prediction, read_track

__all__ = ["plot_track", "require_track", "TITLES"]

#: Each statistic's title on the figure.
TITLES = {"fwd_var": "forward variance σ²_x", "fwd_corr": "token correlation r_x",
          "grad_var": "gradient variance σ²_g", "grad_corr": "gradient correlation r_g",
          "attn_entropy": "attention entropy / its maximum"}


def _values(values) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def plot_track(log_dir, out=None) -> Path | None:
    """Draw the points of ``log_dir`` (module docstring) into ``out`` (default ``log_dir/track.png``).

    Args:
        log_dir: a folder holding ``track.jsonl`` (and ``track-prediction.json`` where the theory was available).
        out: the PNG to write.

    Returns:
        The figure's path, or ``None`` when the folder holds no point.

    Example:
        >>> plot_track("runs/gpt2-monitored")  # doctest: +SKIP
        PosixPath('runs/gpt2-monitored/track.png')
    """
    plt = pyplot()

    log_dir = Path(log_dir)
    track = read_track(log_dir)
    if not track:
        return None
    prediction = read_prediction(log_dir)
    quantities = QUANTITIES + (("attn_entropy",) if any(t.get("attn_entropy") for t in track) else ())
    fig, axes = plt.subplots(1, len(quantities), figsize=(4.5 * len(quantities), 4))
    cmap = plt.get_cmap("viridis")
    first = min(t["step"] for t in track)
    last = max(t["step"] for t in track)
    span = (last - first) or 1
    for ax, q in zip(axes, quantities, strict=True):
        for t in track:
            if t.get(q) is None:
                continue
            ax.plot(t["layers"], _values(t[q]), color=cmap((t["step"] - first) / span), lw=1)
        if prediction is not None and prediction.get(q) is not None:
            ax.plot(prediction["layers"], _values(prediction[q]), "k--", lw=1.2,
                    label=f"theory, step {prediction.get('step', 0)}")
            ax.legend(fontsize=8)
        if q.endswith("var"):
            ax.set_yscale("log")
        ax.set(xlabel="layer", title=TITLES[q])
        ax.grid(alpha=0.3)
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(first, first + span))
    fig.colorbar(sm, ax=axes, label="training step", fraction=0.02)
    return save_figure(fig, log_dir / "track.png" if out is None else out, dpi=110, crop=True)


def require_track(log_dir) -> Path:
    """``log_dir`` as a folder holding points; ``ValueError`` saying what it holds instead."""
    log_dir = Path(log_dir)
    if not log_dir.is_dir():
        raise ValueError(f"{log_dir} is not a folder")
    if not read_track(log_dir):
        raise ValueError(f"{log_dir} holds no {TRACK_FILE} points: give the log_dir of a sigprop.Monitor, a "
                         "callback or a `sigprop train --track-every` run")
    return log_dir
