"""Verification sweep of Derf, y = γ·erf(αx + s) + β (Chen et al. 2025; rules: Alekseev Eqs. 10, 13, 40, 89, 90
generalised to a nonzero mean and shift).

Kedia et al.'s Table 22 has no Derf row; the ranges are ours (documented per parameter and in ``SPEC.note``).
"""

from __future__ import annotations

import torch

from ...components.derf import Derf, derf_backward, derf_forward
from ..sampling import column
from ..spec import Param
from ..tokenwise import ELEMENTWISE_NOTE
from .dynamic import dynamic_spec

#: Range of the scaled input mean αμ (see NOTE); the shift s adds to it.
PRE_MEAN_MAX = 1.0
SHIFT_MAX = 1.0

NOTE = (
    ELEMENTWISE_NOTE + " Ranges (not in Kedia et al. Table 22): σ², r, σ²_g, r_g as Table 22 gives for GeLU; "
    "α ∈ [0.1, 2] (Alekseev studies 0.3 to 1.9); shift s ∈ [−1, 1]; γ = 1, β = 0 (their init; γ and β are "
    "exercised by the unit tests). The input mean is swept through αμ ∈ [−1, 1], i.e. μ = pre_mean/α, so the "
    "pre-activation mean αμ + s lies in [−2, 2]; this covers μ ∈ [−3, 3] for α ≤ 1/3, |μ| ≤ 10 at α = 0.1 and "
    "|μ| ≤ 0.5 at α = 2. A box μ ∈ [−3, 3] × α ∈ [0.1, 2] was not used because erf saturates like a Gaussian tail: "
    "at α = 2, σ² = 0.1, |αμ + s| ≥ 3 the output variance and E[erf'²] are dominated by pre-activations more than "
    "3–11 standard deviations from their mean, so a Monte Carlo run with 5·10⁵ elements has 4% to >100% relative "
    "standard error there (and at |αμ + s| = 7 float32 erf returns exactly ±1). With |αμ + s| ≤ 2 the worst-case "
    "standard error is ~1% (fourth moments by quadrature)."
)


SPEC = dynamic_spec(
    "derf", "Derf (dynamic erf)",
    module=lambda prm: Derf(alpha=column(prm["alpha"], 5, torch.float32), shift=column(prm["shift"], 5, torch.float32)),
    forward=derf_forward, backward=derf_backward, rule_args=lambda prm: (prm["alpha"], prm["shift"]),
    params=(
        Param("alpha", 0.1, 2.0, doc="Derf scale α (not in Table 22; Alekseev: 0.3–1.9)"),
        Param("pre_mean", -PRE_MEAN_MAX, PRE_MEAN_MAX,
              doc="scaled input mean αμ; the input mean is μ = pre_mean/α (see SPEC.note)"),
        Param("shift", -SHIFT_MAX, SHIFT_MAX, doc="Derf shift s (not in Table 22)"),
    ),
    note=NOTE,
)
