"""``sigprop apjn``: a thin wrapper over :func:`sigprop.apjn.runs.run_apjn` (theory vs Hutchinson measurement of
the averaged partial Jacobian norm) and :func:`sigprop.apjn.runs.run_phase` (``--phase``)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ..apjn.setup import ApjnSetup
from .profiles import print_written
from .terminal import Display, console, parse_floats, refuse_unused

__all__ = ["apjn_command"]


def DEFAULT(name: str):  # noqa: N802 - reads like the constant it stands for
    """An :class:`~sigprop.apjn.setup.ApjnSetup` field's default (written once, there)."""
    return ApjnSetup.__dataclass_fields__[name].default


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


#: The options only the measured curves use (not ``--phase``'s theory maps), and those only ``--phase`` uses.
_CURVE_ONLY = ("blocks", "width", "heads", "tokens", "activation", "q0", "p0", "inputs", "samples", "probes", "seeds",
               "stride", "kind", "device")
_PHASE_ONLY = ("grid", "max_sigma")


def apjn_command(
    ctx: typer.Context,
    norm: str = typer.Option("layernorm,derf", help="Norms to compare, comma-separated: layernorm (pre-LN), dyt, "
                             "derf (DyT/Derf replace every norm, the final one included)."),
    alpha: str = typer.Option("0.5,1,1.5", help="DyT/Derf initial α, comma-separated (one curve each)."),
    blocks: int = typer.Option(DEFAULT("blocks"), help="Transformer blocks B (attention + MLP each)."),
    sigma_ffn: float = typer.Option(DEFAULT("sigma_21"), "--sigma-ffn", help="σ_21 = σ_2σ_1 of the MLP weights "
                                    "(0.61: timm's ViT-B init, std 0.02 at d = 768)."),
    sigma_attn: float = typer.Option(DEFAULT("sigma_ov"), "--sigma-attn", help="σ_OV = σ_Oσ_V of the attention "
                                     "value/output weights (0.31: timm's ViT-B)."),
    width: int = typer.Option(DEFAULT("d_model"), help="Hidden width d of the measured model."),
    heads: int = typer.Option(DEFAULT("n_heads"), help="Attention heads."),
    tokens: int = typer.Option(DEFAULT("tokens"), help="Tokens n per input, a square number (the ViT's patch "
                               "grid)."),
    activation: str = typer.Option(DEFAULT("activation"), help="MLP activation: relu (the theory's) or gelu."),
    q0: float = typer.Option(DEFAULT("q0"), "--q0", help="Equiangular inputs: |h|²/d of every token."),
    p0: float = typer.Option(DEFAULT("p0"), "--p0", help="Equiangular inputs: h_s·h_t/d of every pair."),
    inputs: str = typer.Option(DEFAULT("inputs"), help="equiangular (exact (q⁰, p⁰) configurations) or digits "
                               "(scikit-learn's digits through the patch embedding; (q⁰, p⁰) from Eq. 21)."),
    samples: int = typer.Option(DEFAULT("samples"), help="Digits images (one curve each) with --inputs digits."),
    probes: int = typer.Option(DEFAULT("probes"), help="Hutchinson probes per model."),
    seeds: int = typer.Option(DEFAULT("seeds"), help="Weight initialisations averaged (the APJN is 𝔼 over them)."),
    stride: int = typer.Option(DEFAULT("stride"), help="Measure every stride-th block (the last one always)."),
    kind: str = typer.Option(DEFAULT("kind"), help="backward (J^{B,b}, the gradient's amplification) or forward "
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
    import numpy as np

    from ..apjn.runs import apjn_setups, run_apjn, run_phase

    if phase:
        refuse_unused(ctx, _CURVE_ONLY, "not used with --phase (it maps the theory over (σ_21, σ_OV) and "
                      "measures no model)")
    else:
        refuse_unused(ctx, _PHASE_ONLY, "used with --phase only")
    norms = [n.strip() for n in norm.split(",") if n.strip()]
    alphas = parse_floats(alpha, "--alpha")
    if phase:
        first = next((n for n in norms if n in ("dyt", "derf")), None)
        if first is None:
            raise ValueError(f"--phase maps λ⁻¹ of DyT or Derf: give --norm dyt or derf (got {norm!r})")
        with Display() as display:
            run = run_phase(first, alphas, grid, max_sigma, display, json_path, plot,
                            point=(sigma_ffn, sigma_attn))
        for label, ph, seconds, lam, c_star, _ in run.maps:
            lo, hi = np.nanmin(ph.lambda_inv), np.nanmax(ph.lambda_inv)
            console.print(f"{label}: λ⁻¹ over σ_21, σ_OV ∈ [{run.axis[0]:.3g}, {run.axis[-1]:.3g}] spans "
                          f"[{lo:.3g}, {hi:.3g}] ({seconds:.2f} s); at (σ_21, σ_OV) = {run.point}: "
                          f"λ⁻¹ = {lam:.4g}, c* = {c_star:.4g}")
        lo, hi = np.nanmin(run.zeta), np.nanmax(run.zeta)
        console.print(f"pre-LN: ζ spans [{lo:.3g}, {hi:.3g}]; at (σ_21, σ_OV) = {run.point} ζ = {run.zeta_at:.4g}")
        print_written(run.written)
        return
    setups = apjn_setups(norms, alphas, blocks=blocks, sigma_21=sigma_ffn, sigma_ov=sigma_attn, d_model=width,
                         n_heads=heads, tokens=tokens, activation=activation, q0=q0, p0=p0, inputs=inputs,
                         samples=samples, probes=probes, seeds=seeds, stride=stride, kind=kind)
    with Display() as display:
        run = run_apjn(setups, device, display, json_path, plot)
    console.print(_table(run.curves, kind))
    def f3(v):
        return "–" if v is None else f"{v:.3f}"

    for label, ch in run.checks.items():
        if "zeta" in ch:
            console.print(f"{label}: slope of log J^{{B,b}} vs log b = {f3(ch['slope_measured'])} measured, "
                          f"{f3(ch['slope_theory'])} theory (full), ζ = {ch['zeta']:.3f} (Eq. 17)")
        elif "lambda_inv" in ch:
            console.print(f"{label}: slope of log J^{{B,b}} vs √b = {f3(ch['slope_measured'])} measured, "
                          f"{f3(ch['slope_theory'])} theory (full), √λ⁻¹ = {ch['sqrt_lambda_inv']:.3f} (Eq. 19, "
                          f"the large-depth limit)")
    if run.order is not None:
        console.print(f"ordering of J at block {run.order['block']}: theory {run.order['theory_order']}, measured "
                      f"{run.order['measured_order']}: {'match' if run.order['match'] else 'DIFFERENT'}")
    print_written(run.written)
