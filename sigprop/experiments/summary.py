"""An experiment's results: each model at its best learning rate (mean ± standard error of the final validation loss
over its seeds), the grid beside it, every run's fate; as JSON, a markdown table and a figure (validation loss
against tokens, one curve per model)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path

import numpy as np

from ..core.figures import pyplot, save_figure
from ..core.jsonio import finite_or_null, write_json_atomic, write_text_atomic
from .ladder_stats import PairedGap, paired_gap

__all__ = ["best_learning_rates", "tuning_scores", "summarise", "settled", "Standing", "standing", "unsettled_reason",
           "write_summary", "mean_se_cell",
           "seed_losses", "paired_gap_at_best"]


def tuning_scores(results) -> dict:
    """(model name, rate) → the mean final validation loss of its tuning runs (one per tuning seed), or the fate of
    the first of them (by seed) that did not train: a rate is scored only where every tuning run at it trained."""
    groups: dict = {}
    for r in results:
        if r.tuning:
            groups.setdefault((r.model_name, r.lr), []).append(r)
    scores = {}
    for key, runs in groups.items():
        failed = [r for r in sorted(runs, key=lambda r: r.seed) if r.fate != "trained" or r.final_val is None]
        scores[key] = failed[0].fate if failed else float(np.mean([r.final_val for r in runs]))
    return scores


def best_learning_rates(results) -> dict:
    """Model name → the rate whose tuning runs trained to the lowest mean final validation loss (None if none
    trained; of two rates with the same score, the lower, whatever order the runs come in); with one tuning seed, the
    rate of the lowest tuning run. Of a stopped experiment, the runs finished so far: a rate whose other tuning seed
    has not finished is scored on the one that has (its model is not :func:`settled`, so tables show it as
    provisional)."""
    best: dict = {}
    for (name, lr), score in tuning_scores(results).items():
        best.setdefault(name, None)
        if isinstance(score, float) and (best[name] is None or (score, lr) < (best[name][1], best[name][0])):
            best[name] = (lr, score)
    return {name: (None if v is None else v[0]) for name, v in best.items()}


def seed_losses(results, model: str, lr: float | None = None) -> dict[int, float]:
    """Seed → final validation loss of ``model``'s runs that trained at ``lr`` (default: its best rate, chosen by
    :func:`best_learning_rates` on the tuning seeds alone); empty where the model has no such run.

    Args:
        results: finished runs (objects with ``model_name``, ``seed``, ``lr``, ``tuning``, ``fate``, ``final_val``).
        model: the model's name in the experiment.
        lr: the rate; None: the model's best rate.

    Returns:
        A dict from seed to final validation loss, in seed order.

    Example:
        >>> from types import SimpleNamespace as Run
        >>> runs = [Run(model_name="m", seed=0, lr=1e-3, tuning=True, fate="trained", final_val=3.0),
        ...         Run(model_name="m", seed=0, lr=2e-3, tuning=True, fate="trained", final_val=2.5),
        ...         Run(model_name="m", seed=1, lr=2e-3, tuning=False, fate="trained", final_val=2.7)]
        >>> seed_losses(runs, "m")
        {0: 2.5, 1: 2.7}
    """
    if lr is None:
        lr = best_learning_rates(results).get(model)
    if lr is None:
        return {}
    return {r.seed: float(r.final_val) for r in sorted(results, key=lambda r: r.seed)
            if r.model_name == model and r.lr == lr and r.fate == "trained" and r.final_val is not None}


def paired_gap_at_best(results, first: str, second: str, level: float = 0.95) -> PairedGap | None:
    """The gap loss(``first``) − loss(``second``), each model at its own best rate, paired by seed.

    A seed fixes a run's data order (each step's batch is a function of (seed, step)), so two models of one batch size,
    sequence length and corpus see the same batches at one seed, and the per-seed differences are paired: their mean,
    standard error and Student's t interval with n − 1 degrees of freedom
    (:func:`sigprop.experiments.ladder_stats.paired_gap`). With two seeds that is one degree of freedom, t = 12.7.

    Args:
        results: finished runs of one experiment.
        first: the model whose loss is subtracted from.
        second: the model subtracted.
        level: the interval's coverage.

    Returns:
        The :class:`~sigprop.experiments.ladder_stats.PairedGap` over the seeds both models have at their best rates,
        or None where they share none.

    Example:
        >>> from types import SimpleNamespace as Run
        >>> runs = [Run(model_name=m, seed=s, lr=1e-3, tuning=s == 0, fate="trained", final_val=v)
        ...         for m, s, v in (("a", 0, 3.0), ("a", 1, 3.2), ("b", 0, 2.9), ("b", 1, 3.0))]
        >>> g = paired_gap_at_best(runs, "a", "b")
        >>> [round(d, 3) for d in g.differences], g.dof, round(g.low, 2), round(g.high, 2)
        ([0.1, 0.2], 1, -0.49, 0.79)
    """
    return paired_gap(seed_losses(results, first), seed_losses(results, second), level)


def _mean_se(values: list[float]) -> tuple[float, float]:
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return math.nan, math.nan
    return float(a.mean()), float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else math.nan


class Standing(StrEnum):
    """Where a model's rate search and seeds stand (:func:`standing`): settled, still to train, or unsettled for good
    (nothing more will train for it under the experiment's rules, so a table must not say it is still tuning)."""

    SETTLED = "settled"
    TUNING = "tuning not finished"
    EDGE_SPENT = "best rate at an edge of the rates tried, its grid extensions spent"
    SEED_LOST = "a seed at the best rate diverged or stalled"
    NONE_TRAINED = "trained at no rate tried"


def standing(spec, mine: list, best: float | None, scale, seeds: int) -> Standing:
    """Where a model's rate search and seeds stand. It is settled when every rate of its first grid is tuned, every
    rate tried (extensions included) is tuned on all ``scale.tuning_seeds`` seeds, its best rate is interior to those
    tried where the scale extends grids, and ``seeds`` seeds trained at it. A model that trained at no rate is settled
    only where the scale lowers such a model's grid (``scale.lower_when_none_trains``) and those lower rates are
    spent: its outcome is then "trained at no rate tried". A table's gaps between models read as final only when
    both are settled.

    Args:
        spec: the model's :class:`~sigprop.experiments.spec.ModelSpec` (its first grid, ``lrs``).
        mine: the model's finished runs (:class:`~sigprop.experiments.runner.RunResult`).
        best: its best rate so far (None: none yet).
        scale: the :class:`~sigprop.experiments.spec.Scale` (``tuning_seeds``, ``grid_extensions``,
            ``lower_when_none_trains``).
        seeds: the seeds every model trains at its best rate.

    Returns:
        :attr:`Standing.SETTLED`; :attr:`Standing.TUNING` while runs remain to train; or why nothing more will train
        although the model is not settled: a best rate still at an edge once that edge's extensions are spent
        (:attr:`Standing.EDGE_SPENT`), a seed at the best rate that diverged or stalled (its fate is final, so it is
        not trained again: :attr:`Standing.SEED_LOST`), no rate trained where the scale does not lower the grid
        (:attr:`Standing.NONE_TRAINED`).

    Example:
        >>> from types import SimpleNamespace as Run
        >>> spec = Run(lrs=(1.0, 2.0, 4.0))
        >>> scale = Run(tuning_seeds=2, grid_extensions=1, lower_when_none_trains=False)
        >>> runs = [Run(lr=lr, tuning=True, fate="trained") for lr in (1.0, 2.0, 4.0) for _ in range(2)]
        >>> standing(spec, runs, 2.0, scale, 3).name, standing(spec, runs, 4.0, scale, 3).name
        ('TUNING', 'TUNING')
        >>> wider = runs + [Run(lr=8.0, tuning=True, fate="trained") for _ in range(2)]
        >>> standing(spec, wider, 8.0, scale, 3).name
        'EDGE_SPENT'
    """
    tuning = [r for r in mine if r.tuning]
    tried = {r.lr for r in tuning}
    if not set(spec.lrs) <= tried or any(sum(r.lr == lr for r in tuning) < scale.tuning_seeds for lr in tried):
        return Standing.TUNING
    if best is None:  # trained at no rate: settled once the lowered rates are spent, where the scale lowers them
        if not scale.lower_when_none_trains:
            return Standing.NONE_TRAINED
        spent = sum(lr < min(spec.lrs) for lr in tried) >= scale.grid_extensions
        return Standing.SETTLED if spent else Standing.TUNING
    if scale.grid_extensions > 0 and len(tried) > 1 and best in (min(tried), max(tried)):
        beyond = (sum(lr > max(spec.lrs) for lr in tried) if best == max(tried)
                  else sum(lr < min(spec.lrs) for lr in tried))
        return Standing.EDGE_SPENT if beyond >= scale.grid_extensions else Standing.TUNING
    at_best = [r for r in mine if r.lr == best]
    if sum(r.fate == "trained" for r in at_best) >= seeds:
        return Standing.SETTLED
    return Standing.SEED_LOST if any(r.fate in ("diverged", "stalled") for r in at_best) else Standing.TUNING


def settled(spec, mine: list, best: float | None, scale, seeds: int) -> bool:
    """Whether a model's rate search and seeds are finished (:func:`standing` is :attr:`Standing.SETTLED`; its
    arguments).

    Example:
        >>> from types import SimpleNamespace as Run
        >>> spec = Run(lrs=(1.0, 2.0, 4.0))
        >>> scale = Run(tuning_seeds=2, grid_extensions=3, lower_when_none_trains=False)
        >>> runs = [Run(lr=lr, tuning=True, fate="trained") for lr in (1.0, 2.0, 4.0) for _ in range(2)]
        >>> settled(spec, runs, 2.0, scale, 3), settled(spec, runs + [Run(lr=2.0, tuning=False, fate="trained")],
        ...                                                 2.0, scale, 3)
        (False, True)
    """
    return standing(spec, mine, best, scale, seeds) is Standing.SETTLED


def unsettled_reason(models: Iterable[dict | None]) -> str:
    """Why a gap between ``models`` is not read: "tuning not finished" while one of them has runs to train (or has
    not run), else the first unsettled model and its :class:`Standing` (nothing more will train for it).

    Args:
        models: summary rows or records of the models (``model``, ``settled``, ``standing``), None where a model
            has not run.

    Returns:
        The reason, for "not read (…)" or "provisional: …".

    Example:
        >>> unsettled_reason([{"model": "a", "settled": True, "standing": "settled"},
        ...                   {"model": "b", "settled": False, "standing": Standing.EDGE_SPENT.value}])
        'b: best rate at an edge of the rates tried, its grid extensions spent'
    """
    unsettled = [m for m in models if m is None or not m["settled"]]
    if not unsettled or any(m is None or m.get("standing", Standing.TUNING) == Standing.TUNING for m in unsettled):
        return Standing.TUNING.value
    return f"{unsettled[0]['model']}: {unsettled[0]['standing']}"


def summarise(experiment, scale_name: str, scale, results, unigram: dict, parameters: dict, tokens: dict,
              command: str, seeds: int | None = None) -> dict:
    """The summary of ``results`` (every run so far): a row per model, in the scale's order; ``seeds``: the seeds
    each model trains at its best rate (default: the scale's), for each row's ``settled`` (:func:`settled`)."""
    best = best_learning_rates(results)
    scores = tuning_scores(results)
    rows = []
    for spec in scale.models:
        mine = [r for r in results if r.model_name == spec.name]
        lr = best.get(spec.name)
        at_best = [r for r in mine if lr is not None and r.lr == lr and r.fate == "trained"]
        mean, se = _mean_se([r.final_val for r in at_best])
        rows.append({
            "model": spec.name, "non_embedding_parameters": parameters[spec.name],
            "tokens_per_run": tokens[spec.name],
            "tokens_per_parameter": tokens[spec.name] / parameters[spec.name],
            "lr_grid": {f"{lr:g}": score for (name, lr), score in sorted(scores.items(), key=lambda kv: kv[0][1])
                        if name == spec.name},
            "best_lr": lr, "best_lr_at_edge": lr is not None and len(tried := {r.lr for r in mine if r.tuning}) > 1
            and lr in (min(tried), max(tried)), "seeds": len(at_best), "final_val_mean": mean, "final_val_se": se,
            "unigram_loss": unigram[spec.name], "fates": {f: sum(r.fate == f for r in mine) for f in
                                                         sorted({r.fate for r in mine})},
            "wall_per_run_s": float(np.mean([r.wall for r in mine])) if mine else math.nan,
            "diverged": [f"lr {r.lr:g} seed {r.seed}: {r.detail}" for r in mine if r.fate == "diverged"],
            "settled": (where := standing(spec, mine, lr, scale, seeds or scale.seeds)) is Standing.SETTLED,
            "standing": where.value,
        })
    return finite_or_null({"experiment": experiment.name, "scale": scale_name, "question": experiment.question,
                           "reference": experiment.reference, "note": scale.note, "command": command, "rows": rows,
                           "runs": [r.__dict__ for r in results]})


def mean_se_cell(mean, se, spec=".4f", signed=False) -> str:
    """A table cell "mean ± se" in ``spec`` ("–" without a mean, the mean alone without a standard error)."""
    if mean is None:
        return "–"
    text = format(mean, ("+" if signed else "") + spec)
    return text + (f" ± {format(se, spec)}" if se is not None else "")


def table_row(*cells) -> str:
    """A markdown table row of ``cells`` (each turned into text)."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


#: An experiment's own files: its summary, table and figure (and an evaluation's that has its own folder).
SUMMARY_FILES = ("results.json", "table.md", "figure.png")
#: The files of an evaluation written beside an experiment's own table (:func:`write_evaluation`).
THEORY_FILES = ("theory.json", "theory.md", "theory.png")


def write_evaluation(out, names: tuple[str, str, str], table: dict, markdown: str, draw) -> tuple[Path, ...]:
    """An evaluation's three files in ``out``, each written atomically: ``table`` as JSON, ``markdown``, and the
    figure ``draw(path)`` saves; ``names``: their file names (JSON, markdown, figure)."""
    out = Path(out)
    json_name, markdown_name, figure_name = names
    return (write_json_atomic(out / json_name, table), write_text_atomic(out / markdown_name, markdown),
            draw(out / figure_name))


def markdown_table(heading: str, intro: str, columns: str, align: str, rows: Iterable[str]) -> str:
    """A page of one table: the ``heading``, the ``intro`` and the table (its ``columns`` row, its alignment row
    ``align``, then ``rows``)."""
    return "\n".join([f"# {heading}", "", intro, "", columns, align, *rows]) + "\n"


def finish_axes(ax, empty: str | None = None, fontsize: int = 7) -> None:
    """A panel's grid, and its legend where it has labelled lines (else ``empty``, if given, across the panel)."""
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=fontsize)
    elif empty is not None:
        ax.text(0.5, 0.5, empty, transform=ax.transAxes, ha="center")


