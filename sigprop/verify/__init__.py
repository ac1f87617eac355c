"""Component verification: every moment rule against Monte Carlo on the real module (Kedia et al. App. D)."""

from ..core.lazy import lazy_names

#: public name -> the submodule that defines it (imported on first use)
_NAMES = {
    "VerificationReport": "run",
    "run_verification": "run",
}
__getattr__, __dir__ = lazy_names(__name__, _NAMES)

__all__ = ["run_verification", "VerificationReport"]
