"""Environment facts for ``sigprop env``: the versions, threads and devices sigprop will use."""

from __future__ import annotations

import importlib
import platform

__all__ = ["environment_report"]

_DEPENDENCIES = ("torch", "numpy", "scipy", "typer", "rich", "matplotlib", "safetensors", "tokenizers")


def environment_report() -> dict[str, str]:
    """Python, sigprop and dependency versions, torch threads and the accelerators torch can see."""
    import torch

    from .. import __version__

    out = {"python": platform.python_version(), "sigprop": __version__}
    for name in _DEPENDENCIES:
        try:
            out[name] = getattr(importlib.import_module(name), "__version__", "installed")
        except ImportError as err:  # pragma: no cover - reported, not raised
            out[name] = f"MISSING ({err})"
    out["torch threads"] = str(torch.get_num_threads())
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        out["cuda"] = ", ".join(f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(n))
        out["measure on all of them"] = "--device " + ",".join(f"cuda:{i}" for i in range(n))
    else:
        out["cuda"] = "not available (CPU only)"
    return out
