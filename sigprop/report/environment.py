"""Environment facts for ``sigprop env``: the versions, threads and devices sigprop will use."""

from __future__ import annotations

from ..core.versions import package_versions

__all__ = ["environment_report"]


def environment_report() -> dict[str, str]:
    """Python, sigprop and dependency versions, torch threads and the accelerators torch can see."""
    import torch

    out = package_versions()
    out["torch threads"] = str(torch.get_num_threads())
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        out["cuda"] = ", ".join(f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(n))
        out["measure on all of them"] = "--device " + ",".join(f"cuda:{i}" for i in range(n))
    else:
        out["cuda"] = "not available (CPU only)"
    return out
