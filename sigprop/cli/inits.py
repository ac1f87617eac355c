"""``sigprop inits``: a thin wrapper over :func:`sigprop.report.runs.run_inits` (the init sweep of
:mod:`sigprop.analysis.init_sweep`)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from .options import AttentionHeads, BatchSize, ConfigFile, Overrides, Preset, TokenResolved
from .profiles import print_written
from .terminal import Display, console, parse_ints

__all__ = ["inits_command"]


def _cell(row, quantity: str, stack: str) -> str:
    f = row.finding(quantity, stack)
    if f is None:
        return "–"
    if quantity == "fwd_corr":
        identity = row.finding("stream", stack) is not None
        return f"{f.change:.4f}" + (" collapsed" if f.flagged else "") + (" (identity: β ≈ 0)" if identity else "")
    return f"{f.verdict} ×{f.change:.3g}"


def inits_command(
    preset: Preset = None,
    config_file: ConfigFile = None,
    overrides: Overrides = None,
    inits: str = typer.Option(None, help="Comma-separated init schemes to compare (default: xavier, bert, dsinit, "
                              "layerscale, skipinit, deepnorm, dslm_simple, dslm)."),
    depths: str = typer.Option(None, help="Comma-separated depths N (default: the config's n_layers); with three or "
                               "more, each scheme's order of growth in N is fitted, as in Kedia et al. Table 3."),
    attention_heads: AttentionHeads = 32,
    data: str = typer.Option(None, help="Take the input (and the loss's labels) from a real batch: a text file or "
                             "folder ('python': the larger built-in corpus), or for a patch model a folder of images "
                             "or a .npy array; default: theory (Zipf tokens, App. A.1), and for a patch model "
                             "scikit-learn's digits."),
    real: bool = typer.Option(False, "--real", help="Use a real batch of the default corpus (the Python standard "
                              "library) for the input boundary."),
    batch_size: BatchSize = None,
    token_resolved: TokenResolved = None,
    json_path: Path = typer.Option(None, "--json", help="Write every scheme's diagnosis per depth (JSON) here."),
    plot: Path = typer.Option(None, help="Write a PNG of each scheme's change with depth (needs two depths)."),
):
    """Compare init schemes on one configuration, from theory alone: does each keep the forward and gradient
    variance bounded with depth, and do the tokens collapse?

    Every scheme and depth is predicted (no weights; Zipf tokens in, or a batch with --data / --real, and always
    images for a patch model; the loss's gradient at the top) and diagnosed as `sigprop predict` does. With
    --depths 12,48,192,768 the order of each change in N is fitted, reproducing Kedia et al. Table 3 from the full
    theory. The sampled attention rule draws 32 heads per layer here (its standard error against the number of
    heads: docs/results/performance.md; --attention-heads for more).
    """
    from ..report.runs import Request, run_inits

    request = Request(preset=preset, config_file=config_file, overrides=overrides, data=data, real=real,
                      batch_size=batch_size, attention_heads=attention_heads, token_resolved=token_resolved,
                      json=json_path, plot=plot)
    names = [s.strip() for s in inits.split(",") if s.strip()] if inits is not None else None
    if names is not None and not names:
        raise ValueError("--inits must name at least one scheme")
    with Display() as display:
        run = run_inits(request, names, parse_ints(depths, "--depths"), display)
    config = run.config
    table = Table(title=f"init schemes ({config.norm_position}-LN {config.arch}, d = {config.d_model}; theory)",
                  title_justify="left")
    for col in ("init", "N", "forward variance, first → last", "gradient variance, last → first",
                "last-layer token corr.", "seconds"):
        table.add_column(col, justify="left" if col == "init" else "right")
    for row in run.rows:
        if row.error:
            kind, _, why = row.error.partition(": ")
            table.add_row(row.init, str(row.n_layers), f"[red]{kind}[/red]: {escape(why)}", "", "", "")
            continue
        for stack in row.stacks():
            table.add_row(row.init + (f" ({stack})" if stack else ""), str(row.n_layers),
                          _cell(row, "fwd_var", stack), _cell(row, "grad_var", stack), _cell(row, "fwd_corr", stack),
                          f"{row.seconds:.1f}")
    console.print(table)
    if run.orders:
        by_init: dict[str, dict[str, str]] = {}
        for order in run.orders:
            by_init.setdefault(order.init, {})[order.quantity] = order.describe()
        growth = Table(title=f"effective order of growth in N over N = "
                             f"{', '.join(map(str, sorted(set(run.depths))))} (Kedia et al. Table 3)",
                       title_justify="left")
        for col in ("init", "forward", "backward"):
            growth.add_column(col)
        for init, cells in by_init.items():
            growth.add_row(init, cells.get("fwd_var", "–"), cells.get("grad_var", "–"))
        console.print(growth)
    print_written(run.written)
