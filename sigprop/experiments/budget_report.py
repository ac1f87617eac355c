"""`depth-budget`'s own table: per row the paired gap Δ = loss(8 × 64 DSLM) − loss(2 × 128 Xavier), each model at
its own best rate, with its t interval; the row's change of the gap against the pair's, paired by seed; and the
reading by the rules fixed before the runs (:data:`RULES`). ``rows.json``, ``rows.md`` and ``rows.png``.

A gap is final only when both its models are settled (:func:`~sigprop.experiments.summary.settled`); before that it
is provisional and the row is not read.
"""

from __future__ import annotations

from pathlib import Path

from ..core.figures import save_figure
from .budget import BudgetRow, budget_model
from .ladder import Role
from .ladder_stats import PairedGap, paired_gap
from .summary import finish_axes, seed_losses, write_evaluation

__all__ = ["RULES", "evaluate_budget", "read_row", "write_budget"]

#: The rules by which the rows are read, fixed before their runs.
RULES = ("Δ = loss(8 × 64 DSLM) − loss(2 × 128 Xavier), each at its own best rate, paired by seed, with Student's t "
         "95% interval on n − 1 degrees of freedom. A row flips the sign where its interval lies below 0 (deep-thin "
         "ahead) while the pair's does not; it narrows the gap where its Δ is below the pair's at every seed both "
         "have; otherwise it leaves the gap as it is. A row is read only when its models and the pair's are settled "
         "(rate searches and seeds finished).")


def _gap_record(gap: PairedGap | None) -> dict | None:
    if gap is None:
        return None
    return {"seeds": list(gap.seeds), "differences": list(gap.differences), "mean": gap.mean, "se": gap.se,
            "dof": gap.dof, "low": gap.low, "high": gap.high, "level": gap.level}


def read_row(row: dict, pair: dict) -> str:
    """A row's reading by :data:`RULES` against the pair.

    Args:
        row: a row record of :func:`evaluate_budget` (``final``, ``gap``).
        pair: the pair's record.

    Returns:
        ``flips the sign``, ``narrows the gap``, ``leaves the gap`` or ``not read (…)``.

    Example:
        >>> gap = lambda *d: {"differences": list(d), "seeds": list(range(len(d))), "high": max(d) + 0.05}
        >>> read_row({"final": True, "gap": gap(0.1, 0.12, 0.08)}, {"final": True, "gap": gap(0.2, 0.2, 0.2)})
        'narrows the gap'
    """
    if not (row["final"] and pair["final"]):
        return "not read (tuning not finished)"
    gap, base = row["gap"], pair["gap"]
    if gap is None or base is None or gap.get("high") is None:
        return "not read (fewer than two paired seeds)"
    if gap["high"] < 0 and not (base.get("high") is not None and base["high"] < 0):
        return "flips the sign"
    mine = dict(zip(gap["seeds"], gap["differences"], strict=True))
    theirs = dict(zip(base["seeds"], base["differences"], strict=True))
    shared = sorted(set(mine) & set(theirs))
    if shared and all(mine[s] < theirs[s] for s in shared):
        return "narrows the gap"
    return "leaves the gap"


def evaluate_budget(summary: dict, results, runs_dir, out, say=print) -> dict:
    """The rows' table of `depth-budget`'s ``summary`` and ``results`` (module docstring; ``runs_dir`` and ``out``
    are not read: the runs' losses are in ``results``)."""
    rows = {row["model"]: row for row in summary["rows"]}
    losses = {name: seed_losses(results, name, row["best_lr"]) if row["best_lr"] is not None else {}
              for name, row in rows.items()}
    by_row: dict[str, tuple[BudgetRow, dict[Role, str]]] = {}
    for name in rows:
        known = budget_model(name)
        if known is not None:
            budget_row, role = known
            by_row.setdefault(budget_row.key, (budget_row, {}))[1][role] = name
    records = []
    for budget_row, names in by_row.values():
        wide, deep = names.get(Role.SHALLOW_WIDE), names.get(Role.DEEP_THIN)
        if wide is None or deep is None:
            continue
        models = {role.value: {"model": name, "best_lr": rows[name]["best_lr"],
                               "best_lr_at_edge": rows[name].get("best_lr_at_edge", False),
                               "settled": rows[name].get("settled", True),
                               "losses": {str(s): v for s, v in losses[name].items()}}
                  for role, name in names.items()}
        gap = paired_gap(losses[deep], losses[wide])
        records.append({"key": budget_row.key, "label": budget_row.label, "train": budget_row.train,
                        "models": models, "final": all(m["settled"] for m in models.values()),
                        "gap": _gap_record(gap)})
    pair = next((r for r in records if r["key"] == "pair"), None)
    for r in records:
        if pair is None or r is pair:
            r["change"], r["reading"] = None, None if pair is not None else "not read (the pair has not run)"
            continue
        r["reading"] = read_row(r, pair)
        mine, theirs = r["gap"], pair["gap"]
        if mine is not None and theirs is not None:  # the row's gap minus the pair's, paired by seed
            change = paired_gap(dict(zip(mine["seeds"], mine["differences"], strict=True)),
                                dict(zip(theirs["seeds"], theirs["differences"], strict=True)))
            r["change"] = _gap_record(change)
        else:
            r["change"] = None
    return {"rules": RULES, "rows": records, "not_pooled": summary.get("not_pooled", [])}


