"""Why Post-LN gradient profiles look biased at depth: the seed-to-seed spread of a finite-width model.

The theory predicts E_θ[σ²_g] at every layer (an expectation over weight draws). In a Post-LN Xavier model the
gradient variance that one weight draw delivers at layer l, relative to the top, is a product of ~L − l random
per-layer factors, so its logarithm spreads across seeds with a standard deviation that grows with depth and
shrinks with width (~√(depth/d)). The mean of a few log-normal-like draws sits well below their expectation, so a
16-seed average "disagrees" with a correct expectation by a factor that grows with depth, and more so at small
width. This script measures, per seed, log(σ²_g at layer l / σ²_g at the top layer) and prints at a few layers:

* theory: log of the predicted ratio (boundary: the measured top gradient correlation; nothing else measured);
* mean-log: the average of the per-seed logs (the typical seed);
* log-mean: the log of the average ratio (what a seed-averaged profile compares);
* log-normal: mean-log + var/2, the expectation if the per-seed ratio is log-normal;
* sd: the seed-to-seed standard deviation of the log, and the relative standard error of the log-mean that it
  implies, √((e^{sd²} − 1)/seeds).

Run: ``python bench/postln_seed_spread.py [--widths 128 512] [--layers 48] [--seeds 16]`` (d = 128 and 512 at 48
layers take ~2 and ~6 minutes on 2 CPU cores). Results: docs/results/postln-seed-spread.txt.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch

from sigprop.analysis.experiment import predict_for_batch
from sigprop.core.moments import GradMoments
from sigprop.measurement.hooks import measure
from sigprop.model.batches import token_batch
from sigprop.model.config import TransformerConfig
from sigprop.model.transformer import Transformer


def seed_logs(config: TransformerConfig, batch: dict, seeds: int) -> tuple[np.ndarray, float]:
    """(seeds × layers) log(σ²_g(l)/σ²_g(top)) per seed, and the seed-averaged top gradient correlation."""
    logs, top_corr = [], []
    top = config.n_layers - 1
    for s in range(seeds):
        model = Transformer(config, generator=torch.Generator().manual_seed(s))
        model.train()
        torch.manual_seed(10_000 + s)  # dropout masks, as in sigprop.measurement.seeds.measure_seeds
        rows = {r.layer: r for r in measure(model, batch).rows if r.site == "layer"}
        logs.append([math.log(rows[lyr].grad_var / rows[top].grad_var) for lyr in range(config.n_layers)])
        top_corr.append(rows[top].grad_corr)
    return np.array(logs), float(np.mean(top_corr))


def report(d: int, layers: int, seeds: int) -> list[str]:
    config = TransformerConfig(norm_position="post", init="xavier", n_layers=layers, d_model=d,
                               n_heads=max(1, d // 64), seq_len=128)
    batch = token_batch(config, batch_size=4)
    logs, corr = seed_logs(config, batch, seeds)
    pred = predict_for_batch(config, batch, GradMoments(var=1.0, corr=float(np.clip(corr, -1.0, 1.0))))
    g = {r.layer: r.grad_var for r in pred.rows if r.site == "layer"}
    lines = [f"Post-LN Xavier, d = {d}, {layers} layers, {seeds} seeds, 4 × 128 real tokens, dropout 0.1",
             f"{'layer':>6} {'theory':>8} {'mean-log':>9} {'log-mean':>9} {'log-normal':>10} {'sd':>5} "
             f"{'rel. SE of mean':>16}"]
    for lyr in sorted({0, layers // 8, layers // 4, layers // 2, 3 * layers // 4, layers - 2}):
        x = logs[:, lyr]
        sd = x.std(ddof=1)
        lines.append(f"{lyr:>6} {math.log(g[lyr] / g[layers - 1]):>8.3f} {x.mean():>9.3f} "
                     f"{math.log(np.mean(np.exp(x))):>9.3f} {x.mean() + sd**2 / 2:>10.3f} {sd:>5.2f} "
                     f"{math.sqrt(math.expm1(sd**2) / seeds):>16.2f}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--seeds", type=int, default=16)
    args = ap.parse_args()
    for d in args.widths:
        print("\n".join(report(d, args.layers, args.seeds)), flush=True)
        print(flush=True)


if __name__ == "__main__":
    main()
