"""Whole-model accuracy across depth and width: median relative error of the predicted per-layer forward variance,
gradient variance and correlations against measurement (Kedia et al. Sec. 2.4: "depths 1–768, widths 128–6096,
within 10%"). Each cell: a Pre-LN or Post-LN Xavier encoder (dropout 0.1, masked LM on 4 sequences of 128 tokens
of the standard library's source), measured over several seeds, gradient boundary measured at the top layer.
Entries are median relative errors over the layers (for correlations: of the correlation itself), and the share
of layers within two standard errors of the seed average (a 1–2-layer model's gradient correlation is ~0.002, so
a relative error of one standard error there can exceed 10%), and how many layers' gradient-variance seed mean is
too skewed to read as normal (Cochran's rule, :mod:`sigprop.measurement.spread`).

    python bench/accuracy_sweep.py --markdown docs/results/accuracy-sweep.md --json docs/results/accuracy-sweep.json
    python bench/accuracy_sweep.py --token-resolved --depths 1 12 48 --widths 64 128 --positions pre
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from sigprop.analysis.experiment import compare_config
from sigprop.model import TransformerConfig
from sigprop.model.batches import token_batch

QUANTITIES = ("fwd_var", "fwd_corr", "grad_var", "grad_corr")


def cells(depths, widths, narrow, shallow, positions, seeds_depth, seeds_width):
    for pos in positions:
        for n in depths:
            yield pos, n, narrow, seeds_depth
        for d in widths:
            yield pos, shallow, d, seeds_width


def _share(v) -> str:
    return "n/a" if v is None or v != v else f"{100 * v:.0f}%"


def _skewed(row) -> str:
    """How many layers' gradient-variance seed mean fails Cochran's rule, and the largest skewness of such a mean
    (:mod:`sigprop.measurement.spread`)."""
    n = row.get("grad_var_skewed_layers", 0)
    return "0" if not n else f"{n} ({row['grad_var_mean_skewness']:.2g})"


#: The Markdown page's title and the command that writes it, above the table.
HEADER = ("# Across depth and width\n\n`python bench/accuracy_sweep.py --markdown docs/results/accuracy-sweep.md "
          "--json docs/results/accuracy-sweep.json`: theory against measurement for Xavier models (dropout 0.1, real "
          "tokens) over depth at d = 128 and over width at 2 layers; median relative error over the layers.\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--depths", type=int, nargs="+", default=[1, 12, 48, 192, 768])
    ap.add_argument("--widths", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    ap.add_argument("--narrow", type=int, default=128, help="width of the depth sweep")
    ap.add_argument("--shallow", type=int, default=2, help="depth of the width sweep")
    ap.add_argument("--positions", nargs="+", default=["pre", "post"])
    ap.add_argument("--seeds-depth", type=int, default=16,
                    help="seeds per cell of the depth sweep (a narrow model's per-seed spread is ~25%%)")
    ap.add_argument("--seeds-width", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--token-resolved", action="store_true",
                    help="the token-resolved backward sweep (opt-in for encoders; the default is exchangeable)")
    ap.add_argument("--markdown")
    ap.add_argument("--json")
    args = ap.parse_args()
    results = []
    for pos, n, d, seeds in cells(args.depths, args.widths, args.narrow, args.shallow, args.positions,
                                  args.seeds_depth, args.seeds_width):
        heads = max(1, d // 64)
        c = TransformerConfig(n_layers=n, d_model=d, n_heads=heads, norm_position=pos, init="xavier", dropout=0.1,
                              seq_len=args.seq, max_len=args.seq, vocab_size=8192)
        batch = token_batch(c, batch_size=args.batch)
        t = time.time()
        _, _, comp = compare_config(c, batch, seeds=seeds, token_resolved=True if args.token_resolved else None)
        row = {"norm_position": pos, "n_layers": n, "d_model": d, "seeds": seeds, "seconds": round(time.time() - t, 1)}
        row.update({q: comp.summaries[q].median_rel for q in QUANTITIES})
        row.update({f"{q}_within_2se": comp.summaries[q].within_2se for q in QUANTITIES})
        skewed = next((t for t in comp.meta.get("heavy_tails", []) if t["quantity"] == "grad_var"), None)
        row["grad_var_skewed_layers"] = len(skewed["layers"]) if skewed else 0
        row["grad_var_mean_skewness"] = skewed["mean_skewness"] if skewed else None
        results.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": vars(args), "torch": torch.__version__, "cells": results}, f, indent=1)
    if args.markdown:
        lines = [HEADER, "| norm | layers | width | seeds | fwd var | fwd corr | grad var | grad corr | "
                 "within 2 SE: fwd corr, grad var, grad corr | grad var: skewed seed mean, layers (max skewness) | "
                 "seconds |",
                 "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in results:
            within = ", ".join(_share(r[f"{q}_within_2se"]) for q in ("fwd_corr", "grad_var", "grad_corr"))
            lines.append(f"| {r['norm_position']}-LN | {r['n_layers']} | {r['d_model']} | {r['seeds']} | "
                         + " | ".join(f"{100 * r[q]:.1f}%" for q in QUANTITIES) + f" | {within} | {_skewed(r)} | "
                         f"{r['seconds']} |")
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
