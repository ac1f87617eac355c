"""``sigprop predict`` / ``measure`` / ``compare``: thin wrappers over :func:`sigprop.predict`,
:func:`sigprop.experiment.measure_seeds` and :func:`sigprop.experiment.compare_config`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ..analysis.diagnosis import diagnose
from ..components.attention_sampled import DEFAULT_HEADS
from .terminal import console, progress_bar

__all__ = ["predict_command", "measure_command", "compare_command", "demo_command", "resolve_config"]

# Options shared by the commands, declared once.
Preset = Annotated[str, typer.Option(help="Start from a named preset (see `sigprop compare --list-presets`).")]
ConfigFile = Annotated[Path, typer.Option("--config", help="A JSON file of TransformerConfig fields (applied over "
                                          "the preset).")]
Overrides = Annotated[list[str], typer.Option("--set", help="Override one config field, e.g. --set n_layers=48 "
                                              "--set norm_position=post (repeatable).")]
Seeds = Annotated[int, typer.Option(help="Independently initialised models to average (default: the preset's, "
                                    "else 4).")]
BatchSize = Annotated[int, typer.Option(help="Sequences per batch (default: the preset's, else 8).")]
Data = Annotated[Path, typer.Option(help="Text file or folder to read (default: the Python standard library); for "
                                   "a patch (ViT) model a folder of images (subfolders as classes) or a .npy array "
                                   "(default: scikit-learn's bundled digits).")]
Synthetic = Annotated[bool, typer.Option(help="Synthetic inputs instead of real data: i.i.d. Zipf(1) tokens, or for "
                                         "a patch model i.i.d. uniform pixels and random classes.")]
FirstSeed = Annotated[int, typer.Option(help="The first seed: models FIRST … FIRST + seeds − 1 are measured (disjoint "
                                        "slices on several machines merge exactly with `sigprop measure --merge`).")]
Device = Annotated[str, typer.Option(help="Torch device for the models, e.g. cuda or cuda:1 (default: cpu); a "
                                     "comma-separated list (cuda:0,cuda:1) measures the seeds on all of them in "
                                     "parallel, one process each, with the same result.")]
AttentionHeads = Annotated[int, typer.Option(
    help="Heads drawn per layer by the sampled attention rule (used for large attention scores and causal masks; "
         "its standard error falls like 1/sqrt(heads); ~0.45 s per layer at 128 heads, d = 256, L = 128).")]

TokenResolved = Annotated[bool, typer.Option(
    "--token-resolved/--exchangeable",
    help="Moments from each sequence's token Gram matrix (repeated tokens, [MASK], the labelled positions and a "
         "decoder's positions kept apart). Default with a batch of token ids: the forward sweep, and a decoder's "
         "backward sweep. --token-resolved: an encoder's backward sweep too, from its labelled positions. "
         "--exchangeable: one correlation for every token pair, as the paper.")]


def resolve_config(preset: str | None, config_file: Path | None, overrides: list[str] | None):
    """Preset, then the JSON file, then the ``--set`` overrides; returns (config, preset object or None)."""
    from ..model.config import TransformerConfig, apply_overrides, config_from_dict
    from ..model.presets import PRESETS

    chosen = None
    fields = {}
    if preset is not None:
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
        chosen = PRESETS[preset]
        fields = chosen.config().to_dict()
    if config_file is not None:
        try:
            data = json.loads(Path(config_file).read_text())
        except FileNotFoundError:
            raise ValueError(f"config file not found: {config_file}") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"{config_file} is not valid JSON: {err}") from None
        if isinstance(data, dict) and isinstance(data.get("config"), dict):
            data = data["config"]  # a profile or comparison JSON: reuse its config
        if not isinstance(data, dict):
            raise ValueError(f"{config_file} must hold a JSON object of TransformerConfig fields")
        fields = {**fields, **data}
    config = config_from_dict(fields) if fields else TransformerConfig()
    return apply_overrides(config, overrides or []), chosen


def _fail(err: Exception):
    console.print(f"[red]error:[/red] {err}")
    raise typer.Exit(2) from None


def _layers_to_show(n_layers: int, rows: int = 16) -> set[int]:
    step = max(1, n_layers // rows)
    return {-1, 0, n_layers - 1} | set(range(0, n_layers, step))


def _profile_table(title: str, predicted=None, measured=None) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("layer", justify="right")
    quantities = (("fwd_var", "σ²_x"), ("fwd_corr", "r_x"), ("grad_var", "σ²_g"), ("grad_corr", "r_g"))
    for _, sym in quantities:
        if predicted is not None:
            table.add_column(f"{sym} theory", justify="right")
        if measured is not None:
            table.add_column(f"{sym} measured", justify="right")
    base = predicted or measured
    rows = [r for r in base.rows if r.site in ("input", "layer")]
    rows.sort(key=lambda r: r.layer)
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
        table.add_row(*cells)
    return table


def _summary_table(comparison, title: str = "agreement per quantity (layer outputs)") -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("quantity", "median rel", "mean rel", "p90 rel", "max abs", "R²", "R² noise ceiling",
                "within 2 SE"):
        table.add_column(col, justify="right" if col != "quantity" else "left")
    for q, s in comparison.summaries.items():
        if q == "fwd_mean":
            continue  # predicted 0: relative errors are meaningless; max abs is in the JSON
        r2 = "n/a (constant)" if s.r2 != s.r2 else f"{s.r2:.5f}" + (" (log)" if s.r2_log else "")
        within = "–" if s.within_2se != s.within_2se else f"{100 * s.within_2se:.0f}%"
        ceiling = "–" if s.r2_noise_ceiling != s.r2_noise_ceiling else f"{s.r2_noise_ceiling:.5f}"
        table.add_row(q, f"{100 * s.median_rel:.2f}%", f"{100 * s.mean_rel:.2f}%", f"{100 * s.p90_rel:.2f}%",
                      f"{s.max_abs:.3g}", r2, ceiling, within)
    return table


def _batch(config, batch_size, data, synthetic, seed):
    """(config, batch) of :func:`sigprop.experiment.config_batch`, saying so when a DSLM patch model's input
    correlation was taken from the batch."""
    from ..analysis.experiment import config_batch

    with console.status("building the batch (a corpus is tokenised once, then cached) ..."):
        filled, batch = config_batch(config, batch_size=batch_size, data=data, seed=seed, synthetic=synthetic)
    if filled.input_corr != config.input_corr:
        console.print(f"input_corr = {filled.input_corr:.4f}: the token correlation of this batch's images after the "
                      "patch embedding (DSLM's schedule starts from it, App. H)")
    return filled, batch


def _measured_setup(preset, config_file, overrides, seeds, batch_size, data, synthetic):
    """(config, seeds, batch) for measure / compare: the preset's seeds and batch size unless given."""
    config, chosen = resolve_config(preset, config_file, overrides)
    seeds = seeds or (chosen.seeds if chosen else 4)
    config, batch = _batch(config, batch_size or (chosen.batch_size if chosen else 8), data, synthetic, 0)
    return config, seeds, batch


