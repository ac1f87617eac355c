"""The terminal the command line writes to: tables on standard output, errors and progress on standard error, and a
progress display (:class:`Display`, a :class:`~sigprop.core.progress.Progress`) that draws a bar on a terminal and
prints plain lines elsewhere (a log, a pipe, CI), so a long run is never silent."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from rich.console import Console

__all__ = ["console", "error", "note", "Display", "parse_floats", "parse_ints", "refuse_unused"]

# Without a terminal (CI, pipes) rich would wrap tables at 80 columns; the tables need ~110.
console = Console() if sys.stdout.isatty() else Console(width=120)

#: Plain progress lines (no terminal) come at most this often, and at every quarter of a task.
LINE_EVERY_S = 10.0


def error(message: str) -> None:
    """One line on standard error: ``error: <the message's first line>``."""
    first = str(message).strip().splitlines()[0] if str(message).strip() else "failed"
    sys.stderr.write(f"error: {first}\n")
    sys.stderr.flush()


def note(message: str) -> None:
    """A remark on standard error (``note: …``), beside the tables."""
    sys.stderr.write(f"note: {message}\n")
    sys.stderr.flush()


class _Lines:
    """Progress as plain lines on standard error: when a task starts, at least every :data:`LINE_EVERY_S` seconds
    or quarter of it, and when it ends."""

    def __init__(self):
        self.t0 = time.perf_counter()

    def task(self, description: str, total: int | None = None) -> Callable[[int], None]:
        state = {"done": 0, "last": time.perf_counter(), "quarter": 0, "ended": False}
        self._say(f"{description} ..." if total is None else f"{description}: 0/{total}")

        def advance(k: int) -> None:
            state["done"] += k
            now = time.perf_counter()
            quarter = min(4, 4 * state["done"] // total) if total else 0
            ends = bool(total) and state["done"] >= total and not state["ended"]  # once, not at every step after
            if ends or now - state["last"] >= LINE_EVERY_S or quarter > state["quarter"]:
                state["last"], state["quarter"], state["ended"] = now, quarter, state["ended"] or ends
                self._say(f"{description}: {state['done']}/{total}" if total else f"{description}: {state['done']}")

        return advance

    def _say(self, text: str) -> None:
        sys.stderr.write(f"[{time.perf_counter() - self.t0:6.1f} s] {text}\n")
        sys.stderr.flush()


class Display:
    """A context manager giving a :class:`~sigprop.core.progress.Progress`: a transient rich bar per task on a
    terminal (a task of unknown length shows until the next one starts), plain lines otherwise."""

    def __init__(self):
        self._bar = None

    def __enter__(self):
        if not sys.stderr.isatty():  # progress goes to standard error: a bar where that is a terminal
            return _Lines()
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        self._bar.__enter__()
        self._open: list = []
        return self

    def task(self, description: str, total: int | None = None) -> Callable[[int], None]:
        for task_id in self._open:  # a task of unknown length ends when the next starts
            self._bar.update(task_id, visible=False)
        self._open = []
        task_id = self._bar.add_task(description, total=total)
        if total is None:
            self._open.append(task_id)
        return lambda k: self._bar.advance(task_id, k)

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.__exit__(*exc)
        return False


def parse_floats(text: str | None, name: str) -> list[float] | None:
    """A command-line option holding one number or a comma-separated list ("0.5,1,1.5") as floats; None stays None.
    Raises ValueError naming the option ``name`` on anything else."""
    return _parse_list(text, name, float, "a number or a comma-separated list of numbers")


def parse_ints(text: str | None, name: str) -> list[int] | None:
    """Like :func:`parse_floats` for integers ("12,48,192")."""
    return _parse_list(text, name, int, "an integer or a comma-separated list of integers, e.g. 12,48,192")


def refuse_unused(ctx, names: tuple[str, ...], reason: str) -> None:
    """Refuse the options among ``names`` (their parameter names) that the command line set although this run does
    not use them, so that none is silently ignored: ``ValueError`` "<flags> <reason>" (e.g. "--grid used with
    --phase only"); the defaults of unused options pass.

    Args:
        ctx: the command's ``typer.Context`` (a ``click.Context``).
        names: parameter names of the options this run leaves unused.
        reason: the rest of the message, after the flags.

    Example:
        >>> # in a command: refuse_unused(ctx, ("grid", "max_sigma"), "used with --phase only")
    """
    flags = {p.name: p.opts[0] for p in ctx.command.params}
    # by the source's name: Typer carries its own copy of Click, whose enum is another class than click's
    set_here = [flags[n] for n in names if getattr(ctx.get_parameter_source(n), "name", None) == "COMMANDLINE"]
    if set_here:
        raise ValueError(f"{', '.join(set_here)} {reason}")


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
