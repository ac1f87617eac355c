"""APJN theory against measurement on the ViT form (Alekseev Sec. 3, Figs. 1, 2, 9, 10): what ``sigprop apjn`` runs.

One :class:`ApjnSetup` (a frozen dataclass, validated in one place) names a model (norm, α, blocks, σ_21, σ_OV,
width, heads, tokens), an input (an equiangular configuration with given (q⁰, p⁰), or images of scikit-learn's
digits through the model's own patch embedding) and a measurement (probes, weight seeds). :func:`compare_apjn`
returns one :class:`ApjnCurve` per input: the recurrences of :mod:`sigprop.apjn.recurrence` (simplified, Result 3.2;
full, Results C.1–C.2), the large-depth law of :mod:`sigprop.apjn.asymptotics` (Eq. 16 or 18), the Hutchinson
measurement of :mod:`sigprop.apjn.hutchinson` averaged over weight seeds, and the GMFE of Eq. 20 per third of the depth.

Conventions (as in the paper): block b is the hidden state h^b at the input of block b (b = 0…B; h^B is the last
block's output, before the final norm); backward APJN 𝒥^{B,b}, forward 𝒥^{b,0}. The theory's α is one value for
every norm (Result 3.1), so the measured model uses it at every position as well.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from ..core.devices import check_device
from ..core.jsonio import json_number
from .asymptotics import lambda_inv, preln_backward_asymptotic, stretched_backward_asymptotic, zeta
from .gmfe import gmfe_by_third
from .hutchinson import measure_apjn
from .inputs import digits_hidden_states, equiangular_tokens, estimate_q0_p0
from .recurrence import apjn_profile
from .setup import INPUTS, KINDS, NORMS, THEORY_NORM, ApjnSetup

__all__ = ["ApjnSetup", "ApjnCurve", "NORMS", "INPUTS", "KINDS", "compare_apjn", "theory_curves", "loglog_slope",
           "sqrt_slope", "curve_checks", "growth_order"]



@dataclass(frozen=True)
class ApjnCurve:
    """Theory and measurement of one setup on one input. Theory arrays run over b = 0…B: ``simplified`` (Result
    3.2), ``full`` (Results C.1–C.2 with the context size n = tokens and its (n−1)/n factors kept), ``asymptotic``
    (Eq. 16 for pre-LN, Eq. 18 for DyT/Derf; backward only, NaN at b = 0 for pre-LN). ``measured`` / ``se`` /
    ``per_seed`` at ``blocks``; ``q0``, ``p0`` the input's covariance (given, or Eq. 21 averaged over the seeds'
    embeddings); ``gmfe`` = {"full"|"simplified": {"early"|"middle"|"deep": GMFE (Eq. 20)}}."""

    setup: ApjnSetup
    label: str
    sample: int | None
    q0: float
    p0: float
    simplified: np.ndarray
    full: np.ndarray
    asymptotic: np.ndarray
    blocks: np.ndarray
    measured: np.ndarray
    se: np.ndarray
    per_seed: np.ndarray
    gmfe: dict
    seconds: float
    extras: dict = field(default_factory=dict)

    def theory(self, kind: str = "full") -> np.ndarray:
        """The theory at the measured blocks."""
        return (self.full if kind == "full" else self.simplified)[self.blocks]

    def to_dict(self) -> dict:
        nan_none = lambda a: [json_number(v) for v in np.asarray(a)]  # noqa: E731
        return {"label": self.label, "setup": self.setup.to_dict(), "sample": self.sample, "q0": self.q0,
                "p0": self.p0, "theory": {"simplified": nan_none(self.simplified), "full": nan_none(self.full),
                                          "asymptotic": nan_none(self.asymptotic)},
                "blocks": self.blocks.tolist(), "measured": self.measured.tolist(), "se": self.se.tolist(),
                "per_seed": self.per_seed.tolist(), "gmfe": self.gmfe, "seconds": self.seconds, **self.extras}


def theory_curves(setup: ApjnSetup, q0: float, p0: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(simplified, full, asymptotic) APJN over b = 0…B for ``setup`` from the input covariance (q0, p0)."""
    norm = THEORY_NORM[setup.norm]
    prof = apjn_profile(sigma_21=setup.sigma_21, sigma_ov=setup.sigma_ov, blocks=setup.blocks, norm=norm,
                        alpha=setup.alpha, q0=q0, p0=p0,
                        n=setup.tokens, covariance="finite_n", exact_n=True)
    if setup.kind == "backward":
        simplified, full = prof.backward("simplified"), prof.backward("full")
        b = np.arange(setup.blocks + 1, dtype=np.float64)
        asym = np.full(b.shape, np.nan)
        if setup.norm == "layernorm":
            asym[1:] = preln_backward_asymptotic(setup.blocks, b[1:], zeta(sigma_21=setup.sigma_21,
                                                                           sigma_ov=setup.sigma_ov))
        else:
            lam = lambda_inv(sigma_21=setup.sigma_21, sigma_ov=setup.sigma_ov, norm=norm, alpha=setup.alpha)
            asym[1:] = stretched_backward_asymptotic(setup.blocks, b[1:], lam)
            asym[0] = math.exp(math.sqrt(setup.blocks * float(lam)))
    else:
        simplified, full = prof.forward("simplified"), prof.forward("full")
        asym = np.full(setup.blocks + 1, np.nan)
    return np.asarray(simplified, dtype=np.float64), np.asarray(full, dtype=np.float64), asym


