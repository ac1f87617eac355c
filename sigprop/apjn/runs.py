"""What ``sigprop apjn`` does, as library functions: the setups of a norms × α grid (:func:`apjn_setups`), theory
against Hutchinson measurement for each (:func:`run_apjn`), or the phase maps of Fig. 3 (:func:`run_phase`), each
writing its JSON and figure to paths checked before any work."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from ..core.jsonio import write_json_atomic
from ..core.outputs import check_output_path
from ..core.progress import Progress, tasks
from ..core.validate import check_range, integer_value
from .setup import NORMS, ApjnSetup

__all__ = ["apjn_setups", "ApjnRun", "run_apjn", "PhaseRun", "run_phase"]


def apjn_setups(norms: list[str], alphas: list[float], **fields) -> list[ApjnSetup]:
    """One :class:`ApjnSetup` per norm of ``norms`` and, for DyT/Derf, per α of ``alphas`` (pre-LN has none), with
    the common ``fields``; ``ValueError`` naming an unknown norm or a field out of range, before anything runs."""
    unknown = [n for n in norms if n not in NORMS]
    if unknown or not norms:
        raise ValueError(f"--norm must be a comma-separated list of {', '.join(NORMS)} (got {','.join(norms)!r})")
    default_alpha = ApjnSetup.__dataclass_fields__["alpha"].default
    return [ApjnSetup(norm=n, alpha=a, **fields) for n in norms for a in ([default_alpha] if n == "layernorm"
                                                                           else alphas)]


def _outputs(json_path, plot) -> None:
    if json_path is not None:
        check_output_path(json_path, "--json")
    if plot is not None:
        check_output_path(plot, "--plot", ".png")


@dataclass
class ApjnRun:
    """Theory against measurement: the curves, each curve's large-depth checks, whether the measured ordering of
    the curves matches the theory's (None for one curve or digits inputs), and the files written."""

    curves: list
    checks: dict
    order: dict | None
    written: list = field(default_factory=list)


def run_apjn(setups: list[ApjnSetup], device=None, progress: Progress | None = None, json_path=None,
             plot=None) -> ApjnRun:
    """:func:`~sigprop.apjn.experiment.compare_apjn` for every setup (one progress task for all their models), the
    checks of :func:`~sigprop.apjn.experiment.curve_checks` and :func:`~sigprop.apjn.experiment.growth_order`, the
    JSON and the figure."""
    from ..core.devices import check_device
    from .experiment import compare_apjn, curve_checks, growth_order
    from .plots import plot_apjn

    _outputs(json_path, plot)
    if device is not None:
        check_device(device)
    s0 = setups[0]
    per_setup = s0.seeds * (s0.samples if s0.inputs == "digits" else 1)
    tick = tasks(progress).task(f"measuring {len(setups)} model kind(s) × {per_setup} model(s)",
                                len(setups) * per_setup)
    curves = [c for s in setups for c in compare_apjn(s, progress=tick, device=device)]
    checks = {c.label: curve_checks(c) for c in curves}
    order = growth_order(curves) if len(curves) > 1 and s0.inputs == "equiangular" else None
    run = ApjnRun(curves, checks, order)
    if json_path is not None:
        run.written.append(("APJN JSON", write_json_atomic(json_path, {
            "kind": "apjn", "curves": [c.to_dict() for c in curves], "checks": checks, "order": order,
            "setup": dataclasses.asdict(s0)})))
    if plot is not None:
        title = (f"{s0.kind} APJN, {s0.blocks} blocks, d = {s0.d_model}, n = {s0.tokens}, σ_21 = {s0.sigma_21:g}, "
                 f"σ_OV = {s0.sigma_ov:g}, {s0.inputs}" + (f" (q⁰, p⁰) = ({s0.q0:g}, {s0.p0:g})"
                                                            if s0.inputs == "equiangular" else ""))
        run.written.append(("figure", plot_apjn(plot, curves, title=title)))
    return run


@dataclass
class PhaseRun:
    """The phase maps: (label, map, seconds, λ⁻¹ and c* at the ViT's point) per α, ζ of pre-LN over the grid and at
    that point, the grid, and the files written."""

    maps: list
    zeta: np.ndarray
    zeta_at: float
    axis: np.ndarray
    point: tuple[float, float]
    written: list = field(default_factory=list)


def run_phase(norm: str, alphas: list[float], grid: int = 60, max_sigma: float = 2.0,
              progress: Progress | None = None, json_path=None, plot=None,
              point: tuple[float, float] | None = None) -> PhaseRun:
    """The λ⁻¹ map of DyT/Derf (``norm``) at each α and the ζ map of pre-LN over a ``grid`` × ``grid`` of
    (σ_21, σ_OV) ∈ (0, ``max_sigma``]² (Alekseev Fig. 3), with their values at ``point`` = (σ_21, σ_OV) (default:
    the ViT's, App. A), marked on the figure."""
    from .asymptotics import phase_map
    from .plots import plot_phase

    if norm not in ("dyt", "derf"):
        raise ValueError(f"--phase maps a DyT or Derf model: give --norm dyt or derf (got {norm!r})")
    integer_value(grid, "--grid", 2)
    check_range(max_sigma, "--max-sigma", lo=0.0, hi=100.0, lo_open=True)
    for a in alphas:
        check_range(a, "--alpha", lo=0.0, hi=100.0, lo_open=True)
    _outputs(json_path, plot)
    axis = np.linspace(max_sigma / grid, max_sigma, grid)
    phi, name = {"derf": ("erf", "Derf"), "dyt": ("tanh", "DyT")}[norm]
    s21, sov = ApjnSetup.__dataclass_fields__["sigma_21"].default, ApjnSetup.__dataclass_fields__["sigma_ov"].default
    if point is not None:
        s21, sov = (check_range(v, name, lo=0.0, hi=100.0, lo_open=True)
                    for v, name in zip(point, ("--sigma-ffn", "--sigma-attn"), strict=True))
    maps = []
    for alpha in alphas:
        tasks(progress).task(f"phase map {name} α={alpha:g}, {grid}×{grid}", None)
        t0 = time.perf_counter()
        ph = phase_map(sigma_21=axis, sigma_ov=axis, norm=phi, alpha=alpha)
        at = phase_map(sigma_21=np.array([s21]), sigma_ov=np.array([sov]), norm=phi, alpha=alpha)
        maps.append((f"{name} α={alpha:g}", ph, time.perf_counter() - t0, at.lambda_inv.item(), at.c_star.item(),
                     alpha))
    run = PhaseRun(maps, maps[0][1].zeta, float(at.zeta.item()), axis, (s21, sov))
    if json_path is not None:
        run.written.append(("phase JSON", write_json_atomic(json_path, {
            "kind": "apjn-phase", "norm": norm, "sigma_21": axis.tolist(), "sigma_ov": axis.tolist(),
            "zeta": run.zeta.tolist(), "maps": [{"alpha": a, "lambda_inv": ph.lambda_inv.tolist(),
                                                 "c_star": ph.c_star.tolist(), "q_slope": ph.q_slope.tolist()}
                                                for _, ph, _, _, _, a in maps]})))
    if plot is not None:
        run.written.append(("figure", plot_phase(plot, [(label, ph) for label, ph, *_ in maps], mark=(s21, sov))))
    return run
