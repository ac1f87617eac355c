"""The init sweep's figure: how each scheme's forward and gradient variance change with depth (Kedia et al.
Table 3, read off the theory)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..analysis.init_sweep import InitRow
from ..core.figures import pyplot, save_figure

__all__ = ["plot_init_sweep"]


def plot_init_sweep(path: str | os.PathLike, rows: list[InitRow], title: str | None = None,
                    growth_limit: float = 10.0) -> Path:
    """Two log–log panels over depth N, one line per scheme: the forward variance's change from the first layer to
    the last, and the gradient variance's from the last layer to the first; a grey band marks the bounded region
    [1/``growth_limit``, ``growth_limit``]. Needs at least two depths."""
    depths = sorted({r.n_layers for r in rows})
    if len(depths) < 2:
        raise ValueError("the init sweep's figure needs at least two depths (--depths 12,48,192)")
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    panels = (("fwd_var", "forward variance: last layer / first"),
              ("grad_var", "gradient variance: first layer / last"))
    for ax, (quantity, label) in zip(axes, panels, strict=True):
        series = {}
        for init in dict.fromkeys(r.init for r in rows):
            mine = sorted((r for r in rows if r.init == init and r.diagnosis is not None), key=lambda r: r.n_layers)
            x = np.array([r.n_layers for r in mine], dtype=float)
            y = np.array([r.finding(quantity).change for r in mine], dtype=float)
            ok = np.isfinite(y) & (y > 0)
            if ok.any():
                series[init] = (x[ok], y[ok])
        lo, hi = _axis_range([y for _, y in series.values()], growth_limit)
        ax.axhspan(1.0 / growth_limit, growth_limit, color="0.9", label=f"within {growth_limit:g}×")
        for init, (x, y) in series.items():
            beyond = (y < lo) | (y > hi)
            line, = ax.plot(x, np.clip(y, lo, hi), "o-", ms=4, lw=1.4,
                            label=init + (" (beyond the axis: ▲/▼)" if beyond.any() else ""))
            for above, marker in ((True, "^"), (False, "v")):
                pick = beyond & ((y > hi) if above else (y < lo))
                if pick.any():
                    ax.plot(x[pick], np.full(pick.sum(), hi if above else lo), marker, ms=9, color=line.get_color())
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(lo, hi)
        ax.set_xlabel("layers N")
        ax.set_title(label)
        ax.grid(alpha=0.3, which="both")
    axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    if title:
        fig.suptitle(title)
    return save_figure(fig, path, dpi=110)


def _axis_range(values: list[np.ndarray], growth_limit: float, span: float = 1e6) -> tuple[float, float]:
    """A log axis that shows the bounded band and every value within ``span``× of it; values beyond (an exploding
    scheme's 1e93) are drawn at the edge instead of squashing the rest."""
    inside = np.concatenate([v[(v >= 1.0 / span) & (v <= span)] for v in values] or [np.array([])])
    lo = min([1.0 / growth_limit, *(inside.tolist() or [1.0])]) / 3.0
    hi = max([growth_limit, *(inside.tolist() or [1.0])]) * 3.0
    return lo, hi
