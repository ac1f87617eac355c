"""The shape ladder's own table: per rung the paired gaps Δ (deep-thin, the control and the 32-layer model, each
against shallow-wide) with their t intervals, the trend of Δ against log P and its crossover, and the verdict
by the rules fixed before the runs (:data:`RULES`); ``ladder.json``, ``ladder.md`` and ``ladder.png``.

Each model's runs at its best rate are the seeds (every seed that trained); a gap pairs the seeds both models have.
A gap is final only when both models are settled (their rate search and seeds finished:
:func:`~sigprop.experiments.summary.settled`); before that it is shown as provisional and neither the verdict nor
the trend reads it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..core.figures import save_figure
from ..core.jsonio import finite_or_null
from .ladder import Role, ladder_model
from .ladder_stats import IntervalKind, PairedGap, Trend, fit_trend, paired_gap
from .summary import Standing, finish_axes, unsettled_reason, write_evaluation

__all__ = ["RULES", "evaluate_ladder", "write_ladder", "judge"]

#: The rules by which the ladder is read, fixed before its runs.
RULES = ("Deep-thin wins at a rung only if the paired 95% interval of Δ = loss(8 × d/2 DSLM) − loss(2 × d Xavier) "
         "lies below 0; shallow-wide wins only if it lies above 0; otherwise the rung does not decide. The paper's "
         "claim (deep-thin DSLM better at equal N·d²) is 'reproduced at ≥ P' when deep-thin wins at the rung of P and "
         "at every larger rung run; 'not reproduced up to P' when it wins at no rung, P the largest rung run; "
         "otherwise 'mixed'. Beside it, the least-squares trend of Δ against log₁₀ P (each rung's mean weighted by "
         "its seeds, the seeds' variance pooled over the rungs and inflated by the scatter about the line when "
         "larger; first written with weights 1/se², changed before the GPU rungs when that was found to under-cover) "
         "'points to a crossover near P* (Fieller 95% interval)' when its slope is negative and the interval is "
         "bounded, and does not locate one otherwise.")

#: The gaps of a rung: role compared with shallow-wide.
_COMPARED = (Role.DEEP_THIN, Role.CONTROL, Role.DEEPER)


def _losses_at_best(summary: dict, results) -> dict[str, dict[int, float]]:
    best = {row["model"]: row["best_lr"] for row in summary["rows"]}
    losses: dict[str, dict[int, float]] = {}
    for r in results:
        if r.fate == "trained" and r.final_val is not None and best.get(r.model_name) == r.lr:
            losses.setdefault(r.model_name, {})[r.seed] = r.final_val
    return losses


def _training_tokens(runs_dir) -> int | None:
    """The training tokens of the corpus, from the first run record in ``runs_dir`` that has them."""
    for run in sorted(Path(runs_dir).glob("*/run.json")):
        if run.parent.name.startswith("."):  # a run set aside (trained on other data) or a copy interrupted
            continue
        try:
            tokens = json.loads(run.read_text(encoding="utf-8"))["data"]["train_tokens"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(tokens, int) and tokens > 0:
            return tokens
    return None


def _gap_record(gap: PairedGap | None, final: bool, unread: str | None = None) -> dict | None:
    if gap is None:
        return None
    return {**gap.to_dict(), "final": final, "unread": None if final else unread or Standing.TUNING.value,
            "decides": "deep side wins" if gap.below_zero else "shallow-wide wins" if gap.above_zero else "undecided"}


def _final(gap: dict | None) -> bool:
    """Whether a gap record has an interval and both its models are settled (records without the flag: final)."""
    return gap is not None and gap["se"] is not None and gap.get("final", True)


def _trend_record(trend: Trend | None) -> dict | None:
    if trend is None:
        return None
    return {"rungs": trend.k, "intercept": trend.intercept, "slope_per_decade": trend.slope,
            "cov": [list(row) for row in trend.cov], "chi2": trend.chi2, "inflation": trend.inflation,
            "dof": trend.dof, "t": trend.t, "crossover_log10_p": trend.crossover,
            "crossover_p": (10 ** trend.crossover if trend.crossover is not None and abs(trend.crossover) < 300
                            else None),
            "interval": trend.kind.value, "interval_log10_p": [trend.low, trend.high],
            "method": "least squares on log10 P, each rung's mean weighted by its seeds, the seeds' variance pooled "
                      "over the rungs; crossover interval by Fieller's method"}


def _fitted(rungs: list[dict], key: str) -> list[dict]:
    """The rungs a trend of ``key``'s gap is fitted to: those whose gap is final, with a standard error."""
    return [r for r in rungs if _final(r.get(key)) and r[key]["se"] > 0]


