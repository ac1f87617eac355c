"""Evaluations of an experiment's trained models: FP8 direct casting (Kedia et al. Sec. 4.6, Table 12), for the
experiments that train nothing of their own (:attr:`Experiment.runs_from`), and the APJN theory beside the trained
Derf and Pre-LN ViTs (Alekseev Secs. 3–4), after an experiment's own runs; ``init-theory``
(:mod:`sigprop.experiments.init_theory`) puts sigprop's prediction at initialisation beside each trained model;
``shape-ladder`` (:mod:`sigprop.experiments.ladder_report`) the paired gaps of a shape ladder, their trend and the
verdict by its pre-registered rules; ``depth-budget`` (:mod:`sigprop.experiments.budget_report`) each row's paired
gap against the pair's and its reading by the rules fixed before the runs.

``apjn``: for every model, the theory of Alekseev Results 3.1–3.5 at its configuration: the embedding covariance
(q⁰, p⁰) of Eq. 21 measured on digits images through the model's patch embedding (seed 0, 256 images), the
backward APJN to the input of a final normalisation 𝒥^{out,0} (Eq. 91, the simplified recurrence), and for Derf the
stretched-exponential scale parameter λ⁻¹ (Eq. 19; 𝒥^{b,0} ∼ e^{√(b/λ)}, Eq. 18) with the depth in units of λ,
N/λ = N·λ⁻¹. The table puts them beside the model's final validation accuracy (mean over seeds, at its best rate)
and its fate; the figure draws accuracy against depth per α with each α's depth scale λ marked. The question
(Alekseev Sec. 4): does the theory's depth scale predict where a Derf model stops training?

``entropy``: every run's tracked attention entropy (``track.jsonl``; normalised, 1 uniform, 0 collapsed onto one key:
:mod:`sigprop.measurement.attention_entropy`) at its last track point, the lowest layer's and the mean over layers,
beside the run's fate and final loss, for every learning rate of the grid (entropy collapse appears at high rates,
Noci et al. 2023 Sec. 4); the figure draws each model's per-layer entropy at the end of its runs, one panel per rate.

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

from ..core.figures import pyplot, save_figure
from ..core.jsonio import finite_or_null, read_config_json, write_json_atomic
from .budget_report import evaluate_budget, write_budget
from .init_theory import evaluate_init_theory, write_init_theory
from .ladder_report import evaluate_ladder, write_ladder
from .summary import SUMMARY_FILES, THEORY_FILES, fates_cell, finish_axes, markdown_table, table_row, write_evaluation
from .summary import mean_se_cell as _cell

__all__ = ["EVALUATIONS", "evaluate_fp8", "evaluate_apjn", "evaluate_entropy"]

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
            losses = [e[fmt][f"fp8_{fmt}"]["val_loss"] for e in evaluated]
            entry[f"{fmt}_not_finite"] = sum(v is None or not math.isfinite(v) for v in losses)  # a cast that
            entry[f"{fmt}_mean"], entry[f"{fmt}_se"] = _mean_se(losses)  # overflowed: said, not averaged away
            entry[f"{fmt}_delta_mean"], entry[f"{fmt}_delta_se"] = _mean_se([e[fmt]["delta"] for e in evaluated])
            entry[f"{fmt}_overflow"], _ = _mean_se([e[fmt]["activation_overflow_fraction"] for e in evaluated])
            entry[f"{fmt}_underflow"], _ = _mean_se([e[fmt]["underflow_fraction"] for e in evaluated])
            entry[f"{fmt}_activation_max_abs"] = max((e[fmt]["activation_max_abs"] or math.inf for e in evaluated),
                                                     default=None)
        rows.append(entry)
    table = finite_or_null({"experiment": summary["experiment"], "scale": summary["scale"], "rows": rows})
    return table


def fp8_table(table: dict, title: str, intro: str) -> str:
    """The FP8 table as markdown."""
    return markdown_table(
        title, intro, "| model | best LR | seeds | float32 | E4M3 | Δ E4M3 | E5M2 | Δ E5M2 | saturated (E4M3) | "
        "flushed to 0 (E4M3 / E5M2) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        (_fp8_row(r) for r in table["rows"]))


def _fp8_row(r: dict) -> str:
    if not r["seeds"]:
        return f"| {r['model']} | – | 0 | no run trained | | | | | | |"

    def loss(fmt: str, key: str, signed: bool = False) -> str:
        bad = r.get(f"{fmt}_not_finite", 0)
        if bad:
            return f"not finite ({bad} of {r['seeds']} seeds)"
        return _cell(r[f"{fmt}_{key}mean"], r[f"{fmt}_{key}se"], signed=signed)

    return table_row(
        r["model"], format(r["best_lr"], "g"), r["seeds"], _cell(r["fp32_mean"], r["fp32_se"]),
        loss("e4m3", ""), loss("e4m3", "delta_", signed=True), loss("e5m2", ""), loss("e5m2", "delta_", signed=True),
        _cell(r["e4m3_overflow"], None, ".2e"),
        f"{_cell(r['e4m3_underflow'], None, '.2e')} / {_cell(r['e5m2_underflow'], None, '.2e')}")


def fp8_figure(table: dict, path: Path, title: str) -> Path:
    """Bars: the loss increase from FP8 direct casting per model, E4M3 and E5M2, with the seeds' standard error."""
    plt = pyplot()

    rows = [r for r in table["rows"] if r["seeds"]]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(rows) + 2), 4.5))
    x = np.arange(len(rows))
    for i, fmt in enumerate(_FORMATS):
        lost = [bool(r.get(f"{fmt}_not_finite")) for r in rows]  # a seed's cast overflowed: no bar, said
        means = [np.nan if bad or r[f"{fmt}_delta_mean"] is None else r[f"{fmt}_delta_mean"]
                 for r, bad in zip(rows, lost, strict=True)]
        errs = [r[f"{fmt}_delta_se"] or 0.0 for r in rows]
        ax.bar(x + (i - 0.5) * 0.38, means, 0.38, yerr=errs, capsize=2, label=fmt.upper(), color=f"C{i}")
        for k in np.flatnonzero(lost):
            ax.text(k + (i - 0.5) * 0.38, 0.0, "not finite", rotation=90, ha="center", va="bottom", fontsize=7)
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
    return write_evaluation(out, SUMMARY_FILES, table, fp8_table(table, title, intro),
                            lambda path: fp8_figure(table, path, title))


