"""An encoder's gradient, exchangeable against token-resolved backward sweep, on a model small enough to measure over
many seeds: every site's (pred − meas)/SE of the gradient variance and token correlation, pooled (mean z, max |z|),
and a few layers side by side. The gradient boundary is measured at the top layer, as in ``sigprop compare``.

    python bench/resolved_backward_encoder.py                      # DSLM Pre-LN, 24 layers, d = 128, 64 seeds
    python bench/resolved_backward_encoder.py --set init=xavier --seeds 96
"""

from __future__ import annotations

import argparse

import numpy as np

from sigprop.analysis.experiment import measured_boundary, predict_for_batch
from sigprop.measurement.seeds import measure_seeds
from sigprop.model.batches import token_batch
from sigprop.model.presets import resolve_config

DEFAULTS = ["n_layers=24", "d_model=128", "n_heads=2", "seq_len=64", "max_len=64", "init=dslm"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", action="append", default=[], help="TransformerConfig overrides, key=value")
    ap.add_argument("--seeds", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=4)
    args = ap.parse_args()
    if args.seeds < 2:
        ap.error("--seeds must be at least 2 (standard errors)")
    try:
        config, _ = resolve_config(None, None, DEFAULTS + args.set)
    except ValueError as err:
        ap.error(str(err))
    if config.arch != "encoder":
        ap.error("an encoder is needed (decoders use the token-resolved backward sweep by default)")
    batch = token_batch(config, batch_size=args.batch_size)
    meas = measure_seeds(config, batch, seeds=args.seeds)
    ml, se = meas.lookup(), meas.meta["stderr"]
    grad_top = measured_boundary(meas)
    print(f"{config.n_layers} layers, d = {config.d_model}, init {config.init}, {args.seeds} seeds")
    for resolved in (False, True):
        pred = predict_for_batch(config, batch, grad_top, token_resolved=resolved).lookup()
        z = np.array([[(getattr(pred[(layer, site)], q) - getattr(ml[(layer, site)], q)) / se[f"{layer}:{site}"][q]
                       for q in ("grad_var", "grad_corr")]
                      for layer in range(config.n_layers) for site in ("attn", "ffn", "layer")])
        name = "token-resolved" if resolved else "exchangeable"
        print(f"{name:>15}: gradient variance mean z {z[:, 0].mean():+.2f}, max |z| {abs(z[:, 0]).max():.1f}; "
              f"gradient correlation mean z {z[:, 1].mean():+.2f}, max |z| {abs(z[:, 1]).max():.1f}")
        for layer in sorted({0, config.n_layers // 4, config.n_layers // 2, config.n_layers - 1}):
            p, m = pred[(layer, "layer")], ml[(layer, "layer")]
            print(f"{'':>17}layer {layer:>3}: r_g {p.grad_corr:.4f} (measured {m.grad_corr:.4f}), "
                  f"σ²_g {p.grad_var:.4g} (measured {m.grad_var:.4g})")


if __name__ == "__main__":
    main()
