"""``sigprop doctor MODEL``: predict and measure a model, say whether its signal propagation is stable at its depth
and why, recommend a fix with the fixed model's profile beside the current one, and write an HTML report
(a thin wrapper over :func:`sigprop.analysis.doctor.doctor`)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from .options import JsonOut, Spread
from .terminal import Display, console

__all__ = ["doctor_command"]


def doctor_command(
    model: str = typer.Argument(..., help="A preset name, a sigprop config JSON, a Hugging Face model folder or "
                                "config.json (mapped to sigprop's config), or a training run's folder."),
    overrides: list[str] = typer.Option(None, "--set", help="Override one config field of a sigprop config or run, "
                                        "e.g. --set n_layers=96 (repeatable)."),
    seeds: int = typer.Option(2, "--seeds", help="Fresh models measured per configuration, >= 0 (0: theory only). A "
                              "model with weights of its own is measured once, as it is."),
    fresh: bool = typer.Option(False, "--fresh", help="Diagnose a freshly initialised model of MODEL's configuration "
                               "even where MODEL holds weights (a Hugging Face folder's safetensors, a run's "
                               "checkpoint), which are otherwise measured as they are and read by the theory."),
    json_path: JsonOut = None,
    html_path: Path = typer.Option(None, "--html", help="Write a self-contained HTML report here (a .html path, "
                                   "checked before any work; figures embedded)."),
    spread: Spread = False,
):
    """Diagnose a model at initialisation: forward growth, vanishing or exploding gradients with their per-layer
    law, rank collapse; recommend a fix (DeepScaleLM, Kedia et al. Sec. 3.5; dropout against rank collapse) and show
    the fixed model's predicted and measured profile beside the current one. The hint speaks the model's language:
    `sigprop.apply_init(model, "dslm")` for a Hugging Face model, `--set init=dslm` for a sigprop config or run."""
    from ..analysis.doctor import agreement_text
    from ..core.jsonio import write_json_atomic
    from ..core.outputs import check_output_path
    from ..report.doctor import interval_lines, resolve_model, write_doctor_html

    if seeds < 0:
        raise ValueError(f"--seeds must be >= 0 (got {seeds})")
    if json_path is not None:
        check_output_path(json_path, "--json", ".json")
    if html_path is not None:
        check_output_path(html_path, "--html", ".html")
    target = resolve_model(model, tuple(overrides or ()), fresh)
    config, name = target.config, target.name
    with Display() as display:
        report = target.diagnose(seeds, progress=display, spread=spread)
    shape = ("no theory" if config is None else
             f"{config.total_layers} layers, d = {config.d_model}, {config.norm_position}-LN, init {config.init}")
    console.print(f"[bold]{escape(name)}[/bold] ({shape}; measured: {escape(report.measured_what)}): "
                  f"{escape(report.verdict)}")
    if report.theory is not None:
        console.print(f"  [yellow]theory not available:[/yellow] {escape(report.theory)}")
    for line in report.approximations:
        console.print(f"  [yellow]theory approximate:[/yellow] {escape(line)}")
    for line in report.diagnosis.lines():
        console.print(f"  {line}")
    for check in report.checks:
        mark = "[red]flagged[/red] " if check.flagged else ""
        console.print(f"  {mark}{check.name}: {check.message}")
    rec = report.recommendation
    if report.no_fix is not None:
        console.print(f"[bold]no fix[/bold]: {escape(report.no_fix)}")
    if rec is not None:
        console.print("[bold]fix[/bold]: " + "; ".join(rec.reasons))
        console.print(f"  apply it: {rec.apply}")
        for sentence in rec.evidence:
            console.print(f"  trained: {escape(sentence)}")
        if report.fixed_diagnosis is not None:
            still = report.fixed_diagnosis.flagged or any(c.flagged for c in report.fixed_checks)
            console.print(f"  the fixed model: {'still flagged' if still else 'nothing flagged'}")
            for line in report.fixed_diagnosis.lines():
                console.print(f"    {line}")
            for check in report.fixed_checks:
                console.print(f"    {check.name}: {check.message}")
    for line in interval_lines(report):
        console.print(escape(line))
    for which, errors in report.agreement.items():
        console.print(f"theory vs measurement ({which}, median relative error; noise: the measurement's own "
                      f"relative SE): {agreement_text(errors, report.noise.get(which, {}))}")
    if json_path is not None:
        console.print(f"JSON: {write_json_atomic(json_path, report.to_dict())}")
    if html_path is not None:
        console.print(f"HTML: {write_doctor_html(report, html_path, name)}")
