"""Matplotlib set-up shared by every figure sigprop writes: the non-interactive backend and one way of saving."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

    from matplotlib.figure import Figure

from .atomic import atomic_path
from .outputs import check_output_path

__all__ = ["pyplot", "save_figure"]


def pyplot() -> ModuleType:
    """matplotlib.pyplot on the Agg backend (files only, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Figure, path: str | os.PathLike, dpi: int = 120, crop: bool = False) -> Path:
    """Lay out ``fig``, write it to ``path`` as PNG (checked first: :func:`~sigprop.core.outputs.check_output_path`;
    parent folders created; through a temporary file and an atomic rename), close it, return the path. ``crop``:
    crop to the drawn area instead of laying out (figures with a colour bar over several axes)."""
    import matplotlib.pyplot as plt

    try:
        path = check_output_path(path, "figure", ".png")
        if not crop:
            fig.tight_layout()
        with atomic_path(path, suffix=".png") as tmp:
            bbox: dict[str, Any] = {"bbox_inches": "tight"} if crop else {}
            fig.savefig(tmp, dpi=dpi, format="png", **bbox)
    finally:
        plt.close(fig)
    return path