def _equiangular_source(setup: ApjnSetup) -> Callable[[torch.nn.Module], torch.Tensor]:
    gen = torch.Generator().manual_seed(setup.seed0 + 7919)

    def source(model):
        h = equiangular_tokens(setup.tokens, setup.d_model, setup.q0, setup.p0, generator=gen)
        return h.to(next(model.parameters()).dtype)
    return source


def _digits_source(index: int, seen: list) -> Callable[[torch.nn.Module], torch.Tensor]:
    def source(model):
        h = digits_hidden_states(model, indices=[index])[0]
        seen.append(estimate_q0_p0(h))
        return h
    return source


def _one_curve(setup: ApjnSetup, source, seen: list, sample: int | None, progress, device) -> ApjnCurve:
    t0 = time.perf_counter()
    blocks = setup.measured_blocks()
    seeds = list(range(setup.seed0, setup.seed0 + setup.seeds))
    per_seed = []

    def counting(model):  # one call per seed: advance the progress bar there
        h = source(model)
        if progress is not None and per_seed:
            progress(1)
        per_seed.append(True)
        return h

    meas = measure_apjn(setup.model_config(), counting, seeds=seeds, probes=setup.probes, kind=setup.kind,
                        blocks=blocks, device=device)
    if progress is not None:
        progress(1)
    if setup.inputs == "equiangular":  # exact by construction: the stated values
        q0, p0 = setup.q0, setup.p0
    else:  # Eq. 21 on each seed's embedding of the image, averaged
        q0, p0 = (float(v) for v in np.mean(np.array(seen, dtype=np.float64), axis=0))
    p0_theory = min(max(p0, 0.0), q0)  # Assumption 2.1 analyses p⁰ >= 0 (Sec. 3.1)
    simplified, full, asym = theory_curves(setup, q0, p0_theory)
    b = np.asarray(meas.blocks)
    gm = {kind: gmfe_by_third(arr[b], meas.mean, b, setup.blocks) for kind, arr in
          (("full", full), ("simplified", simplified))}
    extras = {"p0_used_by_theory": p0_theory} if p0_theory != p0 else {}
    return ApjnCurve(setup=setup, label=setup.label if sample is None else f"{setup.label}, digit #{sample}",
                     sample=sample, q0=q0, p0=p0, simplified=simplified, full=full, asymptotic=asym, blocks=b,
                     measured=np.asarray(meas.mean), se=np.asarray(meas.se),
                     per_seed=np.asarray(meas.per_seed_mean), gmfe=gm, seconds=time.perf_counter() - t0,
                     extras=extras)


def compare_apjn(setup: ApjnSetup, progress: Callable[[int], None] | None = None, device=None) -> list[ApjnCurve]:
    """Theory vs Hutchinson measurement for ``setup``: one :class:`ApjnCurve` for equiangular inputs, one per
    digits image (the first ``samples`` images of the data set) otherwise. ``progress`` is called with 1 after each
    measured model (``setup.seeds`` per curve); ``device`` runs the models there (weights are drawn on the CPU from
    the seed, so every device measures the same models); ``ValueError`` if this machine lacks it."""
    if device is not None:
        device = check_device(device)
    if setup.inputs == "equiangular":
        seen: list = []
        return [_one_curve(setup, _equiangular_source(setup), seen, None, progress, device)]
    curves = []
    for index in range(setup.samples):
        seen = []
        curves.append(_one_curve(setup, _digits_source(index, seen), seen, index, progress, device))
    return curves


