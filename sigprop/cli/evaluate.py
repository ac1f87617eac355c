"""``sigprop eval``: a trained run's validation loss in float32 and with FP8 direct casting (Kedia et al. Table 12);
a thin wrapper over :func:`sigprop.train.fp8.evaluate_run`."""

from __future__ import annotations

from pathlib import Path

import typer

from .options import JsonOut
from .terminal import console, note

__all__ = ["eval_command"]


def _fmt(value, spec: str = ".4f") -> str:
    return "—" if value is None else format(value, spec)


def eval_command(
    run_dir: Path = typer.Argument(..., help="A run directory written by `sigprop train --out`."),
    fp8: str | None = typer.Option(None, "--fp8", help="FP8 format to cast to directly, without scaling: e4m3 "
                                   "(max 448) or e5m2 (max 57344). Default: float32 only."),
    device: str = typer.Option("cpu", "--device", help="Torch device to evaluate on, e.g. cpu, cuda or cuda:1."),
    batches: int | None = typer.Option(None, "--batches", help="Validation batches, >= 1 (default: the run's "
                                       "eval_batches, so the float32 loss is the run's logged one)."),
    json_path: JsonOut = None,
):
    """A trained run's validation loss at its newest checkpoint, in float32 and with FP8 direct casting.

    Every linear layer's (and attention projection's) weight and input, and every embedding table, is rounded to
    FP8 with no scaling factor, values beyond the format's range saturating (Kedia et al. Table 12: a model whose
    activations keep unit variance needs no scaling). Reported: the losses, their difference, and the fractions of
    activation values that overflowed (saturated) or underflowed to 0. On hardware without FP8 matmuls this
    simulates the rounding only.
    """
    from ..core.jsonio import write_json_atomic
    from ..core.outputs import check_output_path
    from ..train.fp8 import check_fp8_format, evaluate_run

    check_fp8_format(fp8)
    if json_path is not None:
        check_output_path(json_path, "--json", ".json")
    result = evaluate_run(run_dir, fp8, device=device, batches=batches)

    from rich.table import Table

    fp32 = result["fp32"]
    extra = "val_acc" if "val_acc" in fp32 else "val_ppl"
    console.print(f"{result['run_dir']} at step {result['step']} ({result['checkpoint']}): {result['batches']} "
                  f"validation batches of {result['batch_size']} on {result['device']}")
    table = Table()
    table.add_column("")
    table.add_column("val loss", justify="right")
    table.add_column("accuracy" if extra == "val_acc" else "perplexity", justify="right")
    table.add_row("loss fp32", _fmt(fp32["val_loss"]), _fmt(fp32[extra], ".4f" if extra == "val_acc" else ".2f"))
    if fp8 is not None:
        low = result[f"fp8_{fp8}"]
        table.add_row(f"loss fp8 {fp8}", _fmt(low["val_loss"]),
                      _fmt(low[extra], ".4f" if extra == "val_acc" else ".2f"))
        table.add_row("delta (fp8 − fp32)", _fmt(result["delta"], "+.4f"), "")
    console.print(table)
    if fp8 is not None:
        console.print(f"FP8 {fp8} direct cast (no scaling, max {result['fp8_max']:g}):")
        console.print(f"  activations: {result['activation_overflow_fraction']:.3g} of values saturated, "
                      f"{result['underflow_fraction']:.3g} of nonzero values flushed to 0 (largest |x| "
                      f"{_fmt(result['activation_max_abs'], '.3g')})")
        console.print(f"  weights:     {result['weight_overflow_fraction']:.3g} of values saturated, "
                      f"{result['weight_underflow_fraction']:.3g} of nonzero values flushed to 0 (largest |w| "
                      f"{_fmt(result['weight_max_abs'], '.3g')})")
    else:
        note("float32 only; add --fp8 e4m3 or --fp8 e5m2 for the FP8 direct-cast loss")
    if json_path is not None:
        console.print(f"JSON: {write_json_atomic(json_path, result)}")
