"""sigprop: signal propagation in deep transformers.

Closed-form moment theory of every transformer component and of whole models (Kedia et al. 2024; Alekseev 2026;
Noci et al. 2023), measured against real PyTorch models with hooks. The architecture: ``ARCHITECTURE.md``.

Public names: ``Moments``, ``GradMoments``, ``TransformerConfig``, ``Transformer``, ``InitPlan``,
``predict(model_or_config) -> Profile``, ``measure(model, batch) -> Profile`` (any model with a stack of blocks:
sigprop's, a Hugging Face model, a user's own; ``batch`` sigprop's, Hugging Face's or token ids, read as a ``Batch``),
``compare(predicted, measured) -> Comparison``, ``diagnose(profile) -> Diagnosis``: does it explode, vanish or
collapse to rank one with depth; ``from_hf(hf_config_or_model) -> TransformerConfig`` (the extra ``hf``);
``apply_init(model, scheme)``: a sigprop or Hugging Face model re-initialised in place under a scheme;
``plan_for(config)``: the init plan a model of ``config`` gets (``init="auto"``: calibrated by the theory);
``Monitor(model, probe_batch, every=K)``: every layer's statistics watched in any training loop (``monitor.step(step)``
after the optimiser step; ``sigprop.integrations`` for the Hugging Face and Lightning trainers). They are
imported on first use, so ``import sigprop`` (and the command line's ``--help``) stays fast. ``__version__`` is the
package's version (what ``sigprop --version`` prints, and the version recorded with a run's environment).

Example:
    >>> import sigprop
    >>> major, minor, *_ = sigprop.__version__.split(".")
    >>> major.isdigit() and minor.isdigit()
    True
"""

from __future__ import annotations

from .core.lazy import lazy_names
from .core.versions import VERSION as __version__

#: public name -> the module that defines it
_PUBLIC = {
    "Moments": "core.moments", "GradMoments": "core.moments", "Profile": "core.profile",
    "TransformerConfig": "model.config", "Transformer": "model.transformer", "InitPlan": "model.init",
    "make_plan": "model.init", "plan_for": "model.transformer", "make_batch": "model.objective", "Batch": "model.batch",
    "predict": "theory.predict", "measure": "measurement.hooks", "Recorder": "measurement.hooks",
    "compare": "analysis.comparison", "Comparison": "analysis.comparison",
    "diagnose": "analysis.diagnosis", "Diagnosis": "analysis.diagnosis",
    "from_hf": "hf.config_map", "apply_init": "fix.apply_init", "Monitor": "monitor.monitor",
}

__all__ = [*_PUBLIC, "__version__"]


__getattr__, __dir__ = lazy_names(__name__, _PUBLIC)