def _batch_source(data, synthetic) -> str:
    """What a measurement's batch was read from, as its meta records it and ``--measured`` reads it back: "default"
    (the standard library's source, or the digits for a patch model), "synthetic", or the ``--data`` path."""
    return "synthetic" if synthetic else (str(data) if data is not None else "default")


def _merged(paths, preset, config_file, overrides, seeds, batch_size, data, synthetic, device, first_seed):
    """(merged profile, number of seeds) for ``measure --merge``: :func:`sigprop.seed_merge.merge_measurements` of
    the files, which must be measurements (``ValueError`` naming a file that is not, or an option that would
    measure)."""
    from ..analysis.comparison import read_measured
    from ..measurement.merge import merge_measurements

    _refuse("--merge measures nothing", preset=preset, config=config_file, set=overrides, seeds=seeds,
            batch_size=batch_size, data=data, synthetic=synthetic, device=device, first_seed=first_seed)
    profile = merge_measurements([read_measured(path) for path in paths])
    return profile, len(profile.meta["seeds"])


def _refuse(why: str, **options) -> None:
    """``ValueError`` naming the command-line flags among ``options`` (keyword = flag without its dashes) that
    were given, if any: ``why`` they do not apply."""
    given = ["--" + name.replace("_", "-") for name, value in options.items() if value]
    if given:
        raise ValueError(f"{why}: leave out {', '.join(given)}")


