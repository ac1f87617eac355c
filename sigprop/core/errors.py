"""The errors sigprop raises beyond ``ValueError`` (bad input, the common case)."""

from __future__ import annotations

__all__ = ["DeviceError", "TrainingDiverged", "NotFinite", "Terminated"]


class NotFinite(ValueError):
    """A value that must be finite is not: bad input, or, inside the theory's walk, moments that overflowed float64
    (a variance that grows exponentially with depth passes 1e308 within a few hundred layers). ``overflow``: the
    value was infinite, not NaN (NaN comes from NaN given: weights, inputs, a measured boundary)."""

    def __init__(self, message: str, overflow: bool = False):
        super().__init__(message)
        self.overflow = overflow


class DeviceError(RuntimeError):
    """A device failed while it worked: a process measuring on it raised, or died (killed, out of memory)."""


class TrainingDiverged(RuntimeError):
    """A training run's loss or gradient stopped being finite; the run stopped with its last good checkpoint kept.
    The message says at which step, what, and what the theory says of the model at initialisation."""


class Terminated(Exception):
    """The process received SIGTERM (raised in the main thread, so that ``finally`` blocks run, or by a command whose
    worker processes a SIGTERM stopped); the command line says "terminated" and exits with status 143."""
