"""What a model's configuration and predicted profile show that the depth laws of the diagnosis do not name: a
Post-LN scheme in a Pre-LN stack, a DyT/Derf model in the subcritical phase (stretched-exponential APJN), saturated
DyT/Derf units. Each check says whether it is flagged, why, and the config change that removes it.

* **Post-LN scheme in a Pre-LN stack.** DeepNet (Wang et al. 2022) up-weights the skip by λ = (2N)^{1/4} > 1 so that
  a Post-LN norm, which divides it out again at every layer, sees the branch small. Without a norm after the add
  (Pre-LN) nothing divides it out: the stream's variance is multiplied by λ² at every residual, (2N)^{N} over N
  layers. The fix: DeepScaleLM (λ² + β² = 1, Kedia et al. Sec. 3.5), the Pre-LN scheme of the same idea.
* **Subcritical DyT/Derf** (Alekseev 2026, Result 3.5, Eqs. 18–19). With a tanh-like φ_α(x) = φ(αx) before each
  branch (DyT: tanh, Derf: erf), the averaged partial Jacobian norm grows as a stretched exponential,
  𝒥^{N,0} ∼ e^{√(N/λ)} with λ^{−1} = C_α² σ_21⁴ / (½σ_21² + σ_OV² p̃_⋆) and C_α = |α| C_1
  (:func:`~sigprop.apjn.asymptotics.lambda_inv`); σ_21 = σ_1σ_2 and σ_OV = σ_Oσ_V are the FFN's and the attention's
  weight scales in units of their fans (√d·std), times the branch's β (a skip scale λ < 1, as DeepScaleLM's, is
  not in the paper's recurrence: (1 − 2/N)^{N/2} ≥ e^{−1} over the depth at β² = 2/N). Flagged when e^{√(N/λ)}
  exceeds the diagnosis's growth limit (×10); the fix lowers α to where it equals it, α·ln(limit)/√(N λ^{−1})
  (λ^{−1} ∝ α²).
* **Saturated DyT/Derf.** Where α√q ≥ :data:`SATURATION` = 2 (q the stream's predicted second moment at a norm's
  input), most inputs of φ(αx) sit on its flat tails (erf(2) = 0.995, tanh(2) = 0.964): the norm passes on a sign,
  its mean slope is ≤ 1/√(1 + 2α²q) ≤ 1/3 of a linear map's (erf), and the branches see nearly binary inputs.
  The fix: α ≤ 1/√q_max, α√q ≤ 1 at every layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..model.config import TransformerConfig
from ..model.init_schemes import INIT_SCHEMES
from .diagnosis import DiagnosisLimits

__all__ = ["Check", "config_checks", "SATURATION", "POST_LN_SCHEMES"]

#: α√q at or above which a DyT/Derf unit counts as saturated (module docstring).
SATURATION = 2.0
#: Schemes designed for a norm after every residual add (their skip scale λ > 1 needs the norm to divide it out).
POST_LN_SCHEMES = tuple(s.name for s in INIT_SCHEMES.values() if s.made_for == "post")
_PHI = {"dyt": "tanh", "derf": "erf"}


@dataclass(frozen=True)
class Check:
    """One check: its ``name``, whether it is ``flagged``, the ``message`` (why), the config ``changes`` that
    remove it (empty when it is not flagged), and its ``subject``: what it looked at, the message's opening words
    (e.g. "derf with α = 2"; not in the JSON, which has the message)."""

    name: str
    flagged: bool
    message: str
    changes: dict = field(default_factory=dict)
    subject: str = ""

    def to_dict(self) -> dict:
        return {"name": self.name, "flagged": self.flagged, "message": self.message, "changes": dict(self.changes)}


def _scheme_check(config: TransformerConfig) -> Check | None:
    if config.scheme.made_for != "post" or config.norm_position != "pre":
        return None
    lam = (2.0 * config.total_layers) ** 0.25
    return Check("Post-LN scheme in a Pre-LN stack", True,
                 f"init={config.init} is a Post-LN scheme: its skip scale λ = (2N)^1/4 = {lam:.3g} is divided out by "
                 "a norm after every add, which a Pre-LN stack does not have, so the stream's variance is multiplied "
                 f"by λ² = {lam**2:.3g} at every residual", {"init": "dslm", "lam": None, "beta": None})


def _weight_scales(config: TransformerConfig, plan) -> tuple[float, float]:
    """(σ_21, σ_OV) of the first layer in Alekseev's units (std × √fan_in), each times its branch's β."""
    d, f, h = config.d_model, config.ffn_width, config.n_heads * config.d_head
    s21 = plan.std("w1", 0) * math.sqrt(d) * plan.std("w2", 0) * math.sqrt(f) * abs(plan.scales("ffn", 0)[1])
    sov = plan.std("v", 0) * math.sqrt(d) * plan.std("o", 0) * math.sqrt(h) * abs(plan.scales("attn", 0)[1])
    return s21, sov


def _subcritical_check(config: TransformerConfig, plan, limit: float) -> Check | None:
    from ..apjn.asymptotics import lambda_inv

    alpha = config.alpha_at("ffn")
    s21, sov = _weight_scales(config, plan)
    li = float(lambda_inv(sigma_21=s21, sigma_ov=sov, norm=_PHI[config.norm], alpha=alpha))
    n = config.total_layers
    growth_log = math.sqrt(n * li)
    flagged = growth_log > math.log(limit)
    subject = f"{config.norm} with α = {alpha:g}"
    where = (f"{subject}: APJN ∼ e^√(N/λ), λ⁻¹ = {li:.3g} (Alekseev Result 3.5, Eq. 19), "
             f"×{math.exp(growth_log):.3g} over N = {n} layers")
    if not flagged:
        return Check("subcritical DyT/Derf", False, where + f" (within ×{limit:g})", subject=subject)
    fixed = alpha * math.log(limit) / growth_log
    return Check("subcritical DyT/Derf", True, where + f": subcritical at this depth; α = {fixed:.3g} keeps it "
                 f"within ×{limit:g}", {"norm_alpha": round(fixed, 4)}, subject)


def _saturation_check(config: TransformerConfig, predicted) -> Check | None:
    rows = [predicted.site("input")[0], *predicted.site("layer")] if predicted is not None else []
    if not rows:
        return None
    q = np.array([r.fwd_var + r.fwd_mean**2 for r in rows], dtype=np.float64)[:-1]  # the inputs of layers 0..N−1
    alpha = min(config.alpha_at("attn"), config.alpha_at("ffn"))
    reach = alpha * np.sqrt(q)
    saturated = np.flatnonzero(reach >= SATURATION)
    subject = f"{config.norm} α√q"
    message = f"{subject}: {reach.min():.3g} – {reach.max():.3g} over the layers (saturated from {SATURATION:g})"
    if not saturated.size:
        return Check("saturated DyT/Derf", False, message, subject=subject)
    fixed = 1.0 / math.sqrt(float(q.max()))
    return Check("saturated DyT/Derf", True, message + f": saturated at {saturated.size} of {q.size} layers (from "
                 f"layer {saturated[0]}); α ≤ 1/√q_max = {fixed:.3g} keeps α√q ≤ 1", {"norm_alpha": round(fixed, 4)},
                 subject)


def config_checks(config: TransformerConfig, predicted=None, limits: DiagnosisLimits | None = None) -> list[Check]:
    """The checks of ``config`` (module docstring) that apply to it, flagged or not; ``predicted``, its predicted
    profile, for the saturation check (left out without it)."""
    from ..model.transformer import plan_for

    limits = limits or DiagnosisLimits()
    checks = [_scheme_check(config)]
    if config.norm in _PHI and config.norm_position == "pre":
        checks += [_subcritical_check(config, plan_for(config), limits.growth), _saturation_check(config, predicted)]
    return [c for c in checks if c is not None]
