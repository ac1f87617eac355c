"""sigprop: signal propagation in deep transformers.

Closed-form moment theory of every transformer component (Kedia et al. 2024; Alekseev 2026; Noci et al. 2023),
verified against Monte Carlo on the real PyTorch modules.
"""

from .moments import GradMoments, Moments

__version__ = "0.1.0"

__all__ = ["Moments", "GradMoments", "__version__"]
