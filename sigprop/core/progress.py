"""How long work reports its progress: the library asks a :class:`Progress` for a task when it knows how many steps
it will take, and advances it; the command line shows a bar on a terminal and plain lines elsewhere
(:mod:`sigprop.cli.terminal`). Library functions that take ``progress=None`` report nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

__all__ = ["Progress", "NO_PROGRESS", "tasks"]


class Progress(Protocol):
    """A sink of progress: ``task(description, total)`` starts a task of ``total`` steps (None: unknown) and returns
    the function that advances it by k steps."""

    def task(self, description: str, total: int | None = None) -> Callable[[int], None]: ...


class _Silent:
    def task(self, description: str, total: int | None = None) -> Callable[[int], None]:
        return lambda k: None


#: Reports nothing.
NO_PROGRESS: Progress = _Silent()


def tasks(progress: Progress | None) -> Progress:
    """``progress``, or :data:`NO_PROGRESS` for None."""
    return NO_PROGRESS if progress is None else progress