def _stored_setup(path, preset, config_file, overrides, seeds, batch_size, data, synthetic, device):
    """(config, measured profile, batch) for ``compare --measured PATH``: the file's configuration, and its batch
    rebuilt (same size and source unless ``--batch-size`` / ``--data`` / ``--synthetic`` say otherwise)."""
    from ..analysis.comparison import read_measured
    from ..model.config import config_from_dict

    _refuse("--measured takes the model and its seeds from the file", preset=preset, config=config_file,
            set=overrides, seeds=seeds, device=device)
    measured = read_measured(path)
    config = config_from_dict(measured.config)
    if batch_size is None:
        batch_size = measured.meta.get("sequences") or int(measured.meta.get("tokens", 0)) // config.seq_len or None
    if batch_size is None:
        raise ValueError(f"{path} does not say how many sequences were measured: pass --batch-size")
    source = measured.meta.get("batch_source", "default")
    if data is None and not synthetic:  # "stdlib": the default corpus, as files written before said
        builtin = source in ("default", "stdlib", "synthetic")
        synthetic, data = source == "synthetic", (None if builtin else Path(source))
    config, batch = _batch(config, int(batch_size), data, synthetic, 0)
    return config, measured, batch


def _print_written(*labelled):
    for label, path in labelled:
        if path:
            console.print(f"{label}: {path}")


def predict_command(
    preset: Preset = None,
    config_file: ConfigFile = None,
    overrides: Overrides = None,
    data: Path = typer.Option(None, help="Take the input token correlation (and the loss's labels) from a real "
                              "batch of this text file or folder; default: theory (Zipf tokens, App. A.1)."),
    real: bool = typer.Option(False, "--real", help="Use a real batch of the default corpus (the Python standard "
                              "library) for the input boundary."),
    batch_size: int = typer.Option(8, help="Sequences per batch (the loss's gradient scale depends on it)."),
    json_path: Path = typer.Option(None, "--json", help="Write the predicted profile (JSON) here."),
    plot: Path = typer.Option(None, help="Write a PNG of the predicted per-layer moments here."),
    attention_heads: AttentionHeads = DEFAULT_HEADS,
    token_resolved: TokenResolved = None,
):
    """Predict every layer's forward and gradient moments of a freshly initialised model (no weights needed).

    Walks the model's own module tree with the component rules (Kedia et al. Sec. 2.3, App. E): forward from the
    embedding's moments, backward from the loss's gradient at the head.
    """
    from ..analysis.experiment import predict_for_batch
    from ..theory.predict import prediction_steps

    try:
        config, _ = resolve_config(preset, config_file, overrides)
        batch = None
        if data is not None or real or config.input == "patches":  # a patch model's input moments need images
            config, batch = _batch(config, batch_size, data, False, 0)
        with progress_bar() as bar:
            task = bar.add_task(f"predict {config.total_layers} layers (forward, backward)",
                                total=prediction_steps(config, batch is not None, token_resolved,
                                                       labels_given=batch is not None))
            profile = predict_for_batch(config, batch, batch_size=batch_size, attention_heads=attention_heads,
                                        progress=lambda k: bar.advance(task, k), token_resolved=token_resolved)
    except (ValueError, NotImplementedError) as err:
        _fail(err)
    diagnosis = _diagnosed(profile)
    if json_path:
        profile.write_json(json_path)
    if plot:
        from ..report.profiles import plot_profiles

        plot_profiles(plot, predicted=profile, title=preset or "prediction")
    console.print(_profile_table(f"predicted ({profile.meta.get('input_source')}; gradient: "
                                 f"{profile.meta.get('grad_source')})", predicted=profile))
    _print_rules(profile)
    _print_diagnosis(diagnosis.lines(), diagnosis.hint, "diagnosis (theory)")
    _print_written(("profile JSON", json_path), ("figure", plot))


