"""``sigprop verify``: a thin wrapper over :func:`sigprop.verify.run_verification`."""

from __future__ import annotations

from pathlib import Path

import typer

from .options import JsonOut, PlotOut
from .terminal import Display, console

__all__ = ["verify_command"]


def verify_command(
    components: list[str] = typer.Argument(None, help="Components to verify (default: all but glu and rope_gqa, "
                                           "whose sweeps take ~8 and ~75 min: name them). See `sigprop verify "
                                           "--list`."),
    component: list[str] = typer.Option(None, "--component", "-c", help="A component to verify (repeatable)."),
    quick: bool = typer.Option(False, "--quick", help="Small sweep (48 configurations per component, fewer "
                               "samples): a smoke test in well under a minute."),
    json_path: JsonOut = None,
    markdown: Path = typer.Option(None, "--markdown", help="Write the accuracy table as Markdown here."),
    plot: PlotOut = None,
    seed: int = typer.Option(0, help="Seed of the configuration design and the Monte Carlo samples (>= 0)."),
    approx: str = typer.Option(None, help="Score the same Monte Carlo draws against another approximation of the "
                               "rules, e.g. 'kedia' (the paper's printed forms; relu, gelu, layernorm, softmax, "
                               "attention, mha)."),
    configs: int = typer.Option(None, help="Configurations per component (>= 1; default: the component's sweep)."),
    strict: bool = typer.Option(False, help="Exit with status 1 unless every p50 <= 1% and p99 <= 5%."),
    list_: bool = typer.Option(False, "--list", help="List the components and their sweep ranges, then exit."),
):
    """Check every component's moment rules against Monte Carlo on the real PyTorch module.

    For each component, configurations are drawn over the ranges of Kedia et al. Table 22 (corners included),
    Gaussian inputs with exactly the requested token correlation and Gaussian output gradients are pushed through
    the module, and measured mean, variance, token correlation, gradient variance and gradient correlation are
    compared with the rules. Reported: 50th/90th/99th percentile errors in percent (see the JSON's
    "normalisation"), with the Monte Carlo noise (one standard error) beside them.
    """
    from ..core.jsonio import write_text_atomic
    from ..core.outputs import check_output_path
    from ..verify import run_verification
    from ..verify.registry import available, load_spec
    from ..verify.report import TARGET_P50, TARGET_P99, markdown_table, meets_targets, render_table

    if list_:
        for name in available():
            spec = load_spec(name)
            console.print(f"[bold]{name}[/bold] ({spec.title}): " + ", ".join(
                f"{p.name} ∈ [{p.lo:g}, {p.hi:g}]" for p in spec.params))
        return
    outputs = {"--json": (json_path, None), "--markdown": (markdown, None), "--plot": (plot, ".png")}
    for flag, (path, suffix) in outputs.items():
        if path is not None:
            check_output_path(path, flag, suffix)
    with Display() as display:
        report = run_verification(list(components or []) + list(component or []), quick=quick, seed=seed,
                                  n_configs=configs, approx=approx, progress=display)
    written = []
    if json_path:  # files first: a long sweep's results survive whatever happens to the terminal
        written.append(f"JSON report: {report.write_json(json_path)}")
    if markdown:
        written.append(f"Markdown table: {write_text_atomic(markdown, markdown_table(report.to_json()) + chr(10))}")
    if plot:
        from ..verify.plot import plot_report

        written.append(f"Figure: {plot_report(report.to_json(), plot)}")
    console.print(render_table(report, TARGET_P50, TARGET_P99))
    console.print(f"{sum(r.n_configs for r in report.results.values())} configurations in "
                  f"{report.seconds:.1f} s ({'quick' if quick else 'full'} sweep, seed {seed}).")
    for line in written:
        console.print(line)
    if strict and not meets_targets(report.to_json()):
        raise typer.Exit(1)
