"""Verification sweep of RMSNorm (:mod:`sigprop.components.rmsnorm`).

Kedia et al. do not treat RMSNorm; the sweep uses LayerNorm's ranges of Table 22 (μ ∈ [−10, 10] matters here: the
mean does not drop out of RMSNorm) and has no paper errors to compare with.
"""

from __future__ import annotations

from ...components.rmsnorm import RMSNorm, rmsnorm_backward, rmsnorm_forward
from ...core.moments import GradMoments, Moments
from .common import as_quantities
from .layernorm import norm_spec


def _predict(params):
    m = Moments(params["mean"], params["var"], params["corr"])
    eps = RMSNorm(8).moment_eps  # the module's default eps (torch.finfo(float32).eps), as simulated
    fwd = rmsnorm_forward(m, params["d"], eps)
    bwd = rmsnorm_backward(GradMoments(params["grad_var"], params["grad_corr"]), m, params["d"], eps)
    return as_quantities(fwd, bwd)


SPEC = norm_spec(
    "rmsnorm", "RMSNorm", RMSNorm, _predict, paper={},
    note="Ranges: LayerNorm's row of Table 22 (the paper has no RMSNorm). Module: sigprop's RMSNorm(d) "
         "(torch.nn.RMSNorm's interface and default eps = finfo(float32).eps, weight 1).",
)
