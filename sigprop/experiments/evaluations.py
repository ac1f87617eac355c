"""Evaluations of an experiment's trained models, for the experiments that train nothing of their own
(:attr:`Experiment.runs_from`): FP8 direct casting (Kedia et al. Sec. 4.6, Table 12).

``fp8``: every run of a model at its best learning rate (every seed that trained) is evaluated at its final
checkpoint in float32 and with FP8 direct casting, E4M3 and E5M2 (:func:`sigprop.train.fp8.evaluate_run`: every
linear layer's weight and input and every embedding table rounded to the format with no scaling factor, values
beyond the range saturating). The table gives each model's float32 loss, the loss after each cast and the
difference (mean ± standard error over seeds), and the fractions of activation values that saturated or flushed to
zero. Each run's evaluation is kept in ``OUT/fp8/RUN_ID.json`` and reused by the next invocation.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..core.figures import save_figure
from ..core.jsonio import finite_or_null, read_config_json, write_json_atomic, write_text_atomic

__all__ = ["EVALUATIONS", "evaluate_fp8"]

_FORMATS = ("e4m3", "e5m2")


def _mean_se(values) -> tuple[float | None, float | None]:
    a = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if a.size == 0:
        return None, None
    return float(a.mean()), (float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else None)


def _evaluate_run(run_dir: Path, cache: Path, say) -> dict:
    from ..train.fp8 import evaluate_run

    if cache.exists():
        return read_config_json(cache)
    say(f"fp8: evaluating {run_dir.name} in {', '.join(f.upper() for f in _FORMATS)}")
    record = {fmt: evaluate_run(run_dir, fmt) for fmt in _FORMATS}
    write_json_atomic(cache, finite_or_null(record))
    return record


def evaluate_fp8(summary: dict, results, runs_dir, out, say=print) -> dict:
    """The FP8 table of the trained models of ``summary`` / ``results`` (an experiment's summary and run results,
    its runs in ``runs_dir``): a row per model at its best rate. Written into ``out``: ``results.json``,
    ``table.md`` and ``figure.png`` (the loss increase per model and format)."""
    runs_dir, out = Path(runs_dir), Path(out)
    (out / "fp8").mkdir(parents=True, exist_ok=True)
    rows = []
    for row in summary["rows"]:
        runs = [r for r in results if r.model_name == row["model"] and r.lr == row["best_lr"] and r.fate == "trained"]
        evaluated = []
        for r in runs:
            evaluated.append(_evaluate_run(runs_dir / r.run_id, out / "fp8" / f"{r.run_id}.json", say))
        entry = {"model": row["model"], "best_lr": row["best_lr"], "seeds": len(evaluated),
                 "runs": [r.run_id for r in runs]}
        fp32 = [e["e4m3"]["fp32"]["val_loss"] for e in evaluated]
        entry["fp32_mean"], entry["fp32_se"] = _mean_se(fp32)
        for fmt in _FORMATS:
            entry[f"{fmt}_mean"], entry[f"{fmt}_se"] = _mean_se([e[fmt][f"fp8_{fmt}"]["val_loss"] for e in evaluated])
            entry[f"{fmt}_delta_mean"], entry[f"{fmt}_delta_se"] = _mean_se([e[fmt]["delta"] for e in evaluated])
            entry[f"{fmt}_overflow"], _ = _mean_se([e[fmt]["activation_overflow_fraction"] for e in evaluated])
            entry[f"{fmt}_underflow"], _ = _mean_se([e[fmt]["underflow_fraction"] for e in evaluated])
            entry[f"{fmt}_activation_max_abs"] = max((e[fmt]["activation_max_abs"] or math.inf for e in evaluated),
                                                     default=None)
        rows.append(entry)
    table = finite_or_null({"experiment": summary["experiment"], "scale": summary["scale"], "rows": rows})
    return table


def _cell(mean, se, spec=".4f", signed=False) -> str:
    if mean is None:
        return "–"
    text = format(mean, ("+" if signed else "") + spec)
    return text + (f" ± {format(se, spec)}" if se is not None else "")


def fp8_table(table: dict, title: str, intro: str) -> str:
    """The FP8 table as markdown."""
    lines = [f"# {title}", "", intro, "",
             "| model | best LR | seeds | float32 | E4M3 | Δ E4M3 | E5M2 | Δ E5M2 | saturated (E4M3) | "
             "flushed to 0 (E4M3 / E5M2) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in table["rows"]:
        if not r["seeds"]:
            lines.append(f"| {r['model']} | – | 0 | no run trained | | | | | | |")
            continue
        lines.append(
            f"| {r['model']} | {r['best_lr']:g} | {r['seeds']} | {_cell(r['fp32_mean'], r['fp32_se'])} | "
            f"{_cell(r['e4m3_mean'], r['e4m3_se'])} | {_cell(r['e4m3_delta_mean'], r['e4m3_delta_se'], signed=True)} | "
            f"{_cell(r['e5m2_mean'], r['e5m2_se'])} | {_cell(r['e5m2_delta_mean'], r['e5m2_delta_se'], signed=True)} | "
            f"{_cell(r['e4m3_overflow'], None, '.2e')} | {_cell(r['e4m3_underflow'], None, '.2e')} / "
            f"{_cell(r['e5m2_underflow'], None, '.2e')} |")
    return "\n".join(lines) + "\n"


def fp8_figure(table: dict, path: Path, title: str) -> Path:
    """Bars: the loss increase from FP8 direct casting per model, E4M3 and E5M2, with the seeds' standard error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in table["rows"] if r["seeds"]]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(rows) + 2), 4.5))
    x = np.arange(len(rows))
    for i, fmt in enumerate(_FORMATS):
        means = [r[f"{fmt}_delta_mean"] if r[f"{fmt}_delta_mean"] is not None else np.nan for r in rows]
        errs = [r[f"{fmt}_delta_se"] or 0.0 for r in rows]
        ax.bar(x + (i - 0.5) * 0.38, means, 0.38, yerr=errs, capsize=2, label=fmt.upper(), color=f"C{i}")
    ax.axhline(0.0, color="0.3", lw=0.8)
    ax.set_xticks(x, [r["model"] for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set(ylabel="validation loss increase (nats)", title=title)
    ax.grid(axis="y", alpha=0.3)
    if rows:
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no model trained yet", transform=ax.transAxes, ha="center")
    return save_figure(fig, path, dpi=110, crop=True)


def write_fp8(table: dict, out, title: str, intro: str) -> tuple[Path, ...]:
    """``results.json``, ``table.md`` and ``figure.png`` of an FP8 evaluation in ``out``, each written atomically."""
    out = Path(out)
    return (write_json_atomic(out / "results.json", table),
            write_text_atomic(out / "table.md", fp8_table(table, title, intro)),
            fp8_figure(table, out / "figure.png", title))


#: Evaluation name → (evaluate, write).
EVALUATIONS = {"fp8": (evaluate_fp8, write_fp8)}
