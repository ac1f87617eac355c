"""Matplotlib set-up shared by every figure sigprop writes: the non-interactive backend and one way of saving."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["pyplot", "save_figure"]


def pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | os.PathLike, dpi: int = 120) -> Path:
    """Lay out ``fig``, write it to ``path`` (parent folders created) as PNG, close it, return the path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