def fates_cell(fates: dict) -> str:
    """The fates of a model's runs as a table cell: "trained 5, stalled 2" ("" for none)."""
    return ", ".join(f"{k} {v}" for k, v in fates.items())


def _table(summary: dict) -> str:
    lines = [f"# {summary['experiment']} ({summary['scale']} scale)", "", summary["question"], "",
             f"Reproduces: {summary['reference']}. {summary['note']}", "", f"Command: `{summary['command']}`", "",
             "| model | non-emb. params | tokens / param | LR grid: final val (or fate) | best LR | seeds | final val "
             "(mean ± se) | unigram | fates | wall per run |",
             "|---|---:|---:|---|---:|---:|---:|---:|---|---:|"]
    for r in summary["rows"]:
        grid = ", ".join(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}" for k, v in r["lr_grid"].items())
        val = mean_se_cell(r["final_val_mean"], r["final_val_se"])
        fates = fates_cell(r["fates"])
        wall = "–" if r["wall_per_run_s"] is None else f"{r['wall_per_run_s']:.0f} s"
        lines.append(f"| {r['model']} | {r['non_embedding_parameters']:,} | {r['tokens_per_parameter']:.1f} | {grid} | "
                     f"{_best(r)} | {r['seeds']} | {val} | "
                     f"{r['unigram_loss']:.3f} | {fates} | {wall} |")
    diverged = [f"- {r['model']}, {d}" for r in summary["rows"] for d in r["diverged"]]
    if diverged:
        lines += ["", "Diverged runs:", *diverged]
    if any(r.get("best_lr_at_edge") for r in summary["rows"]):
        lines += ["", "(edge): the best rate is the highest or lowest tried, so the model's optimum may lie beyond it."]
    return "\n".join(lines) + "\n"