def _embedding_covariance(config) -> tuple[float, float]:
    """(q⁰, p⁰) of Alekseev Eq. 21: the patch embedding's output on 256 digits images, model seed 0, batch mean."""
    import torch

    from ..apjn.inputs import estimate_q0_p0
    from ..data.digits import digits
    from ..model.transformer import seeded_model

    model = seeded_model(config, 0)
    images, _ = digits(count=256, size=config.image_size, channels=config.channels, normalise="rms")
    with torch.no_grad():
        h = model.embed(images)
    q0, p0 = estimate_q0_p0(h)
    return float(np.mean(q0)), float(np.mean(p0))


def _apjn_theory(config) -> dict:
    from ..apjn.asymptotics import lambda_inv
    from ..apjn.recurrence import apjn_profile

    norm = {"derf": "erf", "dyt": "tanh", "layernorm": "layernorm"}.get(config.norm)
    if norm is None or config.norm_position != "pre":
        return {"q0": None, "p0": None, "log_apjn": None, "lambda_inv": None}
    q0, p0 = _embedding_covariance(config)
    p0 = min(max(p0, -q0), q0)
    kw = dict(sigma_21=config.sigma_21, sigma_ov=config.sigma_ov, norm=norm, alpha=config.norm_alpha)
    profile = apjn_profile(**kw, blocks=config.n_layers, q0=q0, p0=p0)
    with np.errstate(over="ignore", divide="ignore"):
        log_out = float(np.log(profile.final_factor) + profile.log_backward()[0])
    lam = float(lambda_inv(**kw)) if norm != "layernorm" else None
    return {"q0": q0, "p0": p0, "log_apjn": log_out, "lambda_inv": lam}


