"""The token-resolved forward state against the exchangeable one, per site, on many seeds of a preset.

Run: python bench/resolved_vs_exchangeable.py [--preset fig4-dslm-pre] [--set key=value ...] [--seeds 64]
        [--seed0 0] [--prediction-seeds 1] [--save runs.npz] [--load other.npz ...]

Measures the forward statistics of ``--seeds`` independently initialised models of the preset on its real batch
(forward passes only, hooks at every attention branch, FFN branch and layer output; training mode, dropout on, as
``sigprop compare`` measures), then predicts them twice: with the exchangeable state (one correlation for every
token pair) and token-resolved (each sequence's token Gram matrix). Per site and quantity it prints R² against the
seed mean, its noise ceiling 1 − ΣSE²/SS_tot (what an exact theory scores in expectation), the median relative
error, the largest absolute error, the mean signed error theory − measured and its mean z = (theory − measured)/SE,
and the share of layers within 2 SE.

The correlation is scored twice: against the mean over seeds of each seed's correlation, and against the ratio of
the seed means of covariance and variance ("pooled", jackknife SE), which is the theory's r = E[cov]/E[var] (the two
differ at O(1/d): a mean of ratios is not a ratio of means). Both predictions sample attention (32 heads per layer
by default); ``--prediction-seeds K`` averages K predictions from independent attention seeds and counts their
standard error across those K into SE and the ceiling, which separates the prediction's own sampling error from a
bias of its rules.

``--set`` overrides the preset's fields (e.g. ``--set d_model=128 --set n_heads=2`` for the same model at half the
width). ``--save`` keeps the per-seed statistics; ``--load`` pools earlier runs of the same configuration (other
seeds) with this one (``--seeds 0`` only pools).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from sigprop.analysis.experiment import predict_for_batch
from sigprop.cli.terminal import Display
from sigprop.measurement.average import pooled_ratio
from sigprop.measurement.hooks import masked_sums
from sigprop.model import Transformer
from sigprop.model.batches import token_batch
from sigprop.model.config import apply_overrides
from sigprop.model.presets import PRESETS

SITES = ("attn", "ffn", "layer")


def measure_forward(config, batch, seeds: int, seed0: int, advance) -> tuple[np.ndarray, np.ndarray]:
    """Per seed, layer and site: (variance, token correlation) arrays of shape (seeds, layers, 3)."""
    n = config.n_layers
    var, corr = np.zeros((seeds, n, 3)), np.zeros((seeds, n, 3))
    for i, seed in enumerate(range(seed0, seed0 + seeds)):
        model = Transformer(config, generator=torch.Generator().manual_seed(seed)).train()
        torch.manual_seed(10_000 + seed)  # dropout masks, as sigprop.measurement.seeds.measure_seeds draws them
        got = {}
        for layer in model.layers:
            mods = [branch for _, branch in layer.branches()] + [layer]
            for j, mod in enumerate(mods):
                mod.register_forward_hook(
                    lambda m, a, out, key=(layer.index, j), store=got: store.__setitem__(key, masked_sums(out)))
        with torch.no_grad():
            model.hidden_states(batch.inputs, batch.segment_ids)
        for (layer, j), sums in got.items():
            var[i, layer, j], corr[i, layer, j] = sums.var(), sums.corr()
        advance()
    return var, corr


def seed_mean(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per layer: the mean over seeds (axis 0) of ``values`` and its standard error."""
    return values.mean(axis=0), values.std(axis=0, ddof=1) / np.sqrt(values.shape[0])


