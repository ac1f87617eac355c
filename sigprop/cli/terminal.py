"""The terminal the CLI prints to, and its progress bar."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["console", "progress_bar", "parse_floats", "parse_ints"]

# Without a terminal (CI, pipes) rich would wrap tables at 80 columns; the tables need ~110.
console = Console() if sys.stdout.isatty() else Console(width=120)


def progress_bar() -> Progress:
    """A transient bar with a count and the elapsed time."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True)


def parse_floats(text: str | None, name: str) -> list[float] | None:
    """A command-line option holding one number or a comma-separated list ("0.5,1,1.5") as floats; None stays None.
    Raises ValueError naming the option ``name`` on anything else."""
    return _parse_list(text, name, float, "a number or a comma-separated list of numbers")


def parse_ints(text: str | None, name: str) -> list[int] | None:
    """Like :func:`parse_floats` for integers ("12,48,192")."""
    return _parse_list(text, name, int, "an integer or a comma-separated list of integers, e.g. 12,48,192")


def _parse_list(text, name, convert, what):
    if text is None:
        return None
    try:
        out = [convert(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{name} must be {what} (got {text!r})") from None
    if not out:
        raise ValueError(f"{name} must name at least one value")
    return out
