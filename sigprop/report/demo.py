"""``sigprop demo``: theory against measurement on the built-in default — a vanilla Pre-LN Xavier encoder and the
same model with DeepScaleLM (Kedia et al. Sec. 3.5), masked LM on the Python standard library's own source — then
training: the deep model the theory calls unstable beside its DeepScaleLM twin (:mod:`sigprop.report.demo_training`),
with a report (figures, JSON, Markdown summary) written to one folder."""

from __future__ import annotations

from pathlib import Path

from ..core.jsonio import write_json_atomic, write_text_atomic
from ..core.outputs import check_output_folder
from ..core.progress import Progress, tasks
from ..core.validate import integer_value
from ..model.config import TransformerConfig

__all__ = ["DEMO_CONFIGS", "run_demo"]

_BASE = dict(n_layers=48, d_model=128, n_heads=2, dropout=0.1, seq_len=128, max_len=128, vocab_size=8192)

#: The two models the demo compares (name → config).
DEMO_CONFIGS = {
    "preln-xavier": TransformerConfig(**_BASE, norm_position="pre", init="xavier"),
    "preln-dslm": TransformerConfig(**_BASE, norm_position="pre", init="dslm"),
}


def run_demo(out_dir: str | Path = "sigprop-report", seeds: int = 4, batch_size: int = 4,
             progress: Progress | None = None, train: bool = True) -> dict:
    """Predict, measure and compare each of :data:`DEMO_CONFIGS`; write ``demo-<name>.png`` / ``.json`` and
    ``demo.md`` into ``out_dir`` (with each model's diagnosis, :meth:`Comparison.diagnosis_lines`, and a note for each
    quantity whose seed mean is skewed, :func:`sigprop.measurement.spread.heavy_tails`); with ``train``, the training
    section (:func:`sigprop.report.demo_training.run_demo_training`: ``demo-training.png`` and the runs in
    ``training/``). Returns {name: {"comparison": Comparison, "figure": path, "json": path}} plus "summary" (the
    Markdown path) and, with ``train``, "training" (that function's result). ``seeds``, ``batch_size`` and the
    folder are checked before any work (``ValueError``)."""
    from ..analysis.experiment import batch_prediction, compare_config
    from ..measurement.spread import heavy_tails
    from ..model.batches import token_batch
    from .profiles import plot_profiles

    seeds, batch_size = integer_value(seeds, "--seeds", 1), integer_value(batch_size, "batch_size", 1)
    out = check_output_folder(out_dir, "--out")
    progress = tasks(progress)
    out.mkdir(parents=True, exist_ok=True)
    results, notes, diagnoses = {}, [], []
    lines = ["# sigprop demo: theory vs measurement", "",
             f"{_BASE['n_layers']} layers, d = {_BASE['d_model']}, masked LM on the Python standard library's "
             f"source, {seeds} seeds × {batch_size} sequences of {_BASE['seq_len']} tokens.", "",
             "| model | σ²_x at last layer | σ²_g first/last | fwd var median err | grad var median err | "
             "corr max abs err |", "|---|---:|---:|---:|---:|---:|"]
    for name, config in DEMO_CONFIGS.items():
        batch = token_batch(config, batch_size=batch_size)
        prediction = batch_prediction(config, batch)
        predict_tick = progress.task(f"demo {name}: predict {config.n_layers} layers", prediction.steps())
        measure_tick = progress.task(f"demo {name}: measure {seeds} seeds", seeds)
        pred, meas, comp = compare_config(config, batch, seeds, progress=measure_tick, predict_progress=predict_tick,
                                          prediction=prediction)
        fig = plot_profiles(out / f"demo-{name}.png", pred, meas, title=f"{name}: theory vs measurement",
                            summary={q: s.to_dict() for q, s in comp.summaries.items()})
        js = out / f"demo-{name}.json"
        write_json_atomic(js, comp.to_json())
        layers = meas.site("layer")
        s = comp.summaries
        lines.append(f"| {name} | {layers[-1].fwd_var:.3g} | {layers[0].grad_var / layers[-1].grad_var:.3g} | "
                     f"{100 * s['fwd_var'].median_rel:.1f}% | {100 * s['grad_var'].median_rel:.1f}% | "
                     f"{s['fwd_corr'].max_abs:.3f} |")
        results[name] = {"comparison": comp, "figure": fig, "json": js}
        found, hint = comp.diagnosis_lines()
        diagnoses += [f"**{name}**", "", *(f"- {line}" for line in found)]
        diagnoses += [f"- hint: {hint}", ""] if hint else [""]
        notes.extend(f"- {name}: {note.describe()}" for note in heavy_tails(meas))
    lines += ["", "## Diagnosis (measured, theory beside it)", "", *diagnoses]
    if notes:
        lines += ["", f"Seed spread (hollow points in the figures; with {seeds} seeds a mildly skewed mean is common):",
                  "", *notes]
    if train:
        from .demo_training import run_demo_training

        results["training"] = run_demo_training(out, progress)
        lines += ["", *results["training"]["lines"]]
    summary = out / "demo.md"
    write_text_atomic(summary, "\n".join(lines) + "\n")
    results["summary"] = summary
    return results
