"""The averaged partial Jacobian norm (APJN) of pre-LN and normalization-free transformers (Alekseev 2026).

* :mod:`~sigprop.apjn.elementwise`: the (q, p) covariance components propagated through φ_α or LayerNorm;
* :mod:`~sigprop.apjn.recurrence`: the covariance and APJN recurrences (Results 3.1, 3.2, C.1, C.2, App. F);
* :mod:`~sigprop.apjn.asymptotics`: c*, ζ, λ⁻¹ and the large-depth laws (Results 3.3–3.5), phase maps (Fig. 3);
* :mod:`~sigprop.apjn.hutchinson`: Hutchinson and exact APJN measurement of a sigprop model or any block stack;
* :mod:`~sigprop.apjn.inputs`: equiangular token configurations, digits images through a patch embedding, Eq. 21;
* :mod:`~sigprop.apjn.gmfe`: the geometric mean fold error (Eq. 20);
* :mod:`~sigprop.apjn.experiment`: theory against measurement on the ViT form (what ``sigprop apjn`` runs).
"""

from ..core.lazy import lazy_names

#: public name -> the submodule that defines it (imported on first use)
_NAMES = {
    "c_star": "asymptotics",
    "lambda_inv": "asymptotics",
    "phase_map": "asymptotics",
    "zeta": "asymptotics",
    "ApjnCurve": "experiment",
    "ApjnSetup": "experiment",
    "compare_apjn": "experiment",
    "gmfe": "gmfe",
    "gmfe_by_third": "gmfe",
    "as_block_stack": "hutchinson",
    "backward_apjn": "hutchinson",
    "exact_apjn": "hutchinson",
    "forward_apjn": "hutchinson",
    "measure_apjn": "hutchinson",
    "equiangular_tokens": "inputs",
    "estimate_q0_p0": "inputs",
    "ApjnProfile": "recurrence",
    "apjn_profile": "recurrence",
}
__getattr__, __dir__ = lazy_names(__name__, _NAMES)

__all__ = ["ApjnCurve", "ApjnProfile", "ApjnSetup", "apjn_profile", "as_block_stack", "backward_apjn", "c_star",
           "compare_apjn", "equiangular_tokens", "estimate_q0_p0", "exact_apjn", "forward_apjn", "gmfe",
           "gmfe_by_third", "lambda_inv", "measure_apjn", "phase_map", "zeta"]
