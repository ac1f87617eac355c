"""``sigprop track``: the runs a :class:`~sigprop.monitor.monitor.Monitor` watched (``sigprop track plot LOG_DIR``:
every statistic over the layers, a colour per point, the theory dashed). Parses, calls
:func:`sigprop.monitor.plot.plot_track`, prints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .terminal import console

__all__ = ["track_app"]

track_app = typer.Typer(
    add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True,
    help="Runs watched by sigprop.Monitor, the Hugging Face or Lightning callback, or `sigprop train --track-every`.")


@track_app.command("plot")
def plot_command(
    log_dir: Annotated[Path, typer.Argument(help="The monitor's log_dir (or a `sigprop train` run directory): the "
                                                 "folder holding track.jsonl.")],
    out: Annotated[Path | None, typer.Option(help="The PNG to write (default: LOG_DIR/track.png).")] = None,
) -> None:
    """Draw every statistic over the layers, a colour per step, the theory at the first point dashed."""
    from ..core.outputs import check_output_path
    from ..monitor.plot import plot_track, require_track

    require_track(log_dir)
    out = check_output_path(log_dir / "track.png" if out is None else out, "--out", ".png")
    console.print(f"figure: {plot_track(log_dir, out)}")
