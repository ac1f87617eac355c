"""Figure of a verification report: per component and quantity, our error percentiles beside the paper's."""

from __future__ import annotations

import os
from pathlib import Path

from ..core.figures import pyplot, save_figure

__all__ = ["plot_report"]


def plot_report(report_json: dict, path: str | os.PathLike, title: str | None = None) -> Path:
    """Write a PNG: one row per (component, quantity), the 50th–99th percentile error as a bar with the median
    marked, the paper's Table 21 figures as hollow markers where it has them, and the Monte Carlo noise (p50) as a
    grey tick. Log x-axis in percent; the 1% and 5% targets as dashed lines."""
    plt = pyplot()

    rows = [(name, q, s) for name, summary in report_json["components"].items() for q, s in summary.items()]
    fig, ax = plt.subplots(figsize=(8.5, 0.22 * len(rows) + 1.4))
    floor = 1e-3
    for i, (_, _, s) in enumerate(rows):
        y = len(rows) - 1 - i
        lo, mid, hi = (max(s[k], floor) for k in ("p50", "p90", "p99"))
        ax.plot([lo, hi], [y, y], color="tab:blue", lw=4, solid_capstyle="butt", alpha=0.6)
        ax.plot([lo], [y], "o", color="tab:blue", ms=4)
        ax.plot([mid], [y], "|", color="tab:blue", ms=8)
        ax.plot([max(s["noise_p50"], floor)], [y], "|", color="0.55", ms=6)
        if "paper" in s:
            p50, _, p99 = (max(v, floor) for v in s["paper"])
            ax.plot([p50, p99], [y, y], "o", mfc="none", color="tab:red", ms=4)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{name} · {q}" for name, q, _ in reversed(rows)], fontsize=7)
    ax.set_xscale("log")
    ax.set_xlim(floor, 100)
    for target in (1.0, 5.0):
        ax.axvline(target, ls="--", lw=0.8, color="0.4")
    ax.set_xlabel("error (%): bar = sigprop p50–p99 (tick p90), grey tick = Monte Carlo noise p50, "
                  "red circles = paper Table 21 p50 and p99", fontsize=7)
    ax.set_title(title or "Moment rules vs Monte Carlo on the real module", fontsize=9)
    ax.grid(axis="x", which="both", lw=0.3, alpha=0.5)
    return save_figure(fig, path, dpi=130)
