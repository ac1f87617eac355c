"""The averaged partial Jacobian norm (APJN) of pre-LN and normalization-free transformers (Alekseev 2026).

* :mod:`~sigprop.apjn.elementwise`: the (q, p) covariance components propagated through φ_α or LayerNorm;
* :mod:`~sigprop.apjn.recurrence`: the covariance and APJN recurrences (Results 3.1, 3.2, C.1, C.2, App. F);
* :mod:`~sigprop.apjn.asymptotics`: c*, ζ, λ⁻¹ and the large-depth laws (Results 3.3–3.5), phase maps (Fig. 3);
* :mod:`~sigprop.apjn.hutchinson`: Hutchinson and exact APJN measurement of a sigprop model or any block stack;
* :mod:`~sigprop.apjn.inputs`: equiangular token configurations, digits images through a patch embedding, Eq. 21;
* :mod:`~sigprop.apjn.gmfe`: the geometric mean fold error (Eq. 20);
* :mod:`~sigprop.apjn.experiment`: theory against measurement on the ViT form (what ``sigprop apjn`` runs).
"""

from .asymptotics import c_star, lambda_inv, phase_map, zeta
from .experiment import ApjnCurve, ApjnSetup, compare_apjn
from .gmfe import gmfe, gmfe_by_third
from .hutchinson import as_block_stack, backward_apjn, exact_apjn, forward_apjn, measure_apjn
from .inputs import equiangular_tokens, estimate_q0_p0
from .recurrence import ApjnProfile, apjn_profile

__all__ = ["ApjnCurve", "ApjnProfile", "ApjnSetup", "apjn_profile", "as_block_stack", "backward_apjn", "c_star",
           "compare_apjn", "equiangular_tokens", "estimate_q0_p0", "exact_apjn", "forward_apjn", "gmfe",
           "gmfe_by_third", "lambda_inv", "measure_apjn", "phase_map", "zeta"]
