"""sigprop: signal propagation in deep transformers.

Closed-form moment theory of every transformer component and of whole models (Kedia et al. 2024; Alekseev 2026;
Noci et al. 2023), measured against real PyTorch models with hooks.

Public names (DESIGN.md): ``Moments``, ``GradMoments``, ``TransformerConfig``, ``Transformer``,
``predict(config) -> Profile``, ``measure(model, batch) -> Profile``, ``compare(predicted, measured) -> Comparison``;
and ``diagnose(profile) -> Diagnosis``: does it explode, vanish or collapse to rank one with depth.
"""

from .comparison import Comparison, compare
from .diagnosis import Diagnosis, diagnose
from .measurement import Recorder, measure
from .model import InitPlan, Transformer, TransformerConfig, make_batch, make_plan
from .moments import GradMoments, Moments
from .profile import Profile
from .theory import predict

__version__ = "0.1.0"

__all__ = ["Moments", "GradMoments", "TransformerConfig", "Transformer", "InitPlan", "make_plan", "make_batch",
           "predict", "measure", "compare", "diagnose", "Diagnosis", "Recorder", "Profile", "Comparison",
           "__version__"]
