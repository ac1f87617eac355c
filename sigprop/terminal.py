"""The terminal the CLI prints to, and its progress bar."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["console", "progress_bar"]

# Without a terminal (CI, pipes) rich would wrap tables at 80 columns; the tables need ~110.
console = Console() if sys.stdout.isatty() else Console(width=120)


def progress_bar() -> Progress:
    """A transient bar with a count and the elapsed time."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True)
