"""Verification sweep of DyT, y = γ·tanh(αx) + β (Zhu et al. 2025; rules after Alekseev Eqs. 10, 13, 40).

Kedia et al.'s Table 22 has no DyT row; the ranges are ours (documented per parameter and in ``SPEC.note``).
"""

from __future__ import annotations

import torch

from ...components.dyt import DyT, dyt_backward, dyt_forward
from ..sampling import column
from ..spec import Param
from ..tokenwise import ELEMENTWISE_NOTE
from .dynamic import dynamic_spec

#: Range of the pre-activation mean αμ (see NOTE).
PRE_MEAN_MAX = 2.0

NOTE = (
    ELEMENTWISE_NOTE + " Ranges (not in Kedia et al. Table 22): σ², r, σ²_g, r_g as Table 22 gives for GeLU; "
    "α ∈ [0.1, 2] (Alekseev studies 0.3 to 1.9; Zhu et al.'s default is 0.5); γ = 1, β = 0 (their init; γ and β "
    "are exercised by the unit tests). The input mean is swept through the pre-activation mean αμ ∈ [−2, 2], i.e. "
    "μ = pre_mean/α, which covers μ ∈ [−3, 3] for α ≤ 2/3, |μ| ≤ 20 at α = 0.1 and |μ| ≤ 1 at α = 2. A box "
    "μ ∈ [−3, 3] × α ∈ [0.1, 2] × σ² ∈ [0.1, 10] was not used because at its corner (α = 2, |μ| = 3, σ² ≤ 1) tanh is "
    "so saturated that Var y and E[sech⁴] are dominated by rare pre-activations near 0: a Monte Carlo run with "
    "5·10⁵ elements then has 3–6% relative standard error (computed by quadrature of the fourth moments), so it "
    "cannot check a rule to 1%. With |αμ| ≤ 2 the worst-case standard error is ~0.7%."
)


SPEC = dynamic_spec(
    "dyt", "DyT (dynamic tanh)",
    module=lambda prm: DyT(alpha=column(prm["alpha"], 5, torch.float32)),
    forward=dyt_forward, backward=dyt_backward, rule_args=lambda prm: (prm["alpha"],),
    params=(
        Param("alpha", 0.1, 2.0, doc="DyT scale α (not in Table 22; Alekseev: 0.3–1.9, Zhu et al. default 0.5)"),
        Param("pre_mean", -PRE_MEAN_MAX, PRE_MEAN_MAX,
              doc="pre-activation mean αμ; the input mean is μ = pre_mean/α (see SPEC.note)"),
    ),
    note=NOTE,
)