def _print_rules(profile) -> None:
    """The attention rule each layer used and any caveat of the prediction, from its meta."""
    if profile.meta.get("forward_state"):
        console.print(f"forward state: {profile.meta['forward_state']}")
    if profile.meta.get("backward_state"):
        console.print(f"backward state: {profile.meta['backward_state']}")
    if profile.meta.get("attention_rule"):
        console.print(f"attention rule: {profile.meta['attention_rule']}")
    if profile.meta.get("caveat"):
        console.print(f"[yellow]note:[/yellow] {profile.meta['caveat']}")


def _diagnosed(profile):
    """:func:`sigprop.diagnosis.diagnose` of ``profile``, also recorded in its meta (and so in its JSON)."""
    diagnosis = diagnose(profile)
    profile.meta["diagnosis"] = diagnosis.to_dict()
    return diagnosis


def _print_diagnosis(lines: list[str], hint: str | None, title: str) -> None:
    """The diagnosis (:func:`sigprop.diagnosis.diagnose`): explode, vanish, collapse, or bounded."""
    console.print(f"[bold]{title}[/bold]")
    for line in lines:
        console.print(f"  {escape(line)}")
    if hint:
        console.print(f"  [cyan]hint:[/cyan] {escape(hint)}")


def _print_seed_spread(measured) -> None:
    """A note for each quantity whose seed mean is heavy-tailed at some layer (:mod:`sigprop.seed_spread`)."""
    from ..measurement.spread import heavy_tails

    for note in heavy_tails(measured):
        console.print(f"[yellow]note:[/yellow] {note.describe()}")


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
    plot: Path = typer.Option(None, help="Write a PNG of the measured per-layer moments here."),
    merge: list[Path] = typer.Option(None, "--merge", help="Measure nothing: merge these `sigprop measure --json` "
                                     "files of disjoint seeds of one model and batch (repeatable) into the "
                                     "measurement of all their seeds."),
):
    """Measure every layer's forward and gradient moments of real models on real text, with hooks.

    Each seed initialises a model, runs one forward and backward of the training objective (dropout on), and the
    hooks record mean, variance and token correlation of each site's activations and gradients on the fly.
    """
    from ..measurement.seeds import measure_seeds

    try:
        if merge:
            profile, seeds = _merged(merge, preset, config_file, overrides, seeds, batch_size, data, synthetic,
                                     device, first_seed)
        else:
            config, seeds, batch = _measured_setup(preset, config_file, overrides, seeds, batch_size, data,
                                                   synthetic)
            with progress_bar() as bar:
                task = bar.add_task(f"measure {config.total_layers} layers × {seeds} seeds", total=seeds)
                profile = measure_seeds(config, batch, seeds, first_seed, progress=lambda k: bar.advance(task, k),
                                        device=device, per_seed=True)
            profile.meta["batch_source"] = _batch_source(data, synthetic)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        _fail(err)
    diagnosis = _diagnosed(profile)
    if json_path:
        profile.write_json(json_path)
    if plot:
        from ..report.profiles import plot_profiles

        plot_profiles(plot, measured=profile, title=preset or "measurement")
    console.print(_profile_table(f"measured ({seeds} seeds, {profile.meta['tokens']} tokens)", measured=profile))
    _print_seed_spread(profile)
    _print_diagnosis(diagnosis.lines(), diagnosis.hint, "diagnosis (measured)")
    _print_written(("profile JSON", json_path), ("figure", plot))


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
    plot: Path = typer.Option(None, help="Write a PNG: theory lines against measured points per layer."),
    list_presets: bool = typer.Option(False, "--list-presets", help="List the presets and exit."),
    attention_heads: AttentionHeads = DEFAULT_HEADS,
    token_resolved: TokenResolved = None,
    measured_path: Path = typer.Option(None, "--measured", help="Compare against this measurement instead of "
                                       "measuring: a `sigprop measure --json` or `sigprop compare --json` file "
                                       "(from other machines, or an earlier run). Its model and batch are reused "
                                       "and only the prediction runs."),
):
    """Predict and measure the same model and report how well the theory predicts every layer.

    Like Kedia et al. Figs. 1–4: per layer, forward variance, gradient variance and token correlation, theory
    against measurement averaged over seeds, with median/mean/p90 relative error and R² per quantity.
    """
    from ..analysis.experiment import compare_config, compare_steps
    from ..model.presets import PRESETS

    if list_presets:
        for name, p in PRESETS.items():
            c = p.config()
            console.print(f"[bold]{name}[/bold]: {p.description} — {c.n_layers} layers, d={c.d_model}, "
                          f"{p.seeds} seeds × {p.batch_size}×{c.seq_len} tokens")
        raise typer.Exit()
    try:
        stored = None
        if measured_path is not None:
            config, stored, batch = _stored_setup(measured_path, preset, config_file, overrides, seeds, batch_size,
                                                  data, synthetic, device)
            seeds = len(stored.meta.get("seeds", []))
        else:
            config, seeds, batch = _measured_setup(preset, config_file, overrides, seeds, batch_size, data,
                                                   synthetic)
        with progress_bar() as bar:
            ptask = bar.add_task(f"predict {config.total_layers} layers (forward, backward)",
                                 total=compare_steps(config, token_resolved))
            task = None if stored else bar.add_task(f"measure {config.total_layers} layers × {seeds} seeds",
                                                    total=seeds)
            predicted, measured, comparison = compare_config(config, batch, seeds, grad_boundary,
                                                             progress=lambda k: bar.advance(task, k), device=device,
                                                             predict_progress=lambda k: bar.advance(ptask, k),
                                                             attention_heads=attention_heads,
                                                             token_resolved=token_resolved, measured=stored)
        if stored is None:
            measured.meta["batch_source"] = _batch_source(data, synthetic)
    except (ValueError, NotImplementedError, FileNotFoundError, RuntimeError) as err:
        _fail(err)
    if json_path:
        comparison.write_json(json_path)
    if plot:
        from ..report.profiles import plot_profiles

        name = (preset or (measured_path.stem if measured_path else "model")) + (f" ({', '.join(overrides)})"
                                                                                 if overrides else "")
        plot_profiles(plot, predicted, measured, title=f"{name}: theory vs measurement",
                      summary={q: s.to_dict() for q, s in comparison.summaries.items()})
    console.print(_profile_table(f"theory vs measurement ({seeds} seeds; gradient boundary: "
                                 f"{predicted.meta.get('grad_source')})", predicted, measured))
    console.print(_summary_table(comparison))
    _print_rules(predicted)
    _print_seed_spread(measured)
    _print_diagnosis(*comparison.diagnosis_lines(), "diagnosis (measured, theory beside it)")
    _print_written(("comparison JSON", json_path), ("figure", plot))


