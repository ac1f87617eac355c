"""Verification sweep of GeLU (Kedia et al. App. A.5; ranges of Table 22, paper errors of Table 21)."""

from __future__ import annotations

from ...components.gelu import GELU, GELU_APPROX, gelu_backward, gelu_forward
from .activation import activation_spec

#: The approximations ``sigprop verify --approx`` may score (checked before any sweep).
APPROXIMATIONS = GELU_APPROX

SPEC, predict = activation_spec(
    "gelu", "GeLU (exact erf form)", GELU, gelu_forward, gelu_backward,
    paper={"mean": (0.1, 1.0, 2.4), "var": (0.2, 0.6, 1.3), "grad_var": (0.2, 0.6, 1.1), "corr": (0.1, 0.5, 1.2),
           "grad_corr": (0.1, 0.4, 0.9)},
    mean_path="a Price-theorem integral of a closed form, see gelu.py; checked by tests/components/test_gelu.py",
)
