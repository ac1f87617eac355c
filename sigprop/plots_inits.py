"""The init sweep's figure: how each scheme's forward and gradient variance change with depth (Kedia et al.
Table 3, read off the theory)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .figures import pyplot, save_figure
from .init_sweep import InitRow

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
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    panels = (("fwd_var", "forward variance: last layer / first"),
              ("grad_var", "gradient variance: first layer / last"))
    for ax, (quantity, label) in zip(axes, panels, strict=True):
        ax.axhspan(1.0 / growth_limit, growth_limit, color="0.9", label=f"within {growth_limit:g}×")
        for init in dict.fromkeys(r.init for r in rows):
            mine = sorted((r for r in rows if r.init == init and r.diagnosis is not None), key=lambda r: r.n_layers)
            x = np.array([r.n_layers for r in mine], dtype=float)
            y = np.array([r.finding(quantity).change for r in mine], dtype=float)
            ok = np.isfinite(y) & (y > 0)
            if ok.any():
                ax.plot(x[ok], y[ok], "o-", ms=4, lw=1.4, label=init)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("layers N")
        ax.set_title(label)
        ax.grid(alpha=0.3, which="both")
    axes[1].legend(fontsize=8, loc="best")
    if title:
        fig.suptitle(title)
    return save_figure(fig, path, dpi=110)
