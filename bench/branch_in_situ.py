"""A preset's branch rules against its real branches on Gaussian input, at chosen layers of the real model.

Run: python bench/branch_in_situ.py [--preset fig4-dslm-pre] [--layers 0 40] [--branch attn] [--seeds 24]
        [--input 1.04,0.04 1.14,0.45]

For each seed a model of the preset is initialised (its init plan, so the branch's weights are those the layer
really gets, e.g. DeepScaleLM's depth-dependent V/O scales), and the branch (``attn`` or ``ffn``, with its norm and
dropout, in train mode) is applied to a Gaussian batch of 4 × L tokens with the given (variance, token correlation):
x = √(rσ²) c + √((1 − r)σ²) δ_k, the input the rules assume. The measured output variance and correlation (pooled
over seeds, with the standard error of the per-seed values) are printed beside the rule's prediction. Agreement
here while the whole-model comparison is off says the discrepancy lies in what the state does not carry (the
input's departures from a Gaussian with exchangeable tokens), not in the branch rule.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch

from sigprop.cli.terminal import Display
from sigprop.core.moments import Moments
from sigprop.measurement.hooks import masked_sums, pool_sums
from sigprop.model import Transformer
from sigprop.model.presets import PRESETS


def parse_input(text: str) -> tuple[float, float]:
    message = f"--input wants VAR,CORR with VAR > 0 and CORR in [0, 1], e.g. 1.0,0.3 (got {text!r})"
    try:
        var, corr = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(message) from None
    if not (var > 0 and 0 <= corr <= 1):
        raise argparse.ArgumentTypeError(message)
    return var, corr


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="fig4-dslm-pre", choices=sorted(PRESETS))
    ap.add_argument("--layers", type=int, nargs="+", default=[0, 40])
    ap.add_argument("--branch", default="attn", choices=["attn", "ffn"])
    ap.add_argument("--seeds", type=int, default=24)
    ap.add_argument("--input", type=parse_input, nargs="+", default=[(1.04, 0.04), (1.14, 0.45)],
                    metavar="VAR,CORR")
    args = ap.parse_args()
    if args.seeds < 2:
        ap.error("--seeds must be >= 2 (standard errors)")
    cfg = PRESETS[args.preset].config()
    if cfg.arch != "encoder" or any(not 0 <= layer < cfg.n_layers for layer in args.layers):
        ap.error(f"an encoder preset and layers in [0, {cfg.n_layers}) are needed")
    L, d = cfg.seq_len, cfg.d_model
    sums = {(layer, inp): [] for layer in args.layers for inp in args.input}
    with Display() as display:
        task = display.task(f"{args.seeds} models of {args.preset}", args.seeds)
        for seed in range(args.seeds):
            model = Transformer(cfg, generator=torch.Generator().manual_seed(seed)).train()
            gen = torch.Generator().manual_seed(1_000_000 + seed)
            for layer in args.layers:
                branch = dict(model.layers[layer].branches())[args.branch]
                for var, corr in args.input:
                    x = (math.sqrt(corr * var) * torch.randn(4, 1, d, generator=gen)
                         + math.sqrt((1 - corr) * var) * torch.randn(4, L, d, generator=gen))
                    with torch.no_grad():
                        sums[(layer, (var, corr))].append(masked_sums(branch(x)))
            task(1)
    theory = Transformer(cfg, sample=False)
    print(f"{args.preset}: branch {args.branch!r}, {args.seeds} seeds, Gaussian input of 4 x {L} tokens, d = {d}")
    print("layer  in var  in corr   var theory   var measured ± SE    z   corr theory  corr measured ± SE    z")
    for layer in args.layers:
        rule_branch = dict(theory.layers[layer].branches())[args.branch]
        for var, corr in args.input:
            m = rule_branch.forward_moments(Moments(var=var, corr=corr), L=L)
            s = sums[(layer, (var, corr))]
            pooled = pool_sums(s)
            se_v = np.std([x.var() for x in s], ddof=1) / math.sqrt(len(s))
            se_c = np.std([x.corr() for x in s], ddof=1) / math.sqrt(len(s))
            pv, pc = pooled.var(), pooled.corr()
            print(f"{layer:5d}  {var:6.3f}  {corr:7.3f}  {float(m.var):11.5g}  {pv:11.5g} ± {se_v:8.2g}  "
                  f"{(float(m.var) - pv) / se_v:+5.1f}  {float(m.corr):11.4f}  {pc:11.4f} ± {se_c:7.2g}  "
                  f"{(float(m.corr) - pc) / se_c:+5.1f}")


if __name__ == "__main__":
    main()
