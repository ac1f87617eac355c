"""Is each rule of the token-resolved forward sweep right where the real model is? A per-layer table of
:mod:`sigprop.theory.in_situ`'s tests (its docstring has the method).

Run: python bench/map_consistency.py [--preset fig4-dslm-pre] [--seeds 48] [--layers 10 50 100 150]
        [--set d_model=128 --set n_heads=2] [--heads 64]

Per layer of a Pre-LN encoder preset, on the batch `compare` uses, with the seeds' dropout masks as `measure_seeds`
draws them; Δ = the seeds' mean minus the rule at the seeds' mean input, with its jackknife standard error:

* stream: the sweep's prediction of the token correlation entering the layer against the seeds' pooled one, and the
  norm² spread: how much a token's squared norm varies between seeds, as a multiple of d Gaussian features' 2/d;
* LayerNorm (the attention's and the FFN's): the output's pooled token correlation; ``xK`` says how many times the
  rule's own lowering of the correlation (the Olkin–Pratt term of d independent Gaussian features, r(1 − r²)/(2(d − 1))
  to first order) the seeds' LayerNorm lowers it;
* attention: variance and correlation, against the exact expectation over the layer's weights given each seed's input;
* FFN after its norm: variance and token covariance (a Jensen term: the rules are exact given the seed's input).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from sigprop.cli.terminal import Display
from sigprop.model import Transformer
from sigprop.model.batches import token_batch
from sigprop.model.config import apply_overrides
from sigprop.model.presets import PRESETS
from sigprop.theory.in_situ import (
    attention_delta,
    check_supported,
    collect_seed_inputs,
    ffn_delta,
    jackknife,
    layernorm_delta,
    pooled,
)
from sigprop.theory.sweep import gram_forward_sweep


def stream_cells(sweep, stream: torch.Tensor, keep: torch.Tensor, layer: int, d: int) -> str:
    """The sweep's stream correlation against the seeds' pooled one (jackknife SE), and the norm² spread."""
    per_seed = np.array([pooled(g, keep) for g in stream])
    th = pooled(sweep.stacks[0].saved[layer].value, keep)
    # the sweep's value stands as a constant "rule": the jackknife is then that of the seeds' pooled correlation
    delta, se = jackknife(per_seed, lambda s: th, lambda v: v[1] / v[0])
    norms = torch.diagonal(stream, dim1=-2, dim2=-1)  # (seeds, B, L): |x_j|²/d
    spread = float((norms.var(0) / norms.mean(0) ** 2).mean()) / (2.0 / d)
    return f"{th[1] / th[0]:.4f} / {th[1] / th[0] + delta:.4f} ± {se:.4f} | {spread:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="fig4-dslm-pre", choices=sorted(PRESETS))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    ap.add_argument("--layers", type=int, nargs="+", default=[10, 50, 100, 150])
    ap.add_argument("--seeds", type=int, default=48)
    ap.add_argument("--heads", type=int, default=64, help="attention draws per sequence (truth and rule)")
    args = ap.parse_args()
    preset = PRESETS[args.preset]
    try:
        cfg = apply_overrides(preset.config(), args.set)
        check_supported(cfg)
    except ValueError as err:
        ap.error(str(err))
    if args.seeds < 3 or any(not 0 <= layer < cfg.n_layers for layer in args.layers):
        ap.error(f"--seeds >= 3 and layers in [0, {cfg.n_layers}) are needed")
    layers = sorted(set(args.layers))
    batch = token_batch(cfg, preset.batch_size)
    keep = torch.ones(batch.inputs.shape, dtype=torch.bool)
    theory = Transformer(cfg, sample=False)
    with Display() as display:
        task = display.task("forward sweep (theory)", cfg.n_layers)
        sweep = gram_forward_sweep(theory, batch.inputs, batch.segment_ids,
                              progress=task)
        task = display.task(f"{args.seeds} models of {args.preset}", args.seeds)
        seeds = collect_seed_inputs(cfg, batch, layers, args.seeds, args.heads, task)
    print(f"{args.preset}{''.join(f' {kv}' for kv in args.set)}: d = {cfg.d_model}, {args.seeds} seeds, "
          f"batch {batch.inputs.shape[0]} x {cfg.seq_len}; Δ = seeds' mean − rule on the seeds' mean input "
          "(jackknife SE)")
    print("layer | stream corr: sweep / seeds ± SE | norm² spread | attn LN corr Δ ± SE (z) xK | "
          "FFN LN corr Δ ± SE (z) xK | attention var Δ% ± SE (z) | attention corr Δ ± SE (z) | FFN var Δ% / cov Δ%")
    print("      (norm² spread: the variance over seeds of a token's |x|²/d, relative to its mean², averaged over the "
          "tokens, as a multiple of d Gaussian features' 2/d)")
    print("      (xK: how many times the Gaussian rule's lowering of the correlation by the norm, r(1 − r²)/(2(d − 1)) "
          "to first order, the seeds' LayerNorm lowers it)")
    for layer in layers:
        blocks = theory.layers[layer]
        cells = [stream_cells(sweep, seeds[(layer, "stream")], keep, layer, cfg.d_model)]
        for inp, out, norm in (("stream", "attn_norm", blocks.attn.branch.norm),
                               ("ffn_in", "ffn_norm", blocks.ffn.branch.norm)):
            delta, se, lowering = layernorm_delta(norm, seeds[(layer, inp)], seeds[(layer, out)], keep)
            times = (lowering - delta[1]) / lowering
            cells.append(f"{delta[1]:+.5f} ± {se[1]:.5f} ({delta[1] / se[1]:+.1f}) x{times:.1f}")
        delta, se, ref = attention_delta(blocks.attn.branch.attn, seeds[(layer, "attn_norm")],
                                         seeds[(layer, "attn_exact")], keep, args.heads)
        cells += [f"{100 * delta[0] / ref[0]:+.2f}% ± {100 * se[0] / ref[0]:.2f}% ({delta[0] / se[0]:+.1f})",
                  f"{delta[2]:+.5f} ± {se[2]:.5f} ({delta[2] / se[2]:+.1f})"]
        delta, se, ref = ffn_delta(blocks.ffn.branch, seeds[(layer, "ffn_norm")], keep)
        cells.append(" / ".join(f"{100 * delta[i] / ref[i]:+.2f}% ± {100 * se[i] / ref[i]:.2f}%" for i in (0, 1)))
        print(f"{layer:5d} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
