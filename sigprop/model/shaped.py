"""The shaped Transformer's training-time schedule (Noci et al. 2023, App. D "Recover"): one call per optimiser
step anneals every "recover" module of a model.

Theory of a shaped model (``attention="shaped"``, ``activation="shaped_relu"``): :func:`sigprop.predict` walks it
with the components' own rules, for ``arch="encoder"`` (decoders raise NotImplementedError as for every
decoder, although the shaped rules themselves handle causal masking). What it predicts: the *expected* moments at
the current γ₁, γ₂, s₋ (so after :func:`anneal_shaped` it predicts the annealed model). Forward: shaped attention at
first order in κ = n_k σ_q²σ_k² n²/τ² (= 1/(τ₀²d) under ``init="shaped"``), i.e. Thm. 4.2's drift; the shaped
ReLU exactly (Eq. 4, any mean); the per-network spread of the covariance (Thm. 4.2's diffusion, of the same order
over d ∝ n layers) is not in a walk of expectations. Backward: shaped attention's value path at zeroth order in κ
(the query/key paths, O(κ), are omitted), the shaped ReLU exactly. Under ``init="shaped"`` at γ₁ = γ₂ = 1 the
predicted second moment stays at its input value up to the O(κ) attention drift, layer after layer.
"""

from __future__ import annotations

from torch import nn

from ..components.shaped_attention import ShapedAttention
from ..components.shaped_relu import ShapedReLU

__all__ = ["shaped_modules", "anneal_shaped"]


def shaped_modules(model: nn.Module, mode: str | None = None) -> list[tuple[str, ShapedAttention | ShapedReLU]]:
    """(qualified name, module) of every :class:`ShapedAttention` and :class:`ShapedReLU` in ``model``, in
    ``named_modules`` order; with ``mode`` only those in that mode ("fixed", "learn" or "recover")."""
    out: list[tuple[str, ShapedAttention | ShapedReLU]] = []
    for name, m in model.named_modules():
        if isinstance(m, ShapedAttention):
            if mode is None or m.gamma_mode == mode:
                out.append((name, m))
        elif isinstance(m, ShapedReLU) and (mode is None or m.mode == mode):
            out.append((name, m))
    return out


def anneal_shaped(model: nn.Module, step: int) -> int:
    """Set every "recover" module of ``model`` to optimiser step ``step`` of App. D's linear schedule: shaped
    attention's γ₁, γ₂ (Eq. 33) and the shaped ReLU's s₋ (Eq. 4) become value⁰·max(0, 1 − step/anneal_steps)
    (:func:`~sigprop.components.shaped_relu.linear_anneal`), so that from ``step = anneal_steps`` on the model is
    the standard Transformer without LayerNorm (softmax attention with temperature τ, and the ReLU when c₊ = 0).
    Call it once per step (before or after ``optimizer.step()``, consistently); it is stateless, so resuming from a
    checkpoint only needs the step. Returns the number of modules annealed (0 for a model without "recover"
    modules, which is left untouched). Raises ``ValueError`` for a negative step."""
    modules = shaped_modules(model, "recover")
    for _, m in modules:
        m.anneal(step)
    return len(modules)
