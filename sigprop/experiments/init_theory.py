"""``init-theory``: sigprop's prediction at initialisation beside each trained model of an experiment.

For every model, :func:`sigprop.theory.predict` at its configuration (the rules of the model's components, its init
scheme's plan; a decoder's causal attention by the sampled rule, seed 0) gives, per layer, the residual stream's
forward variance σ²_x, its token-to-token correlation ρ (ρ → 1: every token the same vector, rank collapse), and the
variance of the loss gradient with respect to the stream. The table puts beside the model's final validation loss
(mean over seeds at its best rate) and fates:

- σ²_x at the last layer and its growth over the stack, σ²_x(N) / σ²_x(1) (Kedia et al. Sec. 3: the forward
  variance grows ~linearly with depth in a Pre-LN model of Xavier blocks, stays 1 under DeepScaleLM);
- the gradient ratio σ²_g(1) / σ²_g(N) of the first layer's to the last layer's (≫ 1 exploding towards the input,
  ≪ 1 vanishing; DeepScaleLM keeps it near 1);
- ρ at the last layer (Noci et al. 2022: rank collapse, ρ → 1, stalls training).

The figure draws σ²_x and σ²_g per layer, one curve per model, each labelled with its final loss. The question: do
the models the theory calls well-conditioned at initialisation train better? Each model's prediction is kept in
``OUT/init-theory/MODEL.json`` (keyed by a digest of its config) and reused by the next invocation.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np

from ..core.figures import pyplot, save_figure
from ..core.jsonio import finite_or_null, write_json_atomic
from .summary import THEORY_FILES, fates_cell, markdown_table, mean_se_cell, table_row, write_evaluation

__all__ = ["evaluate_init_theory", "write_init_theory"]


def _config_of(summary: dict, model_name: str, results, runs_dir):
    """The model's config as its runs trained it (a run folder's ``model_config.json``, so ``--set`` is honoured),
    else, for a model with no run folder here, the experiment's spec."""
    from ..core.jsonio import read_config_json
    from ..model.config import config_from_dict
    from .catalog import get_experiment

    for r in results:
        stored = Path(runs_dir) / r.run_id / "model_config.json"
        if r.model_name == model_name and stored.is_file():
            return config_from_dict(read_config_json(stored))
    scale = get_experiment(summary["experiment"]).scale(summary["scale"])
    model = next(m for m in scale.models if m.name == model_name)
    return config_from_dict({**scale.base_model, **model.model})


def _predicted(config, cache: Path) -> dict:
    """Per-layer σ²_x, ρ and σ²_g of ``config`` at initialisation (kept in ``cache``, keyed by the config)."""
    digest = hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True).encode()).hexdigest()[:12]
    if cache.is_file():
        with_digest = json.loads(cache.read_text(encoding="utf-8"))
        if with_digest.get("config_digest") == digest:
            return with_digest
    from ..theory.predict import predict

    profile = predict(config)
    fwd, corr, grad = (profile.column(q) for q in ("fwd_var", "fwd_corr", "grad_var"))
    prediction = finite_or_null({"config_digest": digest, "fwd_var": fwd, "fwd_corr": corr, "grad_var": grad})
    write_json_atomic(cache, prediction)
    return prediction


def _ratio(a, b) -> float | None:
    if a is None or b is None or b == 0 or not (math.isfinite(a) and math.isfinite(b)):
        return None
    return a / b


def evaluate_init_theory(summary: dict, results, runs_dir, out, say=print) -> dict:
    """The init-theory table (module docstring): a row per model, in the scale's order."""
    rows = []
    for row in summary["rows"]:
        slug = "".join(ch if ch.isalnum() else "-" for ch in row["model"]).strip("-")
        say(f"init-theory: predicting {row['model']}")
        config = _config_of(summary, row["model"], results, runs_dir)
        p = _predicted(config, Path(out) / "init-theory" / f"{slug}.json")
        fwd, corr, grad = p["fwd_var"], p["fwd_corr"], p["grad_var"]
        rows.append({"model": row["model"], "best_lr": row["best_lr"], "final_val_mean": row["final_val_mean"],
                     "final_val_se": row["final_val_se"], "seeds": row["seeds"], "fates": row["fates"],
                     "fwd_var_last": fwd[-1], "fwd_growth": _ratio(fwd[-1], fwd[0]),
                     "grad_ratio": _ratio(grad[0], grad[-1]), "corr_last": corr[-1],
                     "fwd_var": fwd, "fwd_corr": corr, "grad_var": grad})
    return finite_or_null({"experiment": summary["experiment"], "scale": summary["scale"], "rows": rows})


def init_theory_table(table: dict, title: str, intro: str) -> str:
    """The init-theory table as markdown."""
    return markdown_table(
        f"{title}: sigprop's prediction at initialisation beside the trained models", intro,
        "| model | best LR | final val (mean ± se) | fates | σ²_x last layer | σ²_x last ÷ first | "
        "σ²_g first ÷ last | ρ last layer |", "|---|---:|---:|---|---:|---:|---:|---:|",
        (table_row(r["model"], mean_se_cell(r["best_lr"], None, "g"),
                   mean_se_cell(r["final_val_mean"], r["final_val_se"]), fates_cell(r["fates"]) or "not run yet",
                   mean_se_cell(r["fwd_var_last"], None, ".3g"), mean_se_cell(r["fwd_growth"], None, ".3g"),
                   mean_se_cell(r["grad_ratio"], None, ".3g"), mean_se_cell(r["corr_last"], None, ".3f"))
         for r in table["rows"]))


def init_theory_figure(table: dict, path: Path, title: str) -> Path:
    """σ²_x and σ²_g per layer as predicted at initialisation, one curve per model labelled with its final loss."""
    plt = pyplot()

    fig, ax = plt.subplots(1, 2, figsize=(12, 4.8))
    for i, r in enumerate(table["rows"]):
        final = "not trained yet" if r["final_val_mean"] is None else f"final {r['final_val_mean']:.3f}"
        style = "-" if i < 10 else "--"
        for k, q in ((0, "fwd_var"), (1, "grad_var")):
            y = np.array([np.nan if v is None else v for v in r[q]], dtype=np.float64)
            ax[k].plot(np.arange(1, len(y) + 1), y, style, color=f"C{i % 10}", lw=1.3,
                       label=f"{r['model']} ({final})" if k == 0 else None)
    ax[0].set(xlabel="layer", ylabel="forward variance σ²_x", yscale="log", title="residual stream, predicted")
    ax[1].set(xlabel="layer", ylabel="gradient variance σ²_g", yscale="log", title="loss gradient, predicted")
    for a in ax:
        a.grid(alpha=0.3)
    legend_rows = math.ceil(len(table["rows"]) / 3)
    fig.legend(loc="lower center", ncol=3, fontsize=7, bbox_to_anchor=(0.5, 0.0))
    fig.suptitle(f"{title}: sigprop at initialisation (legend: final validation loss at the best rate)")
    fig.tight_layout(rect=(0, 0.03 + 0.035 * legend_rows, 1, 1))
    return save_figure(fig, path, dpi=110, crop=True)


def write_init_theory(table: dict, out, title: str, intro: str) -> tuple[Path, ...]:
    """``theory.json``, ``theory.md`` and ``theory.png`` in ``out`` (beside the experiment's own table)."""
    return write_evaluation(out, THEORY_FILES, table, init_theory_table(table, title, intro),
                            lambda path: init_theory_figure(table, path, title))