def curve_checks(curve: ApjnCurve) -> dict:
    """Large-depth shape checks of one backward curve (Results 3.4, 3.5): for pre-LN the least-squares slope of
    log 𝒥^{B,b} against log b over the measured blocks b >= 1, measured and full theory, beside −ζ (Eq. 17); for
    DyT/Derf the slope against √b beside −√(λ⁻¹) (Eq. 19); a slope that cannot be fitted (fewer than two usable
    blocks) is None. Empty for forward curves."""
    s = curve.setup
    if s.kind != "backward":
        return {}
    b, m, t = curve.blocks, curve.measured, curve.theory("full")
    if s.norm == "layernorm":
        z = float(zeta(sigma_21=s.sigma_21, sigma_ov=s.sigma_ov))
        return {"zeta": z, "slope_measured": json_number(-loglog_slope(b, m)),
                "slope_theory": json_number(-loglog_slope(b, t)),
                "slope_fit": "−d log J^{B,b} / d log b over the measured blocks b >= 1"}
    lam = float(lambda_inv(sigma_21=s.sigma_21, sigma_ov=s.sigma_ov, norm=THEORY_NORM[s.norm], alpha=s.alpha))
    return {"lambda_inv": lam, "sqrt_lambda_inv": math.sqrt(lam), "slope_measured": json_number(-sqrt_slope(b, m)),
            "slope_theory": json_number(-sqrt_slope(b, t)),
            "slope_fit": "−d log J^{B,b} / d √b over the measured blocks"}


def growth_order(curves: list[ApjnCurve]) -> dict:
    """Whether the measured APJN at the block of the whole stack orders the curves as the full theory does (the
    acceptance "measured ordering of APJN growth across α matches theory"): the first measured block of a backward
    curve 𝒥^{B,b} (b = 0: through every block), the last of a forward curve 𝒥^{b,0} (b = B), where the curves are
    furthest apart."""
    at = -1 if curves[0].setup.kind == "forward" else 0
    theory = [float(c.theory("full")[at]) for c in curves]
    measured = [float(c.measured[at]) for c in curves]
    labels = [c.label for c in curves]
    t_order = [labels[i] for i in np.argsort(theory)]
    m_order = [labels[i] for i in np.argsort(measured)]
    return {"block": int(curves[0].blocks[at]), "theory_order": t_order, "measured_order": m_order,
            "match": t_order == m_order}


def _log_slope(x, apjn, keep) -> float:
    """Least-squares slope of log 𝒥 against ``x`` over the points ``keep`` where 𝒥 is positive and finite; NaN
    with fewer than two such points (too few blocks measured, or a measurement that over- or underflowed)."""
    y = np.asarray(apjn, dtype=np.float64)
    keep = keep & np.isfinite(y) & (y > 0)
    if np.count_nonzero(keep) < 2 or np.ptp(x[keep]) == 0:
        return math.nan
    return float(np.polyfit(x[keep], np.log(y[keep]), 1)[0])


def loglog_slope(blocks, apjn) -> float:
    """Least-squares slope of log 𝒥 against log b over the given blocks (b >= 1): −ζ for pre-LN's backward APJN
    (Eq. 16), +ζ for its forward APJN; NaN where fewer than two blocks can be fitted."""
    b = np.asarray(blocks, dtype=np.float64)
    return _log_slope(np.log(np.maximum(b, 1.0)), apjn, b >= 1)


def sqrt_slope(blocks, apjn) -> float:
    """Least-squares slope of log 𝒥 against √b: −√(λ⁻¹) for a tanh-like norm's backward APJN at large depth
    (Eq. 18), +√(λ⁻¹) forward; NaN where fewer than two blocks can be fitted."""
    b = np.asarray(blocks, dtype=np.float64)
    return _log_slope(np.sqrt(b), apjn, np.ones(b.shape, dtype=bool))
