"""``sigprop experiment NAME``: run one of the papers' training experiments (``--list`` shows them with their cost).
Parses, calls :func:`sigprop.experiments.run.run_experiment`, prints."""

from __future__ import annotations

import shlex
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from .options import Overrides
from .terminal import console

__all__ = ["experiment_command"]


def _say(text: str) -> None:
    import time

    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


def _list() -> None:
    from rich.table import Table

    from ..experiments.catalog import EXPERIMENTS
    from ..experiments.run import estimate

    table = Table(title="experiments (cost: runs, tokens, and roughly: single-thread CPU core-hours, minutes of one "
                        "H200 shared by ten runs)",
                  title_justify="left")
    for col in ("experiment", "question", "cpu", "gpu", "paper"):
        table.add_column(col)
    for name, e in EXPERIMENTS.items():
        cells = []
        for scale in ("cpu", "gpu", "paper"):
            if scale not in e.scales:
                cells.append("–")
                continue
            est = estimate(name, scale)
            if est.get("evaluates"):
                cells.append(f"evaluates the {est['evaluates']} runs (trains them if missing)")
                continue
            hours = (f", ~{est['cpu_core_hours']:.2g} core-h" if scale == "cpu" else
                     f", ~{est['h200_minutes']:.0f} H200-min" if scale == "gpu" else "")
            cells.append(f"{est['runs']} runs, {est['tokens']:.2g} tokens{hours}")
        table.add_row(name, e.question, *cells)
    console.print(table)


def _parse_rungs(text: str | None) -> tuple[int, ...]:
    """``--rungs 64,96,128`` as widths; ``ValueError`` naming the option otherwise."""
    if text is None:
        return ()
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() for p in parts):
        raise ValueError(f"--rungs must be widths d separated by commas, such as 64,96,128 (got {text!r})")
    return tuple(int(p) for p in parts)


def experiment_command(
    name: Annotated[str, typer.Argument(help="The experiment (see --list).")] = None,
    scale: Annotated[str, typer.Option(help="cpu (this machine), gpu (2× the widths, minutes on a GPU), "
                                       "paper (documented, not run) or smoke (a tiny check, where an experiment "
                                       "has one).")] = "cpu",
    seeds: Annotated[int, typer.Option(help="Seeds per model at its best rate, >= 1 (default: the scale's).")] = None,
    out: Annotated[Path, typer.Option(help="The experiment's folder (default experiments/NAME-SCALE); an "
                                      "interrupted experiment continues where it stopped.")] = None,
    workers: Annotated[int, typer.Option(help="Runs at a time (default: one single-thread run per CPU core, or "
                                         "one per GPU; on GPUs up to one per CPU core: small models "
                                         "share a GPU well).")] = None,
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    overrides: Overrides = None,
    train_overrides: Annotated[list[str], typer.Option("--train-set", help="Override a TrainConfig field of every "
                                                       "run, e.g. --train-set data=~/corpus (refused for a field "
                                                       "that some model sets for itself).")] = None,
    runs_dir: Annotated[list[Path], typer.Option(help="For an experiment that evaluates another's trained models "
                                                 "(fp8): that experiment's folder (default experiments/SOURCE-SCALE)."
                                                 " For one that trains: other experiments' folders or kept records "
                                                 "(docs/results/experiments/NAME/runs; repeatable), whose finished "
                                                 "runs of "
                                                 "identical configs are copied in instead of trained again.")] = None,
    models: Annotated[list[str], typer.Option("--model", help="Run only the models whose names match (shell-style "
                                              "pattern, e.g. '*dslm pre-LN'; repeatable): their runs are the "
                                              "same runs as in the whole experiment.")] = None,
    table_only: Annotated[bool, typer.Option("--table-only", help="Train nothing: write the table, figure and "
                                             "evaluation of the runs finished in --out so far (also while another "
                                             "invocation trains there).")] = False,
    rungs: Annotated[str, typer.Option(help="shape-ladder: the rungs (widths d) to run, comma-separated, e.g. "
                                       "64,96,128 (with --model: those of their models that match).")] = None,
    list_experiments: Annotated[bool, typer.Option("--list", help="List the experiments and their cost.")] = False,
) -> None:
    """Reproduce a training claim of the papers: every model at every learning rate of its grid, the best rate's
    other seeds, each run's fate (trained, stalled, diverged), a table and a figure."""
    if list_experiments:
        _list()
        return
    if name is None:
        raise ValueError("name an experiment (sigprop experiment --list)")
    from ..experiments.run import run_experiment

    result = run_experiment(name, scale, seeds, out, workers, device, overrides or (), train_overrides or (),
                            say=_say, command=shlex.join(["sigprop", *sys.argv[1:]]), runs_dir=runs_dir,
                            models=tuple(models or ()), train=not table_only, rungs=_parse_rungs(rungs))
    for path in result.files:
        console.print(f"{path.suffix[1:]}: {path}", highlight=False)
    if result.stopped:  # 130 after Ctrl-C ("interrupted"), 143 after SIGTERM, as every command exits
        raise typer.Exit(130 if result.stopped_by == signal.SIGINT else 143)