def evaluate_apjn(summary: dict, results, runs_dir, out, say=print) -> dict:
    """The APJN table of a ViT experiment's models (module docstring): a row per model, in the scale's order."""
    from ..model.config import config_from_dict

    rows = []
    for row in summary["rows"]:
        runs = [r for r in results if r.model_name == row["model"]]
        if not runs:
            continue
        config = config_from_dict(read_config_json(Path(runs_dir) / runs[0].run_id / "model_config.json"))
        accuracy = []
        for r in runs:
            if r.lr == row["best_lr"] and r.fate == "trained":
                accuracy.append(_final_accuracy(Path(runs_dir) / r.run_id))
        theory = _apjn_theory(config)
        mean, se = _mean_se(accuracy)
        rows.append({"model": row["model"], "depth": config.n_layers, "norm": config.norm,
                     "alpha": config.norm_alpha if config.norm in ("derf", "dyt") else None,
                     "sigma_21": config.sigma_21, "sigma_ov": config.sigma_ov, "best_lr": row["best_lr"],
                     "accuracy_mean": mean, "accuracy_se": se, "fates": row["fates"], "lr_grid": row["lr_grid"],
                     **theory, "depth_over_lambda": (config.n_layers * theory["lambda_inv"]
                                                     if theory["lambda_inv"] else None)})
    return finite_or_null({"experiment": summary["experiment"], "scale": summary["scale"], "rows": rows})


def _final_accuracy(run_dir: Path) -> float | None:
    from ..train.run_dir import read_metrics

    accs = [m["val_acc"] for m in read_metrics(run_dir) if m.get("val_acc") is not None]
    return accs[-1] if accs else None


def apjn_table(table: dict, title: str, intro: str) -> str:
    """The APJN table as markdown."""
    return markdown_table(
        f"{title}: the APJN theory beside the trained models", intro,
        "| model | depth N | α | σ_21, σ_OV | best LR | final accuracy (mean ± se) | fates | "
        "theory: log 𝒥^{out,0} | λ⁻¹ | N/λ |", "|---|---:|---:|---|---:|---:|---|---:|---:|---:|",
        (table_row(r["model"], r["depth"], _cell(r["alpha"], None, "g"), f"{r['sigma_21']:g}, {r['sigma_ov']:g}",
                   _cell(r["best_lr"], None, "g"), _cell(r["accuracy_mean"], r["accuracy_se"], ".3f"),
                   fates_cell(r["fates"]), _cell(r["log_apjn"], None, ".2f"), _cell(r["lambda_inv"], None, ".3g"),
                   _cell(r["depth_over_lambda"], None, ".2f")) for r in table["rows"]))


