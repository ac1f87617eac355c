"""``sigprop predict`` / ``measure`` / ``compare``: each parses its options into one
:class:`~sigprop.report.runs.Request`, calls one run (:mod:`sigprop.report.runs`) and prints its tables. Errors
reach the one handler of :func:`sigprop.cli.app.main`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from .options import (
    DEFAULT_HEADS,
    AttentionHeads,
    BatchSize,
    ConfigFile,
    CsvOut,
    Data,
    Device,
    FirstSeed,
    Fresh,
    HFModel,
    JsonOut,
    Overrides,
    PlotOut,
    Preset,
    RunDir,
    Seeds,
    Spread,
    Synthetic,
    TokenResolved,
)
from .terminal import Display, console, note

__all__ = ["predict_command", "measure_command", "compare_command", "profile_table", "summary_table",
           "print_diagnosis", "print_written"]


def _layers_to_show(n_layers: int, rows: int = 16) -> set[int]:
    step = max(1, n_layers // rows)
    return {-1, 0, n_layers - 1} | set(range(0, n_layers, step))


def profile_table(title: str, predicted=None, measured=None) -> Table:
    """Per shown layer, the theory's and / or the measurement's variances and correlations."""
    table = Table(title=title, title_justify="left")
    table.add_column("layer", justify="right")
    quantities = (("fwd_var", "σ²_x"), ("fwd_corr", "r_x"), ("grad_var", "σ²_g"), ("grad_corr", "r_g"))
    for _, sym in quantities:
        if predicted is not None:
            table.add_column(f"{sym} theory", justify="right")
        if measured is not None:
            table.add_column(f"{sym} measured", justify="right")
    spread = (("fwd_var_log_sd", "sd log σ²_x"), ("grad_var_log_sd", "sd log σ²_g/top"))
    shown_spread = spread if predicted is not None and predicted.has_spread else ()
    for _, sym in shown_spread:
        table.add_column(f"{sym} theory", justify="right")
    base = predicted or measured
    rows = sorted((r for r in base.rows if r.site in ("input", "layer")), key=lambda r: r.layer)
    show = _layers_to_show(len(rows) - 1)
    other = measured.lookup() if (measured is not None and predicted is not None) else None
    for r in rows:
        if r.layer not in show:
            continue
        cells = [str(r.layer)]
        for q, _ in quantities:
            if predicted is not None:
                cells.append(f"{getattr(r, q):.4g}")
            if measured is not None:
                m = other.get((r.layer, r.site)) if other is not None else r
                cells.append("–" if m is None else f"{getattr(m, q):.4g}")  # a comparison file holds no input row
        cells += [f"{getattr(r, q):.3g}" for q, _ in shown_spread]
        table.add_row(*cells)
    return table


def summary_table(comparison, title: str = "agreement per quantity (layer outputs)") -> Table:
    """Median / mean / p90 relative error, max abs error, R² and the share within 2 SE and within the Student
    95% interval of K seeds, per quantity; with a predicted spread, also the layers within its band of the seed
    mean."""
    table = Table(title=title, title_justify="left")
    band = comparison.meta.get("band")
    t95 = comparison.meta.get("t95")
    columns = ["quantity", "median rel", "mean rel", "p90 rel", "max abs", "R²", "R² noise ceiling", "within 2 SE"]
    if t95:
        columns.append(f"within {t95['threshold']:.3g} SE (95%, {t95['dof']} dof)")
    if band:
        columns.append(f"within predicted {100 * band['level']:g}% band ({band['seeds']} seeds)")
    for col in columns:
        table.add_column(col, justify="right" if col != "quantity" else "left")
    for q, s in comparison.summaries.items():
        if q == "fwd_mean":
            continue  # predicted 0: relative errors are meaningless; max abs is in the JSON
        r2 = "n/a (constant)" if s.r2 != s.r2 else f"{s.r2:.5f}" + (" (log)" if s.r2_log else "")
        within = "–" if s.within_2se != s.within_2se else f"{100 * s.within_2se:.0f}%"
        ceiling = "–" if s.r2_noise_ceiling != s.r2_noise_ceiling else f"{s.r2_noise_ceiling:.5f}"
        cells = [q, f"{100 * s.median_rel:.2f}%", f"{100 * s.mean_rel:.2f}%", f"{100 * s.p90_rel:.2f}%",
                 f"{s.max_abs:.3g}", r2, ceiling, within]
        if t95:
            cells.append("–" if s.within_t95 != s.within_t95 else f"{100 * s.within_t95:.0f}%")
        if band:
            cells.append("–" if not s.band_rows else
                         f"{round(s.within_band * s.band_rows)} of {s.band_rows} layers")
        table.add_row(*cells)
    return table


def print_diagnosis(lines: list[str], hint: str | None, title: str) -> None:
    """The diagnosis (:func:`sigprop.diagnose`): explode, vanish, collapse, or bounded."""
    console.print(f"[bold]{title}[/bold]")
    for line in lines:
        console.print(f"  {escape(line)}")
    if hint:
        console.print(f"  [cyan]hint:[/cyan] {escape(hint)}")


def print_written(written: list) -> None:
    for label, path in written:
        console.print(f"{label}: {path}")


def _print_rules(profile) -> None:
    """The states and attention rule the prediction used, and any caveat, from its meta."""
    for key, label in (("forward_state", "forward state"), ("backward_state", "backward state"),
                       ("attention_rule", "attention rule")):
        if profile.meta.get(key):
            console.print(f"{label}: {escape(profile.meta[key])}")
    if profile.meta.get("caveat"):
        note(profile.meta["caveat"])


def _print_seed_spread(measured) -> None:
    """A note for each quantity whose seed mean is heavy-tailed at some layer (:mod:`sigprop.measurement.spread`)."""
    from ..measurement.spread import heavy_tails

    for spread in heavy_tails(measured):
        note(spread.describe())


def _print_band_verdict(comparison) -> None:
    """With a predicted spread: per variance, whether the measured seed mean lies within the band the spread predicts
    for a mean of that many seeds, layer by layer."""
    band = comparison.meta.get("band")
    if not band:
        return
    for q, s in comparison.summaries.items():
        if not s.band_rows:
            continue
        inside = round(s.within_band * s.band_rows)
        verdict = "within the predicted spread" if inside == s.band_rows else "outside it at some layers"
        console.print(f"{q}: {inside} of {s.band_rows} layers' measured {band['seeds']}-seed means lie in the "
                      f"predicted {100 * band['level']:g}% band: {verdict}")
    for q, why in (band.get("not_judged") or {}).items():
        console.print(f"{q}: not judged against the band: {why}")
    note("the band is the spread of the layers' own weights: the embedding's and the loss's seed-to-seed spread "
         "are left out (sigprop.theory.spread.profile_bands), so it is narrower than the measurement's")


def predict_command(
    preset: Preset = None,
    config_file: ConfigFile = None,
    overrides: Overrides = None,
    data: str = typer.Option(None, help="Take the input token correlation (and the loss's labels) from a real "
                             "batch of this text file or folder ('python': the larger built-in corpus); default: "
                             "theory (Zipf tokens, App. A.1)."),
    real: bool = typer.Option(False, "--real", help="Use a real batch of the default corpus (the Python standard "
                              "library) for the input boundary."),
    batch_size: BatchSize = None,
    json_path: JsonOut = None,
    csv_path: CsvOut = None,
    plot: PlotOut = None,
    attention_heads: AttentionHeads = DEFAULT_HEADS,
    token_resolved: TokenResolved = None,
    hf: HFModel = None,
    run_dir: RunDir = None,
    fresh: Fresh = False,
    spread: Spread = False,
):
    """Predict every layer's forward and gradient moments of a freshly initialised model (no weights needed), or of
    a saved Hugging Face model from its weights' standard deviations (--hf).

    Walks the model's own module tree with the component rules (Kedia et al. Sec. 2.3, App. E): forward from the
    embedding's moments, backward from the loss's gradient at the head. The batch size (the preset's, else 8) sets
    the loss's gradient scale, as in `measure` and `compare`.
    """
    from ..report.runs import Request, run_predict

    request = Request(preset=preset, config_file=config_file, overrides=overrides, data=data, real=real,
                      batch_size=batch_size, attention_heads=attention_heads, token_resolved=token_resolved,
                      hf=hf, run=run_dir, fresh=fresh, json=json_path, csv=csv_path, plot=plot, spread=spread)
    with Display() as display:
        run = run_predict(request, display)
    for line in run.notes:
        note(line)
    profile = run.profile
    console.print(profile_table(f"predicted ({profile.meta.get('input_source')}; gradient: "
                                f"{profile.meta.get('grad_source')})", predicted=profile))
    _print_rules(profile)
    print_diagnosis(run.diagnosis.lines(), run.diagnosis.hint, "diagnosis (theory)")
    print_written(run.written)


def measure_command(
    preset: Preset = None,
    config_file: ConfigFile = None,
    overrides: Overrides = None,
    seeds: Seeds = None,
    batch_size: BatchSize = None,
    data: Data = None,
    synthetic: Synthetic = False,
    device: Device = None,
    first_seed: FirstSeed = 0,
    json_path: Path = typer.Option(None, "--json", help="Write the measured profile (JSON, with every seed's rows) "
                                   "here."),
    csv_path: CsvOut = None,
    plot: PlotOut = None,
    merge: list[Path] = typer.Option(None, "--merge", help="Measure nothing: merge these `sigprop measure --json` "
                                     "files of disjoint seeds of one model and batch (repeatable) into the "
                                     "measurement of all their seeds."),
    hf: Path = typer.Option(None, "--hf", help="Measure a Hugging Face model of any family: a local folder (its "
                            "safetensors weights, measured once), a config.json (each seed initialised by Hugging "
                            "Face's own code) or a model id in the local Hugging Face cache (nothing is downloaded). "
                            "Needs the extra `hf`; a family sigprop maps is measured on the batch of its mapped "
                            "config (sigprop.from_hf), any other on a batch of its head's objective."),
    run_dir: RunDir = None,
    fresh: Fresh = False,
):
    """Measure every layer's forward and gradient moments of real models on real text, with hooks.

    Each seed initialises a model, runs one forward and backward of the training objective (dropout on), and the
    hooks record mean, variance and token correlation of each site's activations and gradients on the fly.
    """
    from ..report.runs import Request, run_measure

    request = Request(preset=preset, config_file=config_file, overrides=overrides, seeds=seeds,
                      batch_size=batch_size, data=data, synthetic=synthetic, device=device, first_seed=first_seed,
                      merge=merge, hf=hf, run=run_dir, fresh=fresh, json=json_path, csv=csv_path, plot=plot)
    with Display() as display:
        run = run_measure(request, display)
    profile = run.profile
    console.print(profile_table(f"measured ({run.seeds} seeds, {profile.meta.get('tokens')} tokens)",
                                measured=profile))
    if profile.meta.get("theory"):
        note(profile.meta["theory"])
    _print_seed_spread(profile)
    print_diagnosis(run.diagnosis.lines(), run.diagnosis.hint, "diagnosis (measured)")
    print_written(run.written)


def compare_command(
    preset: Preset = None,
    config_file: ConfigFile = None,
    overrides: Overrides = None,
    seeds: Seeds = None,
    batch_size: BatchSize = None,
    data: Data = None,
    synthetic: Synthetic = False,
    grad_boundary: str = typer.Option("measured", help="Gradient moments at the last layer: 'measured' (taken "
                                      "from the measurement, the paper's practice) or 'theory' (derived from "
                                      "the loss)."),
    device: Device = None,
    json_path: Path = typer.Option(None, "--json", help="Write the comparison (JSON: per-layer theory and "
                                   "measurement, median/mean/p90 relative error and R² per quantity) here."),
    csv_path: CsvOut = None,
    plot: Path = typer.Option(None, help="Write a PNG: theory lines against measured points per layer."),
    list_presets: bool = typer.Option(False, "--list-presets", help="List the presets and exit."),
    attention_heads: AttentionHeads = DEFAULT_HEADS,
    token_resolved: TokenResolved = None,
    measured_path: Path = typer.Option(None, "--measured", help="Compare against this measurement instead of "
                                       "measuring: a `sigprop measure --json` or `sigprop compare --json` file "
                                       "(from other machines, or an earlier run). Its model and batch are reused "
                                       "and only the prediction runs."),
    hf: HFModel = None,
    run_dir: RunDir = None,
    fresh: Fresh = False,
    spread: Spread = False,
):
    """Predict and measure the same model and report how well the theory predicts every layer.

    Like Kedia et al. Figs. 1–4: per layer, forward variance, gradient variance and token correlation, theory
    against measurement averaged over seeds, with median/mean/p90 relative error and R² per quantity.
    """
    if list_presets:
        from ..model.presets import PRESETS

        for name, p in PRESETS.items():
            c = p.config()
            console.print(f"[bold]{name}[/bold]: {escape(p.description)} — {c.n_layers} layers, d={c.d_model}, "
                          f"{p.seeds} seeds × {p.batch_size}×{c.seq_len} tokens")
        return
    from ..report.runs import Request, run_compare

    request = Request(preset=preset, config_file=config_file, overrides=overrides, seeds=seeds,
                      batch_size=batch_size, data=data, synthetic=synthetic, device=device,
                      attention_heads=attention_heads, token_resolved=token_resolved, grad_boundary=grad_boundary,
                      measured=measured_path, hf=hf, run=run_dir, fresh=fresh, json=json_path, csv=csv_path,
                      plot=plot, spread=spread)
    with Display() as display:
        run = run_compare(request, display)
    for line in run.notes:
        note(line)
    console.print(profile_table(f"theory vs measurement ({run.seeds} seeds; gradient boundary: "
                                f"{run.predicted.meta.get('grad_source')})", run.predicted, run.measured))
    console.print(summary_table(run.comparison))
    for q, s in run.comparison.summaries.items():
        if s.not_finite:
            note(f"{q}: {s.not_finite} layer(s) left out of the agreement, not finite in the theory or the "
                 "measurement (undefined where a branch is scaled to 0, or an overflow: see the diagnosis)")
    _print_band_verdict(run.comparison)
    _print_rules(run.predicted)
    _print_seed_spread(run.measured)
    print_diagnosis(*run.comparison.diagnosis_lines(), "diagnosis (measured, theory beside it)")
    print_written(run.written)