def pooled(corr: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per layer: the correlation pooled over seeds (axis 0) as mean covariance over mean variance, and its jackknife
    standard error (:func:`sigprop.measurement.average.pooled_ratio`)."""
    per_layer = np.array([pooled_ratio(corr[:, i], var[:, i]) for i in range(corr.shape[1])])
    return per_layer[:, 0], per_layer[:, 1]


def score(pred: np.ndarray, mean: np.ndarray, se: np.ndarray) -> str:
    """R² of ``pred`` against ``mean``, its noise ceiling 1 − ΣSE²/SS_tot, and the z-scores, ``se`` being the
    standard error of ``pred − mean`` (measurement's and prediction's sampling errors together)."""
    ss_tot = float(((mean - mean.mean()) ** 2).sum())
    r2 = 1.0 - float(((pred - mean) ** 2).sum()) / ss_tot
    ceiling = 1.0 - float((se**2).sum()) / ss_tot
    z = (pred - mean) / se
    median = float(np.median(np.abs(pred - mean) / np.abs(mean)))
    err = pred - mean
    return (f"R² {r2:7.4f} (ceiling {ceiling:7.4f})  median {median:6.2%}  max abs {np.abs(err).max():.4f}  "
            f"mean err {err.mean():+.4f}  mean z {z.mean():+5.1f}  within 2 SE {np.mean(np.abs(z) <= 2):4.0%}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="fig4-dslm-pre", choices=sorted(PRESETS))
    ap.add_argument("--set", action="append", default=[], help="override a field of the preset's config, key=value")
    ap.add_argument("--seeds", type=int, default=64)
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--prediction-seeds", type=int, default=1,
                    help="average this many predictions from independent attention seeds (forward sweeps only)")
    ap.add_argument("--save", default=None, help="write this run's per-seed statistics (.npz)")
    ap.add_argument("--load", nargs="*", default=[], help="pool earlier runs' .npz files")
    args = ap.parse_args()
    if args.seeds < 0 or args.seeds == 1 or (args.seeds == 0 and not args.load):
        ap.error("--seeds must be >= 2 (standard errors), or pool earlier runs with --load")
    if args.prediction_seeds < 1:
        ap.error("--prediction-seeds must be >= 1")
    preset = PRESETS[args.preset]
    try:
        config = apply_overrides(preset.config(), args.set)
    except ValueError as err:
        ap.error(str(err))
    fields = json.dumps(config.to_dict(), sort_keys=True)
    if config.arch == "encoder_decoder":
        ap.error("encoder-decoder presets have no token-resolved theory")
    batch = token_batch(config, batch_size=preset.batch_size, seed=0)
    try:
        runs = [np.load(path) for path in args.load]
    except (OSError, ValueError) as err:
        ap.error(f"--load: not a run this bench saved ({err})")
    for run in runs:
        if "config" not in run.files or str(run["preset"]) != args.preset or str(run["config"]) != fields:
            ap.error(f"--load: a run of another configuration (preset {run['preset']}), not this one")
    t0 = time.perf_counter()
    with Display() as display:
        if args.seeds:
            task = display.task(f"measure {args.seeds} seeds of {args.preset}", args.seeds)
            var, corr = measure_forward(config, batch, args.seeds, args.seed0, lambda: task(1))
            if args.save:
                np.savez(args.save, var=var, corr=corr, preset=args.preset, config=fields, seed0=args.seed0)
            runs.append({"var": var, "corr": corr, "seed0": args.seed0})
        measured_s = time.perf_counter() - t0
        preds, seconds = {}, {}
        k = args.prediction_seeds
        for name, resolved in (("exchangeable", False), ("token-resolved", True)):
            task = display.task(f"predict ({name}, {k} attention seed{'s' if k > 1 else ''})", k)
            t = time.perf_counter()
            rows = []
            for attention_seed in range(k):
                rows.append(predict_for_batch(config, batch, token_resolved=resolved, attention_seed=attention_seed,
                                              gradients=False).lookup())
                task(1)
            seconds[name] = (time.perf_counter() - t) / k
            preds[name] = {(layer, site, q): np.array([getattr(r[(layer, site)], q) for r in rows])
                           for layer in range(config.n_layers) for site in SITES for q in ("fwd_var", "fwd_corr")}
    var = np.concatenate([np.asarray(r["var"]) for r in runs])
    corr = np.concatenate([np.asarray(r["corr"]) for r in runs])
    n = var.shape[0]
    overrides = f" ({', '.join(args.set)})" if args.set else ""
    print(f"{args.preset}{overrides}: {config.n_layers} layers, d = {config.d_model}, {n} seeds (seed ranges from "
          f"{sorted(int(r['seed0']) for r in runs)}), batch {preset.batch_size} x {config.seq_len}; measured in "
          f"{measured_s:.0f} s; forward predicted in {seconds['exchangeable']:.0f} s (exchangeable), "
          f"{seconds['token-resolved']:.0f} s (token-resolved) per attention seed, "
          f"{args.prediction_seeds} attention seed(s) averaged")
    for j, site in enumerate(SITES):
        measured = {"fwd_var": seed_mean(var[:, :, j]), "fwd_corr": seed_mean(corr[:, :, j]),
                    "fwd_corr pooled": pooled(corr[:, :, j], var[:, :, j])}
        for q, (mean, se) in measured.items():
            print(f"{site:5s} {q}")
            for name in ("exchangeable", "token-resolved"):
                draws = np.stack([preds[name][(layer, site, q.split()[0])] for layer in range(config.n_layers)])
                pred = draws.mean(axis=1)
                pred_se = draws.std(axis=1, ddof=1) / np.sqrt(k) if k > 1 else np.zeros_like(pred)
                print(f"    {name:14s} {score(pred, mean, np.hypot(se, pred_se))}")


if __name__ == "__main__":
    main()
