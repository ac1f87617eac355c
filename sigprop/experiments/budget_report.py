"""`depth-budget`'s own table: per row the paired gap Δ = loss(8 × 64 DSLM) − loss(2 × 128 Xavier), each model at
its own best rate, with its t interval; the row's change of the gap, Δ(row) − Δ(pair) paired by seed, with its own t
interval; and the reading by the rules fixed before the runs (:data:`RULES`). ``rows.json``, ``rows.md`` and
``rows.png``.

A row is read only when both its models and both of the pair's are settled
(:func:`~sigprop.experiments.summary.settled`); before that its gap is provisional.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ..core.figures import save_figure
from .budget import ROW_KEYS, budget_model
from .ladder import Role
from .ladder_stats import PairedGap, paired_gap
from .summary import Standing, finish_axes, seed_losses, unsettled_reason, write_evaluation

__all__ = ["RULES", "evaluate_budget", "read_row", "budget_markdown", "budget_figure", "write_budget"]

#: The rules by which the rows are read, fixed before their runs.
RULES = ("Δ = loss(8 × 64 DSLM) − loss(2 × 128 Xavier), each at its own best rate, paired by seed, with Student's t "
         "95% interval on n − 1 degrees of freedom; a row's change is Δ(row) − Δ(pair), paired by seed, with its own "
         "t interval. A row flips the sign where its Δ interval lies below 0 (deep-thin ahead) while the pair's does "
         "not; otherwise it narrows the gap where its change's interval lies below 0, widens it where that interval "
         "lies above 0, and does not separate from the pair otherwise. A row is read only when its models and the "
         "pair's are settled (rate searches and seeds finished).")


def _gap_record(gap: PairedGap | None) -> dict | None:
    return None if gap is None else gap.to_dict()


def _by_seed(gap: dict) -> dict[int, float]:
    return dict(zip(gap["seeds"], gap["differences"], strict=True))


def read_row(row: dict, pair: dict) -> str:
    """A row's reading by :data:`RULES` against the pair.

    Args:
        row: a row record of :func:`evaluate_budget` (``final``; ``gap`` and ``change``, each a gap record or None).
        pair: the pair's record.

    Returns:
        ``flips the sign``, ``narrows the gap``, ``widens the gap``, ``not separated from the pair`` or
        ``not read (…)``: why (tuning not finished while any of the four models still has runs to train; else the
        first unsettled model and why nothing more will train for it).

    Example:
        >>> gap = lambda *d: {"differences": list(d), "seeds": list(range(len(d))), "high": max(d) + 0.05,
        ...                   "low": min(d) - 0.05}
        >>> pair = {"final": True, "gap": gap(0.2, 0.2)}
        >>> read_row({"final": True, "gap": gap(0.1, 0.12), "change": gap(-0.1, -0.08)}, pair)
        'narrows the gap'
    """
    if not (row["final"] and pair["final"]):
        return f"not read ({unsettled_reason(_models(row, pair))})"
    gap, base, change = row.get("gap"), pair.get("gap"), row.get("change")
    if gap is None or base is None or change is None or gap["high"] is None or change["high"] is None:
        return "not read (fewer than two paired seeds)"
    if gap["high"] < 0 and not (base["high"] is not None and base["high"] < 0):
        return "flips the sign"
    if change["high"] < 0:
        return "narrows the gap"
    if change["low"] > 0:
        return "widens the gap"
    return "not separated from the pair"


def _models(*records: dict) -> list[dict | None]:
    """The model records of row records (None where a model has not run)."""
    return [m for r in records for m in r.get("models", {}).values()]


def _model_record(name: str | None, row: dict | None, losses: dict[int, float]) -> dict | None:
    if name is None or row is None:
        return None
    return {"model": name, "best_lr": row["best_lr"], "best_lr_at_edge": row.get("best_lr_at_edge", False),
            "settled": bool(row.get("settled", False)),
            "standing": row.get("standing", Standing.SETTLED.value if row.get("settled") else Standing.TUNING.value),
            "losses": {str(s): v for s, v in losses.items()}}


def evaluate_budget(summary: dict, results: Sequence, runs_dir: Path | None = None, out: Path | None = None,
                    say: Callable[[str], None] = print) -> dict:
    """The rows' table of a `depth-budget` experiment.

    Args:
        summary: the experiment's summary (:func:`~sigprop.experiments.summary.summarise`): a row per model with its
            ``best_lr`` and whether it is ``settled``.
        results: its finished runs (:class:`~sigprop.experiments.runner.RunResult`).
        runs_dir: not read (the runs' losses are in ``results``); the evaluations' common signature.
        out: not read.
        say: not used.

    Returns:
        ``rules``, and ``rows``: per row of :data:`~sigprop.experiments.budget.ROW_KEYS`, its models (None where a
        model has not run), whether all four models it is read with are settled (``final``), its ``gap``, its
        ``change`` against the pair's gap (None for the pair) and its ``reading``.

    Example:
        >>> table = evaluate_budget({"rows": []}, [])
        >>> [(r["key"], r["reading"]) for r in table["rows"]][:2]
        [('pair', None), ('a', 'not read (tuning not finished)')]
    """
    rows = {row["model"]: row for row in summary["rows"]}
    names: dict[str, dict[Role, str]] = {}
    for name in rows:
        known = budget_model(name)
        if known is not None:
            names.setdefault(known[0], {})[known[1]] = name
    records = []
    for key, label, _ in ROW_KEYS:
        models, losses = {}, {}
        for role in (Role.SHALLOW_WIDE, Role.DEEP_THIN):
            name = names.get(key, {}).get(role)
            row = rows.get(name) if name is not None else None
            losses[role] = seed_losses(results, name, row["best_lr"]) if row and row["best_lr"] is not None else {}
            models[role.value] = _model_record(name, row, losses[role])
        settled = all(m is not None and m["settled"] for m in models.values())
        gap = paired_gap(losses[Role.DEEP_THIN], losses[Role.SHALLOW_WIDE])
        records.append({"key": key, "label": label, "models": models, "settled": settled, "final": settled,
                        "gap": _gap_record(gap), "change": None, "reading": None})
    pair = records[0]
    for r in records[1:]:
        r["final"] = r["settled"] and pair["settled"]
        if r["gap"] is not None and pair["gap"] is not None:
            r["change"] = _gap_record(paired_gap(_by_seed(r["gap"]), _by_seed(pair["gap"])))
        r["reading"] = read_row(r, pair)
    return {"rules": RULES, "rows": records, "not_pooled": summary.get("not_pooled", [])}


def _interval(gap: dict | None) -> str:
    if gap is None:
        return "–"
    if gap["se"] is None:
        return f"{gap['mean']:+.3f} (1 seed)"
    return f"{gap['mean']:+.3f} [{gap['low']:+.3f}, {gap['high']:+.3f}] ({gap['dof']} dof)"


def budget_markdown(table: dict, title: str, intro: str) -> str:
    """The rows' table as markdown.

    Args:
        table: :func:`evaluate_budget`'s table.
        title: the page's heading.
        intro: the paragraph under it.

    Returns:
        The page.
    """
    lines = [f"# {title}: the rows", "", intro, "", f"Rules (fixed before the runs): {table['rules']}", "",
             "| row | best rates (wide / deep-thin) | Δ per seed | Δ mean [95% t interval] | row − pair "
             "[95% t interval] | reading |", "|---|---|---|---|---|---|"]
    for r in table["rows"]:
        rates = " / ".join("–" if (m := r["models"].get(role.value)) is None or m["best_lr"] is None else
                           f"{m['best_lr']:g}" + (" (edge)" if m["best_lr_at_edge"] else "")
                           for role in (Role.SHALLOW_WIDE, Role.DEEP_THIN))
        per_seed = "–" if r["gap"] is None else ", ".join(f"s{s}: {d:+.3f}" for s, d in _by_seed(r["gap"]).items())
        state = "" if r["settled"] else f" (provisional: {unsettled_reason(_models(r))})" if r["gap"] else " (not run)"
        lines.append(f"| {r['label']} | {rates} | {per_seed} | {_interval(r['gap'])}{state} | "
                     f"{_interval(r['change'])} | {r['reading'] or '(the reference)'} |")
    if table.get("not_pooled"):
        lines += ["", "Runs left out (trained on other data):", *[f"- {why}" for why in table["not_pooled"]]]
    return "\n".join(lines) + "\n"


def budget_figure(table: dict, path: Path, title: str) -> Path:
    """Each row's Δ: its seeds as dots, the mean with its 95% interval, the pair's interval as a band; a row whose
    models are still tuning drawn hollow, a row not run yet named and left empty.

    Args:
        table: :func:`evaluate_budget`'s table.
        path: the PNG to write.
        title: the figure's title.

    Returns:
        ``path``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(reversed(table["rows"]))
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.6 * len(rows)))
    for y, r in enumerate(rows):
        gap = r["gap"]
        if gap is None:
            continue
        ax.plot(gap["differences"], [y] * len(gap["differences"]), "o", ms=3, color="0.55")
        err = None if gap["low"] is None else [[gap["mean"] - gap["low"]], [gap["high"] - gap["mean"]]]
        ax.errorbar([gap["mean"]], [y], xerr=err, fmt="D", color="C0", capsize=3,
                    mfc="C0" if r["settled"] else "white")
        if r["key"] == "pair" and gap["low"] is not None:
            ax.axvspan(gap["low"], gap["high"], color="C0", alpha=0.1, lw=0, label="the pair's 95% interval")
    ax.axvline(0.0, color="0.4", lw=1)
    ax.set_yticks(range(len(rows)), [r["label"] + ("" if r["settled"] else " (provisional)" if r["gap"] else
                                                   " (not run)") for r in rows], fontsize=7)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set(xlabel="Δ = loss(8 × 64 DSLM) − loss(2 × 128 Xavier), nats (dots: seeds; bar: 95% t interval)",
           title=title)
    finish_axes(ax)
    return save_figure(fig, path, dpi=110, crop=True)


def write_budget(table: dict, out: Path, title: str, intro: str) -> tuple[Path, ...]:
    """``rows.json``, ``rows.md`` and ``rows.png`` in ``out`` (beside the experiment's own table).

    Args:
        table: :func:`evaluate_budget`'s table.
        out: the experiment's folder.
        title: the page's and the figure's title.
        intro: the paragraph under the page's heading.

    Returns:
        The three paths.
    """
    return write_evaluation(out, ("rows.json", "rows.md", "rows.png"), table,
                            budget_markdown(table, title, intro), lambda path: budget_figure(table, path, title))
