"""The errors sigprop raises beyond ``ValueError`` (bad input, the common case)."""

from __future__ import annotations

__all__ = ["DeviceError"]


class DeviceError(RuntimeError):
    """A device failed while it worked: a process measuring on it raised, or died (killed, out of memory)."""