def _best(row: dict) -> str:
    if row["best_lr"] is None:
        return "–"
    return f"{row['best_lr']:g}" + (" (edge)" if row.get("best_lr_at_edge") else "")


def curve_label(model: str, lr: float | None, trained_seeds: int) -> str:
    """The figure's legend entry of one model: its best rate and how many seeds its mean curve averages."""
    if trained_seeds == 0:
        return f"{model}: no run trained"
    return f"{model} (lr {lr:g}, {trained_seeds} seed{'' if trained_seeds == 1 else 's'})"


def _figure(summary: dict, path: Path, results) -> Path:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(8, 5))
    for i, row in enumerate(summary["rows"]):
        lr = row["best_lr"]
        curves = [r.curve for r in results if r.model_name == row["model"] and r.lr == lr and r.fate == "trained"]
        if not curves:
            # A model that trained at no rate keeps its place in the legend, so the figure does not hide it.
            ax.plot([], [], "x", color=f"C{i % 10}", label=curve_label(row["model"], lr, 0))
            continue
        n = min(len(c) for c in curves)
        tokens = np.array([p[0] for p in curves[0][:n]], dtype=np.float64)
        mean = np.mean([[p[1] for p in c[:n]] for c in curves], axis=0)
        ax.plot(tokens, mean, "o-", ms=2, color=f"C{i % 10}", label=curve_label(row["model"], lr, len(curves)))
    unigram = {row["unigram_loss"] for row in summary["rows"]}
    for u in unigram:
        ax.axhline(u, color="0.6", ls=":", lw=1)
    ax.set(xlabel="tokens", ylabel="validation loss", title=f"{summary['experiment']} ({summary['scale']} scale)")
    finish_axes(ax, "no run trained yet")
    return save_figure(fig, path, dpi=110, crop=True)


def write_summary(summary: dict, out, results) -> tuple[Path, ...]:
    """``results.json``, ``table.md`` and ``figure.png`` in ``out``, each written atomically."""
    return write_evaluation(out, SUMMARY_FILES, summary, _table(summary),
                            lambda path: _figure(summary, path, results))