def apjn_figure(table: dict, path: Path, title: str) -> Path:
    """Final accuracy against depth, one curve per (norm, α, σ), each Derf α's depth scale λ = 1/λ⁻¹ dotted."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    groups: dict = {}
    for r in table["rows"]:
        key = (r["norm"], r["alpha"], r["sigma_21"], r["sigma_ov"])
        groups.setdefault(key, []).append(r)
    for i, (key, rows) in enumerate(sorted(groups.items(), key=lambda kv: str(kv[0]))):
        rows = sorted(rows, key=lambda r: r["depth"])
        if len(rows) < 2:
            continue
        norm, alpha, s21, sov = key
        label = "pre-LN" if norm == "layernorm" else f"{norm} α={alpha:g}"
        y = [np.nan if r["accuracy_mean"] is None else r["accuracy_mean"] for r in rows]
        ax.plot([r["depth"] for r in rows], y, "o-", color=f"C{i % 10}", label=label)
        if rows[0]["lambda_inv"]:
            ax.axvline(1.0 / rows[0]["lambda_inv"], color=f"C{i % 10}", ls=":", lw=1)
    ax.set(xscale="log", xlabel="depth N (blocks)", ylabel="final validation accuracy",
           title=f"{title} (dotted: the theory's depth scale λ)")
    finish_axes(ax, fontsize=8)
    return save_figure(fig, path, dpi=110, crop=True)


def write_apjn(table: dict, out, title: str, intro: str) -> tuple[Path, ...]:
    """``theory.json``, ``theory.md`` and ``theory.png`` in ``out`` (beside the experiment's own table)."""
    return write_evaluation(out, THEORY_FILES, table, apjn_table(table, title, intro),
                            lambda path: apjn_figure(table, path, title))


def evaluate_entropy(summary: dict, results, runs_dir, out, say=print) -> dict:
    """The entropy table: a row per run (model, rate, seed) in the scale's model order (module docstring)."""
    from ..train.tracking import read_track

    order = {row["model"]: i for i, row in enumerate(summary["rows"])}
    rows = []
    for r in sorted(results, key=lambda r: (order.get(r.model_name, 0), r.lr, r.seed)):
        track = read_track(Path(runs_dir) / r.run_id)
        last = next((t for t in reversed(track) if t.get("attn_entropy")), None)
        values = [v for v in (last or {}).get("attn_entropy") or [] if v is not None]
        rows.append({"model": r.model_name, "lr": r.lr, "seed": r.seed, "fate": r.fate, "final_val": r.final_val,
                     "track_step": last["step"] if last else None, "entropy": values,
                     "entropy_min": min(values) if values else None,
                     "entropy_mean": float(np.mean(values)) if values else None})
    return finite_or_null({"experiment": summary["experiment"], "scale": summary["scale"], "rows": rows})


def entropy_table(table: dict, title: str, intro: str) -> str:
    return markdown_table(
        f"{title}: attention entropy at the end of every run", intro,
        "| model | LR | seed | fate | final val | tracked at step | entropy, lowest layer | entropy, mean |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
        (f"| {r['model']} | {r['lr']:g} | {r['seed']} | {r['fate']} | {_cell(r['final_val'], None)} | "
         f"{'–' if r['track_step'] is None else r['track_step']} | "
         f"{_cell(r['entropy_min'], None, '.3f')} | {_cell(r['entropy_mean'], None, '.3f')} |" for r in table["rows"]))


def entropy_figure(table: dict, path: Path, title: str) -> Path:
    plt = pyplot()

    lrs = sorted({r["lr"] for r in table["rows"]})
    models = list(dict.fromkeys(r["model"] for r in table["rows"]))
    fig, axes = plt.subplots(1, max(len(lrs), 1), figsize=(4.5 * max(len(lrs), 1), 4), squeeze=False)
    for ax, lr in zip(axes[0], lrs, strict=False):
        for i, model in enumerate(models):
            for r in table["rows"]:
                if r["model"] == model and r["lr"] == lr and r["entropy"]:
                    ax.plot(range(len(r["entropy"])), r["entropy"], "o-", ms=2, color=f"C{i % 10}",
                            label=model if r["seed"] == 0 else None)
        ax.set(xlabel="layer", ylabel="attention entropy / max", title=f"lr {lr:g}", ylim=(0, 1.05))
        finish_axes(ax)
    fig.suptitle(title)
    return save_figure(fig, path, dpi=110, crop=True)


def write_entropy(table: dict, out, title: str, intro: str) -> tuple[Path, ...]:
    """``entropy.json``, ``entropy.md`` and ``entropy.png`` in ``out`` (beside the experiment's own table)."""
    return write_evaluation(out, ("entropy.json", "entropy.md", "entropy.png"), table,
                            entropy_table(table, title, intro), lambda path: entropy_figure(table, path, title))


#: Evaluation name → (evaluate, write).
EVALUATIONS = {"fp8": (evaluate_fp8, write_fp8), "apjn": (evaluate_apjn, write_apjn),
               "entropy": (evaluate_entropy, write_entropy), "init-theory": (evaluate_init_theory, write_init_theory),
               "shape-ladder": (evaluate_ladder, write_ladder), "depth-budget": (evaluate_budget, write_budget)}
