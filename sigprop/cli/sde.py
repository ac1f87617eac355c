"""``sigprop sde``: a thin wrapper over :func:`sigprop.sde.experiments.run_figure` (Noci et al. Figs. 1, 3, 4, 5, 7,
8: finite networks against the neural covariance SDEs)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from .terminal import Display, console, parse_floats

__all__ = ["sde_command"]


def _fmt(x, spec=".4g"):
    return "–" if x is None else format(x, spec)


def _table(j: dict) -> Table:
    fig, d = j["figure"], j["data"]
    t = Table(title=f"Noci et al. Fig. {fig}: " + ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else
                                                           f"{k} = {v}" for k, v in j["setup"].items()
                                                           if not isinstance(v, list | dict)))
    if fig == 2:
        for col in ("architecture", "weights", "‖∂L/∂W‖ at the last layer", "first / last layer"):
            t.add_column(col, justify="left" if col in ("architecture", "weights") else "right")
        for arch, c in d["curves"].items():
            for w, label in (("w_v", "W_V"), ("w_q", "W_Q")):
                t.add_row(arch, label, _fmt(c[w]["geo_mean"][-1]), _fmt(j["checks"][f"{arch} {w} first/last"]))
        return t
    if fig in (1, 7):
        for col in ("", "q5 ± SE", "median ± SE", "q95 ± SE"):
            t.add_column(col, justify="left" if not col else "right")
        for key, q in d["quantiles"].items():
            t.add_row(key, *(f"{_fmt(q[k]['value'])} ± {_fmt(q[k]['se'], '.2g')}" for k in ("q5", "q50", "q95")))
        ks = d["ks"]
        t.add_row("KS(SDE, NN)", f"{ks['statistic']:.4f}", f"critical {ks['critical']:.4f}", f"p = {ks['pvalue']:.3g}")
        if "dt_check" in d:
            t.add_row("|Δq| at dt/2", *(f"{_fmt(v['diff'], '.3g')} (SE {_fmt(v['se_diff'], '.2g')})"
                                         for v in d["dt_check"].values()))
        for key, c in d["curves"].items():
            t.add_row(f"mean ρ at depth d: {key}", _fmt(c["mean_rho"][-1]), "", "")
    elif fig == 3:
        for col in ("gamma", "KS", "critical", "p95 |ρ| NN ± SE", "p95 |ρ| SDE ± SE", "mean ρ NN", "mean ρ SDE"):
            t.add_column(col, justify="right")
        for r in d["rows"]:
            p = r["p95_abs_rho"]
            t.add_row(f"{r['gamma']:.4g}", f"{r['ks']['statistic']:.4f}", f"{r['ks']['critical']:.4f}",
                      f"{p['network'][0]:.4f} ± {p['network'][1]:.2g}", f"{p['sde'][0]:.4f} ± {p['sde'][1]:.2g}",
                      f"{r['mean_rho']['network']:.4f}", f"{r['mean_rho']['sde']:.4f}")
    elif fig == 4:
        for col in ("variant", "mean ρ at d", "mean |V^{01}| at d", "median |V^{01}| at d", "exploded (>1e4)"):
            t.add_column(col, justify="left" if col == "variant" else "right")
        for name, c in d["curves"].items():
            t.add_row(name, _fmt(c["mean_rho"][-1]), _fmt(c["mean_abs_cov"][-1]), _fmt(c["median_abs_cov"][-1]),
                      _fmt(c["exploded_fraction"][-1], ".3f"))
    elif fig == 5:
        for col in ("gamma", "median t*", "10th pct t*", "stopped before 1"):
            t.add_column(col, justify="right")
        for r in d["rows"]:
            t.add_row(f"{r['gamma']:.3g}", f"{r['median']:.3f}", f"{r['p10']:.3f}", f"{r['stopped_fraction']:.2f}")
    else:
        t.add_column("gamma \\ tau0", justify="right")
        for tau in j["setup"]["tau0s"]:
            t.add_column(f"{tau:g}", justify="right")
        for g, row in zip(j["setup"]["gammas"], d["median"], strict=True):
            t.add_row(f"{g:.3g}", *(f"{v:.3f}" for v in row))
    return t


def sde_command(
    figure: int = typer.Option(1, "--figure", "-f", help="Which figure of Noci et al. (2023): 1 (shaped vs "
                               "unshaped attention, rho at T vs the Thm. 4.2 SDE), 2 (gradient norms of W_V and W_Q "
                               "per layer at initialisation: shaped vs Pre-LN vs Post-LN decoders on code), 3 "
                               "(shaped-ReLU ResNet vs Thm. 3.2 over gamma), 4 (interventions on shaped attention), "
                               "5 (stopping time vs gamma), 7 (covariance at T vs the SDE), 8 (median stopping time "
                               "over gamma x tau0)."),
    samples: int = typer.Option(None, help="Networks / SDE paths (default: the caption's, e.g. 4096 for Fig. 1); "
                                "for figure 2 the weight draws (default 4)."),
    width: int = typer.Option(None, help="Width n (default: the caption's)."),
    depth: int = typer.Option(None, help="Depth d, residual layers (default: the caption's); T = d/n."),
    gamma: str = typer.Option(None, help="Residual weight gamma (lambda^2 + gamma^2 = 1); a comma-separated list "
                              "for figures 3, 5, 8."),
    tau0: str = typer.Option(None, "--tau0", help="Temperature constant tau0 (tau = tau0 sqrt(n n_k)); a list for "
                             "figure 8."),
    dt: float = typer.Option(None, help="SDE step (default 0.01; the largest step <= dt dividing T is used); "
                             "figures 5 and 8 with --source sde only."),
    tokens: int = typer.Option(None, help="Tokens m (not stated in the paper: default 4, or 2 for figure 3); "
                               "for figure 2 the sequence length (default 128)."),
    source: str = typer.Option(None, help="Figures 5, 8: stopping times from the 'network' (default, as "
                              "the paper plots) or the 'sde'."),
    check_dt: bool = typer.Option(None, "--check-dt/--no-check-dt", help="Figures 1, 3, 7: rerun the SDE at dt/2 "
                                  "and compare its quantiles (default: on)."),
    seed: int = typer.Option(0, help="Seed of every draw."),
    json_path: Path = typer.Option(None, "--json", help="Write the result (curves, KS, quantiles, checks) as JSON."),
    plot: Path = typer.Option(None, help="Write the figure as PNG."),
):
    """Finite networks against the neural covariance SDEs of the shaped Transformer (Noci et al. 2023, Thm. 3.2,
    Thm. 4.2, Cor. 4.3): thousands of width-n, depth-d networks simulated in batch, V_l = X_l X_l^T / n recorded per
    layer, compared with Euler-Maruyama paths of the SDE at T = d/n (two-sample KS, quantiles), as in the paper's
    Figs. 1, 3, 4, 5, 7 and 8."""
    from ..core.jsonio import write_json_atomic
    from ..core.outputs import check_output_path
    from ..sde.experiments import figure_options, run_figure

    opts = figure_options(figure, samples, width, depth, parse_floats(gamma, "--gamma"), parse_floats(tau0, "--tau0"),
                          dt, seed, tokens, source, check_dt)
    if json_path is not None:
        check_output_path(json_path, "--json")
    if plot is not None:
        check_output_path(plot, "--plot", ".png")
    with Display() as display:
        stages: dict = {}

        def progress(text, done, total):  # the figure's stages, one task each
            if text not in stages:
                stages[text] = display.task(f"figure {figure}: {text}", None)

        result = run_figure(figure, progress=progress, **opts)
    j = result.to_json()
    written = []
    if json_path:
        written.append(f"JSON: {write_json_atomic(json_path, j)}")
    if plot:
        from ..sde.plots import plot_result

        written.append(f"figure: {plot_result(result, plot)}")
    console.print(_table(j))
    checks = {k: v for k, v in j["checks"].items() if isinstance(v, bool)}
    if checks:
        console.print("checks: " + ", ".join(f"{k} {'[green]yes[/green]' if v else '[red]no[/red]'}"
                                               for k, v in checks.items()))
    console.print(f"figure {figure} in {result.seconds:.1f} s")
    for line in written:
        console.print(line)
