"""``sigprop demo``: a thin wrapper over :func:`sigprop.report.demo.run_demo`."""

from __future__ import annotations

from pathlib import Path

import typer

from .profiles import print_diagnosis, summary_table
from .terminal import Display, console

__all__ = ["demo_command"]


def demo_command(
    out: Path = typer.Option(Path("sigprop-report"), help="Folder for the report (figures, JSON, demo.md)."),
    seeds: int = typer.Option(4, help="Independently initialised models per configuration (>= 1)."),
    train: bool = typer.Option(True, "--train/--no-train", help="Also train the unstable model and its DeepScaleLM "
                               "twin side by side (a minute or so)."),
):
    """Theory against measurement on the built-in default, then training, with a report.

    Predict and measure: a 48-layer Pre-LN encoder (d = 128) with Xavier initialisation and the same model with
    DeepScaleLM, masked LM on the Python standard library's own source (a BPE tokenizer is trained and cached on
    first use): per-layer forward variance, gradient variance and correlations, predicted and measured. Train: a
    16-layer decoder without normalisation, which the theory calls unstable (its forward variance explodes with
    depth), beside its DeepScaleLM twin, 200 steps each in two processes, with the losses and the tracked per-layer
    statistics against the theory. Its time on 2 CPU cores: docs/results/performance.md.
    """
    from ..report.demo import DEMO_CONFIGS, run_demo

    with Display() as display:
        results = run_demo(out, seeds=seeds, progress=display, train=train)
    for name in DEMO_CONFIGS:
        comparison = results[name]["comparison"]
        console.print(summary_table(comparison, f"{name}: agreement per quantity"))
        print_diagnosis(*comparison.diagnosis_lines(), f"{name}: diagnosis (measured, theory beside it)")
        console.print(f"[bold]{name}[/bold]: figure {results[name]['figure']}, JSON {results[name]['json']}")
    if "training" in results:
        for run in results["training"]["runs"]:
            final = "–" if run.final_val is None else f"{run.final_val:.3f}"
            console.print(f"[bold]training {run.model_name}[/bold]: {run.fate}, final validation loss {final} "
                          f"({run.wall:.0f} s)")
        console.print(f"training figure: {results['training']['figure']}")
    console.print(f"report: {results['summary']} (and the figures beside it)")
