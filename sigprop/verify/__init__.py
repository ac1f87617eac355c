"""Component verification: every moment rule against Monte Carlo on the real module (Kedia et al. App. D)."""

from .run import VerificationReport, run_verification

__all__ = ["run_verification", "VerificationReport"]
