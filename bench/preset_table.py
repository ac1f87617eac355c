"""The README's whole-model accuracy table from the comparison JSONs in docs/results/ (one row per preset; an
encoder-decoder gets one row per stack, split at ``config.n_layers``).

    python bench/preset_table.py --docs docs/results
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sigprop.analysis.comparison import summarise
from sigprop.model.presets import PRESETS


def cell(s, key="median_rel"):
    v = s.get(key)
    return "n/a" if v is None else f"{100 * v:.2f}%"


def r2(s):
    v = s.get("r2")
    return "n/a (constant)" if v is None else f"{v:.4f}" + (" (log)" if s.get("r2_log") else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default="docs/results")
    args = ap.parse_args()
    lines = ["| preset | fwd var: median / p90 rel. err, R² | grad var: median / p90 rel. err, R² | "
             "fwd corr: max abs err | grad corr: median rel. err | seeds |", "|---|---|---|---:|---:|---:|"]
    for name in PRESETS:
        path = Path(args.docs) / f"compare-{name}.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        seeds = len(data["measured_meta"].get("seeds", []))
        n_enc = data["config"]["n_layers"]
        parts = [("", data["per_layer"])]
        if data["config"].get("arch") == "encoder_decoder":
            parts = [(" encoder", [r for r in data["per_layer"] if r["layer"] < n_enc]),
                     (" decoder", [r for r in data["per_layer"] if r["layer"] >= n_enc])]
        for label, rows in parts:  # summaries recomputed from the rows, so every row uses today's definitions
            s = {q: summarise(q, [r[f"pred_{q}"] for r in rows], [r[f"meas_{q}"] for r in rows]).to_dict()
                 for q in ("fwd_var", "grad_var", "fwd_corr", "grad_corr")}
            lines.append(f"| `{name}`{label} | {cell(s['fwd_var'])} / {cell(s['fwd_var'], 'p90_rel')}, "
                         f"{r2(s['fwd_var'])} | {cell(s['grad_var'])} / {cell(s['grad_var'], 'p90_rel')}, "
                         f"{r2(s['grad_var'])} | {s['fwd_corr']['max_abs']:.4f} | {cell(s['grad_corr'])} | {seeds} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
