"""The token-resolved forward state against the exchangeable one, per site, on many seeds of a preset.

Run: python bench/resolved_vs_exchangeable.py [--preset fig4-dslm-pre] [--seeds 64] [--seed0 0]
        [--save runs.npz] [--load other.npz ...]

Measures the forward statistics of ``--seeds`` independently initialised models of the preset on its real batch
(forward passes only, hooks at every attention branch, FFN branch and layer output; training mode, dropout on, as
``sigprop compare`` measures), then predicts them twice: with the exchangeable state (one correlation for every
token pair) and token-resolved (each sequence's token Gram matrix). Per site and quantity it prints R² against the
seed mean, its noise ceiling 1 − ΣSE²/SS_tot (what an exact theory scores in expectation), the median relative
error, the largest absolute error, the mean signed z = (theory − measured)/SE and the share of layers within 2 SE.
``--save`` keeps the per-seed statistics; ``--load`` pools earlier runs of the same preset (other seeds) with this
one (``--seeds 0`` only pools).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from sigprop.experiment import predict_for_batch, token_batch
from sigprop.measurement import masked_sums
from sigprop.model import Transformer
from sigprop.presets import PRESETS
from sigprop.terminal import progress_bar

SITES = ("attn", "ffn", "layer")


def measure_forward(config, batch, seeds: int, seed0: int, advance) -> tuple[np.ndarray, np.ndarray]:
    """Per seed, layer and site: (variance, token correlation) arrays of shape (seeds, layers, 3)."""
    n = config.n_layers
    var, corr = np.zeros((seeds, n, 3)), np.zeros((seeds, n, 3))
    for i, seed in enumerate(range(seed0, seed0 + seeds)):
        model = Transformer(config, generator=torch.Generator().manual_seed(seed)).train()
        torch.manual_seed(10_000 + seed)  # dropout masks, as sigprop.experiment.measure_seeds draws them
        got = {}
        for layer in model.layers:
            mods = [branch for _, branch in layer.branches()] + [layer]
            for j, mod in enumerate(mods):
                mod.register_forward_hook(
                    lambda m, a, out, key=(layer.index, j), store=got: store.__setitem__(key, masked_sums(out)))
        with torch.no_grad():
            model.hidden_states(batch["inputs"], batch.get("segment_ids"))
        for (layer, j), sums in got.items():
            var[i, layer, j], corr[i, layer, j] = sums.var(), sums.corr()
        advance()
    return var, corr


def score(pred: np.ndarray, mean: np.ndarray, se: np.ndarray) -> str:
    ss_tot = float(((mean - mean.mean()) ** 2).sum())
    r2 = 1.0 - float(((pred - mean) ** 2).sum()) / ss_tot
    ceiling = 1.0 - float((se**2).sum()) / ss_tot
    z = (pred - mean) / se
    median = float(np.median(np.abs(pred - mean) / np.abs(mean)))
    return (f"R² {r2:7.4f} (ceiling {ceiling:7.4f})  median {median:6.2%}  max abs {np.abs(pred - mean).max():.4f}  "
            f"mean z {z.mean():+5.1f}  within 2 SE {np.mean(np.abs(z) <= 2):4.0%}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="fig4-dslm-pre", choices=sorted(PRESETS))
    ap.add_argument("--seeds", type=int, default=64)
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--save", default=None, help="write this run's per-seed statistics (.npz)")
    ap.add_argument("--load", nargs="*", default=[], help="pool earlier runs' .npz files")
    args = ap.parse_args()
    if args.seeds < 0 or args.seeds == 1 or (args.seeds == 0 and not args.load):
        ap.error("--seeds must be >= 2 (standard errors), or pool earlier runs with --load")
    preset = PRESETS[args.preset]
    config = preset.config()
    if config.arch == "encoder_decoder":
        ap.error("encoder-decoder presets have no token-resolved theory")
    batch = token_batch(config, batch_size=preset.batch_size, seed=0)
    runs = [np.load(path) for path in args.load]
    for run in runs:
        if str(run["preset"]) != args.preset:
            ap.error(f"--load: a run of preset {run['preset']}, not {args.preset}")
    t0 = time.perf_counter()
    with progress_bar() as bar:
        if args.seeds:
            task = bar.add_task(f"measure {args.seeds} seeds of {args.preset}", total=args.seeds)
            var, corr = measure_forward(config, batch, args.seeds, args.seed0, lambda: bar.advance(task))
            if args.save:
                np.savez(args.save, var=var, corr=corr, preset=args.preset, seed0=args.seed0)
            runs.append({"var": var, "corr": corr, "seed0": args.seed0})
        measured_s = time.perf_counter() - t0
        preds = {}
        for name, resolved in (("exchangeable", False), ("token-resolved", True)):
            task = bar.add_task(f"predict ({name})", total=None)
            t = time.perf_counter()
            preds[name] = predict_for_batch(config, batch, token_resolved=resolved).lookup()
            preds[name + " s"] = time.perf_counter() - t
            bar.update(task, total=1, completed=1)
    var = np.concatenate([np.asarray(r["var"]) for r in runs])
    corr = np.concatenate([np.asarray(r["corr"]) for r in runs])
    n = var.shape[0]
    print(f"{args.preset}: {config.n_layers} layers, d = {config.d_model}, {n} seeds (seed ranges from "
          f"{sorted(int(r['seed0']) for r in runs)}), batch {preset.batch_size} x {config.seq_len}; measured in "
          f"{measured_s:.0f} s; predicted in {preds['exchangeable s']:.0f} s (exchangeable), "
          f"{preds['token-resolved s']:.0f} s (token-resolved)")
    for j, site in enumerate(SITES):
        for q, arr in (("fwd_var", var), ("fwd_corr", corr)):
            mean = arr[:, :, j].mean(axis=0)
            se = arr[:, :, j].std(axis=0, ddof=1) / np.sqrt(n)
            print(f"{site:5s} {q}")
            for name in ("exchangeable", "token-resolved"):
                pred = np.array([getattr(preds[name][(layer, site)], q) for layer in range(config.n_layers)])
                print(f"    {name:14s} {score(pred, mean, se)}")


if __name__ == "__main__":
    main()