def _trend_of(rungs: list[dict], key: str) -> Trend | None:
    fitted = _fitted(rungs, key)
    if len(fitted) < 3:
        return None
    return fit_trend([math.log10(r["parameters"]) for r in fitted], [r[key]["differences"] for r in fitted])


def judge(rungs: list[dict], trend: Trend | None) -> str:
    """The verdict on the paper's claim by :data:`RULES` from the rungs' deep-thin gaps and the trend.

    Args:
        rungs: the rung records of :func:`evaluate_ladder` (``d``, ``parameters``, ``deep-thin``).
        trend: the deep-thin trend (None: fewer than three rungs with an interval).

    Returns:
        One paragraph.
    """
    decided = [r for r in rungs if _final(r.get("deep-thin"))]
    unread = [r for r in rungs if r.get("deep-thin") is not None and not _final(r["deep-thin"])]
    why = "".join(f" d = {r['d']} ran but is not read ({r['deep-thin'].get('unread') or _no_interval(r)})."
                  for r in unread)
    if not decided:
        return ("No rung is finished yet (a rung decides once both models' rate searches and seeds are done); the "
                "gaps in the table are provisional." + why)
    wins = [r for r in decided if r["deep-thin"]["decides"] == "deep side wins"]
    first = next((r for i, r in enumerate(decided)
                  if all(x["deep-thin"]["decides"] == "deep side wins" for x in decided[i:])), None)
    if first is not None and any(r["d"] > first["d"] for r in unread):  # a larger rung ran: it may not be a win
        text = (f"Deep-thin wins at every rung read from {first['parameters']:,} non-embedding parameters (d = "
                f"{first['d']}) on, but a larger rung is not read: not yet 'reproduced'.")
    elif first is not None:  # the smallest rung from which deep-thin wins at every larger rung run
        text = f"Reproduced at ≥ {first['parameters']:,} non-embedding parameters (d = {first['d']})."
    elif not wins:
        top = decided[-1]
        text = f"Not reproduced up to {top['parameters']:,} non-embedding parameters (d = {top['d']})."
    else:
        text = ("Mixed: deep-thin wins at d = " + ", ".join(str(r["d"]) for r in wins) + " but not at every larger "
                "rung run.")
    text += why
    if trend is None:
        return text + " Fewer than three rungs with an interval: no trend."
    if trend.kind is IntervalKind.BOUNDED and trend.crossover is not None:
        fitted = [math.log10(r["parameters"]) for r in _fitted(rungs, "deep-thin")]
        where = ("beyond the largest rung fitted: an extrapolation" if trend.crossover > max(fitted) else
                 "below the smallest rung fitted: an extrapolation" if trend.crossover < min(fitted) else
                 "within the rungs fitted")
        at = (f"P* = {_power(trend.crossover)} (Fieller 95% interval {_power(trend.low)} – {_power(trend.high)}; "
              f"{where})")
        if trend.slope < 0:
            return text + (f" The trend points to a crossover near {at}; Δ changes by {trend.slope:+.3f} nats per "
                           "decade of P.")
        return text + (f" The trend points away from a crossover: Δ grows by {trend.slope:+.3f} nats per decade "
                       f"of P, so deep-thin would be ahead only below its zero, near {at}.")
    return text + (f" The trend does not locate a crossover: its slope, {trend.slope:+.3f} nats per decade of P, is "
                   f"not distinguishable from zero at 95% (Fieller's interval is {trend.kind.value}).")


def _no_interval(rung: dict) -> str:
    """Why a settled rung's gap has no interval: one paired seed, or differences with no spread."""
    return "one paired seed" if len(rung["deep-thin"].get("differences", ())) < 2 else "its differences do not vary"


def _power(log10_p: float) -> str:
    """10^x in three significant digits, as a power of ten where it would overflow a float."""
    return f"{10 ** log10_p:.3g}" if abs(log10_p) < 300 else f"10^{log10_p:.0f}"