def _interval(gap: dict | None) -> str:
    if gap is None:
        return "–"
    if gap["se"] is None:
        return f"{gap['mean']:+.3f} (1 seed)"
    return f"{gap['mean']:+.3f} [{gap['low']:+.3f}, {gap['high']:+.3f}] ({gap['dof']} dof)"


def budget_markdown(table: dict, title: str, intro: str) -> str:
    """The rows' table as markdown."""
    lines = [f"# {title}: the rows", "", intro, "", f"Rules (fixed before the runs): {table['rules']}", "",
             "| row | best rates (wide / deep-thin) | Δ per seed | Δ mean [95% t interval] | row − pair "
             "[95% t interval] | reading |", "|---|---|---|---|---|---|"]
    for r in table["rows"]:
        rates = " / ".join("–" if (m := r["models"].get(role.value)) is None or m["best_lr"] is None else
                           f"{m['best_lr']:g}" + (" (edge)" if m["best_lr_at_edge"] else "")
                           for role in (Role.SHALLOW_WIDE, Role.DEEP_THIN))
        per_seed = "–" if r["gap"] is None else ", ".join(
            f"s{s}: {d:+.3f}" for s, d in zip(r["gap"]["seeds"], r["gap"]["differences"], strict=True))
        state = "" if r["final"] else " (provisional: tuning not finished)"
        lines.append(f"| {r['label']} | {rates} | {per_seed} | {_interval(r['gap'])}{state} | "
                     f"{_interval(r['change'])} | {r['reading'] or '(the reference)'} |")
    if table.get("not_pooled"):
        lines += ["", "Runs left out (trained on other data):", *[f"- {why}" for why in table["not_pooled"]]]
    return "\n".join(lines) + "\n"


def budget_figure(table: dict, path: Path, title: str) -> Path:
    """Each row's Δ: its seeds as dots, the mean with its 95% interval, the pair's interval as a band; a row whose
    models are still tuning drawn hollow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in table["rows"] if r["gap"] is not None]
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.7 * max(len(rows), 1)))
    for y, r in enumerate(reversed(rows)):
        gap = r["gap"]
        ax.plot(gap["differences"], [y] * len(gap["differences"]), "o", ms=3, color="0.55")
        err = None if gap["low"] is None else [[gap["mean"] - gap["low"]], [gap["high"] - gap["mean"]]]
        ax.errorbar([gap["mean"]], [y], xerr=err, fmt="D", color="C0", capsize=3,
                    mfc="C0" if r["final"] else "white")
        if r["key"] == "pair" and gap["low"] is not None:
            ax.axvspan(gap["low"], gap["high"], color="C0", alpha=0.1, lw=0, label="the pair's 95% interval")
    ax.axvline(0.0, color="0.4", lw=1)
    ax.set_yticks(range(len(rows)), [r["label"] + ("" if r["final"] else " (provisional)") for r in reversed(rows)],
                  fontsize=7)
    ax.set(xlabel="Δ = loss(8 × 64 DSLM) − loss(2 × 128 Xavier), nats (dots: seeds; bar: 95% t interval)",
           title=title)
    finish_axes(ax, "no row has run yet")
    return save_figure(fig, path, dpi=110, crop=True)


def write_budget(table: dict, out, title: str, intro: str) -> tuple[Path, ...]:
    """``rows.json``, ``rows.md`` and ``rows.png`` in ``out`` (beside the experiment's own table)."""
    return write_evaluation(out, ("rows.json", "rows.md", "rows.png"), table,
                            budget_markdown(table, title, intro), lambda path: budget_figure(table, path, title))