def demo_command(
    out: Path = typer.Option(Path("sigprop-report"), help="Folder for the report (figures, JSON, demo.md)."),
    seeds: int = typer.Option(4, help="Independently initialised models per configuration."),
):
    """Theory against measurement on the built-in default, with a report.

    A 48-layer Pre-LN encoder (d = 128) with Xavier initialisation and the same model with DeepScaleLM, masked LM
    on the Python standard library's own source (a BPE tokenizer is trained and cached on first use): per-layer
    forward variance, gradient variance and correlations, predicted and measured. About 40 seconds on 2 CPU cores.
    """
    from ..report.demo import DEMO_CONFIGS, run_demo

    with progress_bar() as bar:
        tasks = {n: bar.add_task(f"demo {n}", total=seeds) for n in DEMO_CONFIGS}
        try:
            results = run_demo(out, seeds=seeds, progress=lambda n, k: bar.advance(tasks[n], k))
        except (ValueError, FileNotFoundError) as err:
            bar.stop()
            _fail(err)
    for name in DEMO_CONFIGS:
        comparison = results[name]["comparison"]
        console.print(_summary_table(comparison, f"{name}: agreement per quantity"))
        _print_diagnosis(*comparison.diagnosis_lines(), f"{name}: diagnosis (measured, theory beside it)")
        console.print(f"[bold]{name}[/bold]: figure {results[name]['figure']}, JSON {results[name]['json']}")
    console.print(f"report: {results['summary']} (and the figures beside it)")
