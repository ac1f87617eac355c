"""The ``sigprop`` command line. Thin: every subcommand parses options and calls one library function."""

from __future__ import annotations

from pathlib import Path

import typer

from .terminal import console, progress_bar

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="sigprop: signal propagation in deep transformers — predict, measure and fix the moments of activations "
         "and gradients at initialization.",
)

#: Acceptance targets for component rules (percent): median and 99th-percentile error.
TARGET_P50, TARGET_P99 = 1.0, 5.0


@app.command()
def verify(
    components: list[str] = typer.Argument(None, help="Components to verify (default: all). "
                                           "See `sigprop verify --list`."),
    component: list[str] = typer.Option(None, "--component", "-c", help="A component to verify (repeatable)."),
    quick: bool = typer.Option(False, "--quick", help="Small sweep (48 configurations per component, fewer "
                               "samples): a smoke test in well under a minute."),
    json_path: Path = typer.Option(None, "--json", help="Write the machine-readable report here."),
    markdown: Path = typer.Option(None, "--markdown", help="Write the accuracy table as Markdown here."),
    plot: Path = typer.Option(None, "--plot", help="Write a PNG figure of the error percentiles here."),
    seed: int = typer.Option(0, help="Seed of the configuration design and the Monte Carlo samples."),
    approx: str = typer.Option(None, help="Score the same Monte Carlo draws against another approximation of the "
                               "rules, e.g. 'kedia' (the paper's printed forms; relu, gelu, layernorm, softmax, "
                               "attention, mha)."),
    configs: int = typer.Option(None, help="Override the number of configurations per component."),
    strict: bool = typer.Option(False, help=f"Exit with status 1 unless every p50 <= {TARGET_P50}% and "
                                f"p99 <= {TARGET_P99}%."),
    list_: bool = typer.Option(False, "--list", help="List the components and their sweep ranges, then exit."),
):
    """Check every component's moment rules against Monte Carlo on the real PyTorch module.

    For each component, configurations are drawn over the ranges of Kedia et al. Table 22 (corners included),
    Gaussian inputs with exactly the requested token correlation and Gaussian output gradients are pushed through
    the module, and measured mean, variance, token correlation, gradient variance and gradient correlation are
    compared with the rules. Reported: 50th/90th/99th percentile errors in percent (see the JSON's
    "normalisation"), with the Monte Carlo noise (one standard error) beside them.
    """
    from ..verify.registry import available, load_spec
    from ..verify.report import markdown_table, render_table
    from ..verify.run import resolve_components, run_verification

    if list_:
        for name in available():
            spec = load_spec(name)
            console.print(f"[bold]{name}[/bold] ({spec.title}): " + ", ".join(
                f"{p.name} ∈ [{p.lo:g}, {p.hi:g}]" for p in spec.params))
        raise typer.Exit()
    names = list(components or []) + list(component or [])
    try:
        names = resolve_components(names)
    except ValueError as err:
        console.print(f"[red]error:[/red] {err}")
        raise typer.Exit(2) from None
    with progress_bar() as bar:
        task = {}

        def on_start(name, n):
            task["id"] = bar.add_task(f"verify {name}", total=n)

        def on_progress(k):
            bar.advance(task["id"], k)

        try:
            report = run_verification(names, quick=quick, seed=seed, n_configs=configs, approx=approx,
                                      on_start=on_start, on_progress=on_progress)
        except ValueError as err:
            bar.stop()
            console.print(f"[red]error:[/red] {err}")
            raise typer.Exit(2) from None
    written = []
    if json_path:  # files first: a long sweep's results survive whatever happens to the terminal
        written.append(f"JSON report: {report.write_json(json_path)}")
    if markdown:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(markdown_table(report.to_json()) + "\n")
        written.append(f"Markdown table: {markdown}")
    if plot:
        from ..verify.plot import plot_report

        written.append(f"Figure: {plot_report(report.to_json(), plot)}")
    console.print(render_table(report, TARGET_P50, TARGET_P99))
    console.print(f"{sum(r.n_configs for r in report.results.values())} configurations in "
                  f"{report.seconds:.1f} s ({'quick' if quick else 'full'} sweep, seed {seed}).")
    for line in written:
        console.print(line)
    if strict and not report_meets(report, TARGET_P50, TARGET_P99):
        raise typer.Exit(1)


def report_meets(report, p50: float, p99: float) -> bool:
    return all(s["p50"] <= p50 and s["p99"] <= p99
               for summary in report.to_json()["components"].values() for s in summary.values())


@app.command()
def doctor():
    """Print the versions, threads and devices sigprop will use, and check that its dependencies import."""
    from ..report.environment import environment_report

    for key, value in environment_report().items():
        console.print(f"[bold]{key}[/bold]: {value}")


from .profiles import compare_command, demo_command, measure_command, predict_command  # noqa: E402

app.command("predict")(predict_command)
app.command("measure")(measure_command)
app.command("compare")(compare_command)
app.command("demo")(demo_command)

from .inits import inits_command  # noqa: E402

app.command("inits")(inits_command)

from .apjn import apjn_command  # noqa: E402

app.command("apjn")(apjn_command)

from .sde import sde_command  # noqa: E402

app.command("sde")(sde_command)


def main():  # console-script entry point
    app()


if __name__ == "__main__":
    main()
