"""The devices a measurement runs on, parsed and checked in one place.

A device specification is a torch device string (``cpu``, ``cuda``, ``cuda:1``, ``mps``) or a comma-separated list of
them (``cuda:0,cuda:1``): the seeds of a measurement are independent models, so a list measures them in parallel, one
process per entry (:mod:`sigprop.measurement.workers`). Every entry is checked before anything is measured, so a typo or
a missing GPU stops the run with a message instead of a traceback minutes in.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["parse_devices", "check_device"]


def check_device(name: str | torch.device) -> torch.device:
    """``name`` as a :class:`torch.device` that this machine has; ``ValueError`` with the reason otherwise (not a
    device string, CUDA or MPS absent, CUDA index out of range). ``cuda`` without an index is the current device."""
    try:
        dev = torch.device(name.strip() if isinstance(name, str) else name)
    except (RuntimeError, TypeError):
        raise ValueError(f"not a torch device: {name!r}; expected e.g. cpu, cuda, cuda:1, mps") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {name!r}: CUDA is not available here (torch {torch.__version__}; "
                             "`sigprop env` lists the devices sigprop sees)")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ValueError(f"device {name!r}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}")
    elif dev.type == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise ValueError(f"device {name!r}: MPS is not available here")
    elif dev.type != "cpu":
        raise ValueError(f"device {name!r}: sigprop measures on cpu, cuda or mps (got type {dev.type!r})")
    return dev


def parse_devices(spec: str | torch.device | Sequence[str | torch.device] | None) -> list[torch.device]:
    """The checked devices of ``spec`` (:func:`check_device` for each): ``None`` is ``[cpu]``; a string is split at
    commas; a sequence is taken entry by entry. A device may repeat (``cpu,cpu`` runs two CPU processes).
    ``ValueError`` on an empty string or entry, or an unavailable device."""
    if spec is None:
        return [torch.device("cpu")]
    if isinstance(spec, torch.device):
        return [check_device(spec)]
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    if isinstance(spec, str) and not spec.strip():
        raise ValueError(f"device {spec!r} is empty; expected e.g. cpu, cuda, cuda:0,cuda:1")
    if not parts or any(isinstance(p, str) and not p.strip() for p in parts):
        raise ValueError(f"device list {spec!r} has an empty entry; expected e.g. cuda:0,cuda:1")
    return [check_device(p) for p in parts]