def evaluate_ladder(summary: dict, results, runs_dir, out, say=print) -> dict:
    """The ladder's table of an experiment's ``summary`` and ``results`` (module docstring); ``runs_dir``: the
    folder of its runs (the corpus's size is read from a run record there)."""
    losses = _losses_at_best(summary, results)
    rows = {row["model"]: row for row in summary["rows"]}
    by_rung: dict[int, dict[Role, str]] = {}
    for name in rows:
        model = ladder_model(name)
        if model is not None:
            by_rung.setdefault(model.rung, {})[model.role] = name
    corpus_tokens = _training_tokens(runs_dir)
    rungs = []
    for d in sorted(by_rung):
        names = by_rung[d]
        wide = names.get(Role.SHALLOW_WIDE)
        if wide is None:
            continue
        row = rows[wide]
        record = {"d": d, "parameters": row["non_embedding_parameters"], "tokens_per_run": row["tokens_per_run"],
                  "tokens_per_parameter": row["tokens_per_parameter"],
                  "passes": row["tokens_per_run"] / corpus_tokens if corpus_tokens else None,
                  "models": {role.value: {"model": name, "best_lr": rows[name]["best_lr"],
                                          "best_lr_at_edge": rows[name].get("best_lr_at_edge", False),
                                          "losses": {str(s): v for s, v in sorted(losses.get(name, {}).items())}}
                             for role, name in names.items()}}
        for role in _COMPARED:
            if role in names:
                pair = (row, rows[names[role]])
                final = all(r.get("settled", True) for r in pair)
                record[role.value] = _gap_record(paired_gap(losses.get(names[role], {}), losses.get(wide, {})),
                                                 final, None if final else unsettled_reason(pair))
        rungs.append(record)
    trend = _trend_of(rungs, Role.DEEP_THIN.value)
    control = _trend_of(rungs, Role.CONTROL.value)
    return finite_or_null({"rules": RULES, "rungs": rungs, "trend": _trend_record(trend),
                           "control_trend": _trend_record(control), "corpus_training_tokens": corpus_tokens,
                           "verdict": judge(rungs, trend), "not_pooled": summary.get("not_pooled", [])})


def _cell(gap: dict | None) -> str:
    if gap is None:
        return "–"
    provisional = "" if gap.get("final", True) else f" (provisional: {gap.get('unread') or Standing.TUNING.value})"
    if gap["se"] is None:
        return f"{gap['mean']:+.3f} (1 seed){provisional}"
    decides = gap["decides"] if not provisional else "not judged"
    return f"{gap['mean']:+.3f} [{gap['low']:+.3f}, {gap['high']:+.3f}], {gap['dof']} dof: {decides}{provisional}"


def ladder_markdown(table: dict, title: str, intro: str) -> str:
    """The ladder's table as markdown."""
    lines = [f"# {title}: the ladder", "", intro, "", f"Rules (fixed before the runs): {table['rules']}", "",
             f"**Verdict:** {table['verdict']}", "",
             "| d | non-emb. params | tokens / param | corpus passes | best rates (wide / deep-thin / control / "
             "32-layer) | Δ deep-thin − wide, mean [95% CI] | Δ control − wide | Δ 32-layer − wide |",
             "|---:|---:|---:|---:|---|---|---|---|"]
    for r in table["rungs"]:
        rates = " / ".join("–" if (m := r["models"].get(role.value)) is None or m["best_lr"] is None else
                           f"{m['best_lr']:g}" + (" (edge)" if m["best_lr_at_edge"] else "")
                           for role in (Role.SHALLOW_WIDE, *_COMPARED))
        passes = "–" if r["passes"] is None else f"{r['passes']:.2f}"
        lines.append(f"| {r['d']} | {r['parameters']:,} | {r['tokens_per_parameter']:.1f} | {passes} | {rates} | "
                     f"{_cell(r.get('deep-thin'))} | {_cell(r.get('control'))} | {_cell(r.get('deeper'))} |")
    lines += ["", "Per-seed differences (deep-thin − wide): " + "; ".join(
        f"d = {r['d']}: " + ", ".join(f"{x:+.3f}" for x in r["deep-thin"]["differences"])
        for r in table["rungs"] if r.get("deep-thin") is not None)]
    for key, label in (("trend", "deep-thin"), ("control_trend", "control")):
        t = table.get(key)
        if t is None:
            lines += ["", f"Trend ({label}): fewer than three rungs with an interval."]
            continue
        low, high = t["interval_log10_p"]
        at = "P* = –" if t["crossover_log10_p"] is None else f"P* = {_power(t['crossover_log10_p'])}"
        where = (f"{at}, Fieller interval log₁₀ P ∈ [{low:.2f}, {high:.2f}]"
                 if t["interval"] == IntervalKind.BOUNDED.value else
                 f"{at}, Fieller interval log₁₀ P ∈ (−∞, {low:.2f}] ∪ [{high:.2f}, ∞) (two half-lines)"
                 if t["interval"] == IntervalKind.TWO_HALF_LINES.value else
                 f"Fieller interval: {t['interval']}")
        lines += ["", f"Trend ({label}): Δ = {t['intercept']:+.3f} {t['slope_per_decade']:+.3f}·log₁₀ P over "
                      f"{t['rungs']} rungs ({t['dof']} dof, χ² {t['chi2']:.2f}, se × {math.sqrt(t['inflation']):.2f}); "
                      f"zero at {where}."]
    if table.get("not_pooled"):
        lines += ["", "Runs left out (trained on other data):", *[f"- {why}" for why in table["not_pooled"]]]
    return "\n".join(lines) + "\n"


