"""Verification sweep of ReLU (Kedia et al. App. A.4; ranges of Table 22, paper errors of Table 21)."""

from __future__ import annotations

from ...components.relu import RELU_APPROX, ReLU, relu_backward, relu_forward
from .activation import activation_spec

#: The approximations ``sigprop verify --approx`` may score (checked before any sweep).
APPROXIMATIONS = RELU_APPROX

SPEC, predict = activation_spec(
    "relu", "ReLU", ReLU, relu_forward, relu_backward,
    paper={"mean": (0.3, 1.3, 2.3), "var": (0.5, 1.9, 3.4), "grad_var": (0.6, 1.5, 2.6), "corr": (0.3, 1.6, 3.1),
           "grad_corr": (0.2, 1.1, 2.3)},
    mean_path="closed forms; checked by tests/components/test_relu.py",
)
