"""Matplotlib set-up shared by every figure sigprop writes: the non-interactive backend and one way of saving."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .outputs import check_output_path, plain_mode

__all__ = ["pyplot", "save_figure"]


def pyplot():
    """matplotlib.pyplot on the Agg backend (files only, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | os.PathLike, dpi: int = 120, crop: bool = False) -> Path:
    """Lay out ``fig``, write it to ``path`` as PNG (checked first: :func:`~sigprop.core.outputs.check_output_path`;
    parent folders created; through a temporary file and an atomic rename), close it, return the path. ``crop``:
    crop to the drawn area instead of laying out (figures with a colour bar over several axes)."""
    import matplotlib.pyplot as plt

    try:
        path = check_output_path(path, "figure", ".png")
        if not crop:
            fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".png")
        os.close(fd)
        try:
            fig.savefig(tmp, dpi=dpi, format="png", **({"bbox_inches": "tight"} if crop else {}))
            plain_mode(tmp)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
    finally:
        plt.close(fig)
    return path
