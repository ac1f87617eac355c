"""``sigprop apjn``: a thin wrapper over :func:`sigprop.apjn.experiment.compare_apjn` (theory vs Hutchinson measurement
of the averaged partial Jacobian norm) and :func:`sigprop.apjn.asymptotics.phase_map` (``--phase``)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import typer
from rich.table import Table

from .terminal import console, parse_floats, progress_bar

__all__ = ["apjn_command"]


def _default(name: str):
    from ..apjn.experiment import ApjnSetup

    return ApjnSetup.__dataclass_fields__[name].default


def _setups(norms: str, alphas: str, **fields) -> list:
    from ..apjn.experiment import NORMS, ApjnSetup

    names = [n.strip() for n in norms.split(",") if n.strip()]
    unknown = [n for n in names if n not in NORMS]
    if unknown or not names:
        raise ValueError(f"--norm must be a comma-separated list of {', '.join(NORMS)} (got {norms!r})")
    out = []
    for n in names:
        for a in ([_default("alpha")] if n == "layernorm" else parse_floats(alphas, "--alpha")):
            out.append(ApjnSetup(norm=n, alpha=a, **fields))
    return out


def _table(curves, kind: str) -> Table:
    sym = "J^{B,0}" if kind == "backward" else "J^{B,0} (fwd)"
    t = Table(title=f"{kind} APJN: theory vs measured (GMFE of the full theory per third of the depth)")
    for col in ("model", "q⁰", "p⁰", f"{sym} full", f"{sym} simplified", f"{sym} measured ± SE", "GMFE early",
                "GMFE middle", "GMFE deep", "time"):
        t.add_column(col, justify="left" if col == "model" else "right")
    for c in curves:
        i = 0 if kind == "backward" else -1
        g = c.gmfe["full"]
        t.add_row(c.label, f"{c.q0:.3g}", f"{c.p0:.3g}", f"{c.theory('full')[i]:.4g}",
                  f"{c.theory('simplified')[i]:.4g}", f"{c.measured[i]:.4g} ± {c.se[i]:.2g}",
                  *(f"{g[k]:.3f}" if k in g else "–" for k in ("early", "middle", "deep")), f"{c.seconds:.0f} s")
    return t


def _run_phase(norm: str, alphas: str, grid: int, max_sigma: float, json_path, plot):
    from ..apjn.asymptotics import phase_map
    from ..core.jsonio import write_json_atomic

    if grid < 2:
        raise ValueError(f"--grid must be >= 2 (got {grid})")
    if not max_sigma > 0:
        raise ValueError(f"--max-sigma must be > 0 (got {max_sigma})")
    axis = np.linspace(max_sigma / grid, max_sigma, grid)
    phi = {"derf": "erf", "dyt": "tanh"}[norm]
    name = "Derf" if norm == "derf" else "DyT"
    s21, sov = _default("sigma_21"), _default("sigma_ov")
    maps, out = [], []
    for alpha in parse_floats(alphas, "--alpha"):
        with console.status(f"phase map {name} α={alpha:g}, {grid}×{grid} ..."):
            t0 = time.perf_counter()
            ph = phase_map(axis, axis, phi, alpha)
            seconds = time.perf_counter() - t0
        at = phase_map(np.array([s21]), np.array([sov]), phi, alpha)
        label = f"{name} α={alpha:g}"
        maps.append((label, ph))
        console.print(f"{label}: λ⁻¹ over σ_21, σ_OV ∈ [{axis[0]:.3g}, {axis[-1]:.3g}] spans "
                      f"[{np.nanmin(ph.lambda_inv):.3g}, {np.nanmax(ph.lambda_inv):.3g}] ({seconds:.2f} s); at the "
                      f"ViT's (σ_21, σ_OV) = ({s21}, {sov}): λ⁻¹ = {at.lambda_inv.item():.4g}, "
                      f"c* = {at.c_star.item():.4g}")
        out.append({"alpha": alpha, "lambda_inv": ph.lambda_inv.tolist(), "c_star": ph.c_star.tolist(),
                    "q_slope": ph.q_slope.tolist()})
    z = maps[0][1].zeta
    console.print(f"pre-LN: ζ spans [{np.nanmin(z):.3g}, {np.nanmax(z):.3g}]; at the ViT's point ζ = "
                  f"{at.zeta.item():.4g}")
    if json_path:
        write_json_atomic(json_path, {"kind": "apjn-phase", "norm": norm, "sigma_21": axis.tolist(),
                                      "sigma_ov": axis.tolist(), "zeta": z.tolist(), "maps": out})
        console.print(f"phase JSON: {json_path}")
    if plot:
        from ..apjn.plots import plot_phase

        plot_phase(plot, maps, mark=(s21, sov))
        console.print(f"figure: {plot}")


def apjn_command(
    norm: str = typer.Option("layernorm,derf", help="Norms to compare, comma-separated: layernorm (pre-LN), dyt, "
                             "derf (DyT/Derf replace every norm, the final one included)."),
    alpha: str = typer.Option("0.5,1,1.5", help="DyT/Derf initial α, comma-separated (one curve each)."),
    blocks: int = typer.Option(_default("blocks"), help="Transformer blocks B (attention + MLP each)."),
    sigma_ffn: float = typer.Option(_default("sigma_21"), "--sigma-ffn", help="σ_21 = σ_2σ_1 of the MLP weights "
                                    "(0.61: timm's ViT-B init, std 0.02 at d = 768)."),
    sigma_attn: float = typer.Option(_default("sigma_ov"), "--sigma-attn", help="σ_OV = σ_Oσ_V of the attention "
                                     "value/output weights (0.31: timm's ViT-B)."),
    width: int = typer.Option(_default("d_model"), help="Hidden width d of the measured model."),
    heads: int = typer.Option(_default("n_heads"), help="Attention heads."),
    tokens: int = typer.Option(_default("tokens"), help="Tokens n per input, a square number (the ViT's patch "
                               "grid)."),
    activation: str = typer.Option(_default("activation"), help="MLP activation: relu (the theory's) or gelu."),
    q0: float = typer.Option(_default("q0"), "--q0", help="Equiangular inputs: |h|²/d of every token."),
    p0: float = typer.Option(_default("p0"), "--p0", help="Equiangular inputs: h_s·h_t/d of every pair."),
    inputs: str = typer.Option(_default("inputs"), help="equiangular (exact (q⁰, p⁰) configurations) or digits "
                               "(scikit-learn's digits through the patch embedding; (q⁰, p⁰) from Eq. 21)."),
    samples: int = typer.Option(_default("samples"), help="Digits images (one curve each) with --inputs digits."),
    probes: int = typer.Option(_default("probes"), help="Hutchinson probes per model."),
    seeds: int = typer.Option(_default("seeds"), help="Weight initialisations averaged (the APJN is 𝔼 over them)."),
    stride: int = typer.Option(_default("stride"), help="Measure every stride-th block (the last one always)."),
    kind: str = typer.Option(_default("kind"), help="backward (J^{B,b}, the gradient's amplification) or forward "
                             "(J^{b,0})."),
    device: str = typer.Option(None, help="Torch device for the models, e.g. cuda (default: cpu)."),
    phase: bool = typer.Option(False, "--phase", help="Instead: the λ⁻¹ (DyT/Derf) and ζ (pre-LN) maps over "
                               "(σ_21, σ_OV) of Fig. 3 (theory only, the first --norm that is dyt/derf)."),
    grid: int = typer.Option(60, help="--phase: grid points per axis."),
    max_sigma: float = typer.Option(2.0, help="--phase: largest σ_21 and σ_OV on the grid."),
    json_path: Path = typer.Option(None, "--json", help="Write every curve (theory, measurement, GMFE) as JSON."),
    plot: Path = typer.Option(None, help="Write a PNG: APJN per block and GMFE per third (or the phase maps)."),
):
    """The averaged partial Jacobian norm (APJN) of pre-LN and normalization-free (DyT/Derf) transformers: theory
    against measurement, block by block (Alekseev 2026, Sec. 3; Figs. 1, 2, 9, 10).

    Theory: the (q, p) covariance recurrence (Result 3.1) and the APJN recurrences, simplified (Result 3.2) and full
    with the cross-positional term (Results C.1–C.2), plus the large-depth laws (pre-LN power law (B/b)^ζ, Eq. 16;
    DyT/Derf stretched exponential, Eq. 18). Measurement: Hutchinson's estimator ‖vᵀJ‖² with Gaussian probes v on
    the ViT form (bidirectional attention, ReLU MLP, d_ff = 4d), averaged over weight initialisations; the GMFE
    of Eq. 20 per third of the depth summarises the agreement. The default reproduces Fig. 1(a): equiangular
    inputs (q⁰, p⁰) = (1, 0.2), 64 blocks, pre-LN and Derf α ∈ {0.5, 1, 1.5}.
    """
    from ..apjn.experiment import compare_apjn, curve_checks, growth_order
    from ..core.devices import check_device
    from ..core.jsonio import write_json_atomic

    try:
        if phase:
            first = next((n.strip() for n in norm.split(",") if n.strip() in ("dyt", "derf")), "derf")
            _run_phase(first, alpha, grid, max_sigma, json_path, plot)
            return
        setups = _setups(norm, alpha, blocks=blocks, sigma_21=sigma_ffn, sigma_ov=sigma_attn, d_model=width,
                         n_heads=heads, tokens=tokens, activation=activation, q0=q0, p0=p0, inputs=inputs,
                         samples=samples, probes=probes, seeds=seeds, stride=stride, kind=kind)
        if device is not None:
            check_device(device)
    except ValueError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2) from None
    per_setup = seeds * (samples if inputs == "digits" else 1)
    curves = []
    with progress_bar() as bar:
        task = bar.add_task(f"measuring {len(setups)} model kind(s) × {per_setup} model(s)",
                            total=len(setups) * per_setup)
        for s in setups:
            curves.extend(compare_apjn(s, progress=lambda k: bar.advance(task, k), device=device))
    console.print(_table(curves, kind))
    checks = {c.label: curve_checks(c) for c in curves}
    for label, ch in checks.items():
        if "zeta" in ch:
            console.print(f"{label}: slope of log J^{{B,b}} vs log b = {ch['slope_measured']:.3f} measured, "
                          f"{ch['slope_theory']:.3f} theory (full), ζ = {ch['zeta']:.3f} (Eq. 17)")
        elif "lambda_inv" in ch:
            console.print(f"{label}: slope of log J^{{B,b}} vs √b = {ch['slope_measured']:.3f} measured, "
                          f"{ch['slope_theory']:.3f} theory (full), √λ⁻¹ = {ch['sqrt_lambda_inv']:.3f} (Eq. 19, "
                          f"the large-depth limit)")
    order = growth_order(curves) if len(curves) > 1 and inputs == "equiangular" else None
    if order is not None:
        console.print(f"ordering of J at block {order['block']}: theory {order['theory_order']}, measured "
                      f"{order['measured_order']}: {'match' if order['match'] else 'DIFFERENT'}")
    if json_path:
        write_json_atomic(json_path, {"kind": "apjn", "curves": [c.to_dict() for c in curves], "checks": checks,
                                      "order": order, "setup": dataclasses.asdict(setups[0])})
        console.print(f"APJN JSON: {json_path}")
    if plot:
        from ..apjn.plots import plot_apjn

        title = (f"{kind} APJN, {blocks} blocks, d = {width}, n = {tokens}, σ_21 = {sigma_ffn:g}, σ_OV = "
                 f"{sigma_attn:g}, {inputs}" + (f" (q⁰, p⁰) = ({q0:g}, {p0:g})" if inputs == "equiangular" else ""))
        plot_apjn(plot, curves, title=title)
        console.print(f"figure: {plot}")
