"""Readable rendering of a verification report (a rich table)."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

__all__ = ["render_table", "markdown_table", "meets_targets", "TARGET_P50", "TARGET_P99"]

#: Acceptance targets for the component rules (percent): median and 99th-percentile error.
TARGET_P50, TARGET_P99 = 1.0, 5.0


def meets_targets(report_json: dict, p50: float = TARGET_P50, p99: float = TARGET_P99) -> bool:
    """Whether every component and quantity of a report's JSON has its median error ≤ ``p50`` and its 99th percentile
    ≤ ``p99`` (percent), and no configuration whose error is not finite (a NaN rule or measurement)."""
    return all(s["p50"] <= p50 and s["p99"] <= p99 and not s.get("not_finite", 0)
               for summary in report_json["components"].values() for s in summary.values())


def _configs(summary: dict) -> str:
    """The configurations judged, and those whose error is not finite (they fail the targets)."""
    bad = summary.get("not_finite", 0)
    return f"{summary['n_configs']}" + (f" ({bad} not finite)" if bad else "")


def _fmt(v: float, limit: float | None = None) -> str:
    s = f"{v:.2f}" if v < 100 else f"{v:.3g}"
    return f"[red]{s}[/red]" if limit is not None and v > limit else s


def render_table(report, target_p50: float, target_p99: float) -> Table:
    """One row per component and quantity: error percentiles (red beyond the targets), the paper's Table 21
    figures, and the Monte Carlo noise (one standard error, percentiles over configurations)."""
    table = Table(title="Component rules vs Monte Carlo on the real module (errors in %)")
    for col in ("component", "quantity", "p50", "p90", "p99", "paper p50/p90/p99", "noise p50/p99", "configs"):
        table.add_column(col, justify="left" if col in ("component", "quantity") else "right")
    for name, summary in report.to_json()["components"].items():
        first = True
        for q, s in summary.items():
            paper = "/".join(f"{v:g}" for v in s["paper"]) if "paper" in s else "—"
            table.add_row(escape(name) if first else "", q, _fmt(s["p50"], target_p50), _fmt(s["p90"]),
                          _fmt(s["p99"], target_p99), paper, f"{s['noise_p50']:.2f}/{s['noise_p99']:.2f}",
                          _configs(s))
            first = False
        table.add_section()
    return table


def markdown_table(report_json: dict) -> str:
    """The README's accuracy table from a report's JSON: one row per component and quantity."""
    lines = ["| component | quantity | p50 | p90 | p99 | paper (Table 21) | noise p50/p99 | > 3 SE | configs |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, summary in report_json["components"].items():
        for q, s in summary.items():
            paper = " / ".join(f"{v:g}" for v in s["paper"]) if "paper" in s else "—"
            lines.append(f"| {name} | {q} | {s['p50']:.2f} | {s['p90']:.2f} | {s['p99']:.2f} | {paper} | "
                         f"{s['noise_p50']:.2f} / {s['noise_p99']:.2f} | {100 * s['beyond_3se']:.1f}% | "
                         f"{_configs(s)} |")
    return "\n".join(lines)