def ladder_figure(table: dict, path: Path, title: str) -> Path:
    """Δ(P) per rung with its 95% interval, deep-thin, control and 32-layer, and the deep-thin trend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (role, label) in enumerate(((Role.DEEP_THIN, "deep-thin DSLM (8 × d/2)"),
                                       (Role.CONTROL, "control Xavier (8 × d/2)"),
                                       (Role.DEEPER, "deeper DSLM (32 × d/4)"))):
        pts = [(r["parameters"], r[role.value]) for r in table["rungs"] if r.get(role.value) is not None]
        if not pts:
            continue
        for final in (True, False):  # a gap whose models are still tuning: hollow, and said in the legend
            some = [(x, g) for x, g in pts if _final(g) == final]
            if not some:
                continue
            p = np.array([x for x, _ in some], dtype=np.float64) * (1.0 + 0.03 * (i - 1))  # side by side
            mean = np.array([g["mean"] for _, g in some])
            low = np.array([g["mean"] - g["low"] if g["low"] is not None else 0.0 for _, g in some])
            high = np.array([g["high"] - g["mean"] if g["high"] is not None else 0.0 for _, g in some])
            ax.errorbar(p, mean, yerr=[low, high], fmt="os^"[i], color=f"C{i}", capsize=3,
                        mfc=None if final else "white", label=label if final else f"{label}, provisional")
    trend = table.get("trend")
    if trend is not None:
        _draw_trend(ax, trend, [r["parameters"] for r in _fitted(table["rungs"], Role.DEEP_THIN.value)])
    ax.axhline(0.0, color="0.4", lw=1)
    ax.set_xscale("log")
    ax.set(xlabel="non-embedding parameters P", ylabel="Δ final validation loss vs 2 × d Xavier (nats)",
           title=title)
    finish_axes(ax, "no rung finished yet")
    return save_figure(fig, path, dpi=110, crop=True)


def _draw_trend(ax, trend: dict, fitted: list[int]) -> None:
    """The deep-thin trend over the rungs it was fitted to (a little beyond, and on to its crossover when Fieller's
    interval is bounded), with the line's 95% interval as a band (t on the trend's degrees of freedom: wide on few
    rungs), and the crossover with its interval. The axis keeps the rungs' points in view: a wider band is cut."""
    bottom, top = ax.get_ylim()
    logs = np.log10(np.asarray(fitted, dtype=np.float64))
    right = logs.max() + 0.3
    if trend["interval"] == "bounded" and trend["crossover_log10_p"] is not None:
        right = max(right, trend["crossover_log10_p"] + 0.1)
    xs = np.linspace(logs.min() - 0.1, right, 100)
    line = trend["intercept"] + trend["slope_per_decade"] * xs
    cov = np.asarray(trend["cov"], dtype=np.float64)
    half = trend["t"] * np.sqrt(np.maximum(cov[0, 0] + 2 * xs * cov[0, 1] + xs ** 2 * cov[1, 1], 0.0))
    ax.plot(10 ** xs, line, "--", color="C0", lw=1, label="deep-thin trend (least squares)")
    ax.fill_between(10 ** xs, line - half, line + half, color="C0", alpha=0.12, lw=0,
                    label=f"the trend's 95% band ({trend['dof']} dof)")
    if trend["interval"] == "bounded" and trend["crossover_p"] is not None:
        lo, hi = trend["interval_log10_p"]
        ax.errorbar([trend["crossover_p"]], [0.0], xerr=[[trend["crossover_p"] - 10 ** lo],
                                                          [10 ** hi - trend["crossover_p"]]],
                    fmt="D", color="C0", mfc="white", capsize=3, label="crossover (Fieller 95%)")
    pad = 0.15 * (top - bottom)
    ax.set_ylim(min(bottom, float(line.min()), 0.0) - pad, max(top, float(line.max()), 0.0) + pad)


def write_ladder(table: dict, out, title: str, intro: str) -> tuple[Path, ...]:
    """``ladder.json``, ``ladder.md`` and ``ladder.png`` in ``out`` (beside the experiment's own table)."""
    return write_evaluation(out, ("ladder.json", "ladder.md", "ladder.png"), table,
                            ladder_markdown(table, title, intro), lambda path: ladder_figure(table, path, title))
