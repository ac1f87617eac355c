"""One seed per layer against one set of draws for every layer, in the exchangeable sweeps of ``sigprop.predict``.

Run: python bench/exchangeable_layer_seeds.py [--preset qk-2x-xavier] [--heads 32] [--seeds 6]

The sampled attention rule estimates each layer's attention moments from ``--heads`` sampled heads. If every layer
drew the same heads, a sampling error would be shared by all layers and would compound over depth (a gradient is a
product of per-layer factors); with a seed per layer (:func:`sigprop.components.draws.layer_seed`, the default)
the errors are independent. For ``--seeds`` attention seeds this predicts the preset (theory only, exchangeable
sweeps, no batch) both ways and prints, per quantity, the mean over seeds and the spread across them (sd, relative
to the mean): the spread is the prediction's own sampling error. The shared-draw variant is the default walker with
its per-layer seed switched off.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from unittest import mock

import numpy as np

import sigprop.theory.predict as theory
from sigprop.model.presets import PRESETS, preset_config


def _quantities(profile) -> dict[str, float]:
    rows = profile.site("layer")
    gv = np.array([r.grad_var for r in rows])
    return {"first-to-last gradient variance": gv[0] / gv[-1],
            "gradient variance at layer 16 / last": gv[min(16, len(gv) - 1)] / gv[-1],
            "forward variance, last layer": rows[-1].fwd_var,
            "forward correlation, last layer": rows[-1].fwd_corr}


def run(config, heads: int, seeds: int, shared: bool) -> tuple[dict[str, np.ndarray], float]:
    one_draw_for_all = mock.patch.object(theory, "layer_context", lambda ctx, layer_index: ctx)
    patch = one_draw_for_all if shared else contextlib.nullcontext()
    values: dict[str, list[float]] = {}
    t = time.time()
    with patch:
        for s in range(seeds):
            for k, v in _quantities(theory.predict(config, attention_heads=heads, attention_seed=s)).items():
                values.setdefault(k, []).append(float(v))
    return {k: np.array(v) for k, v in values.items()}, time.time() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="qk-2x-xavier", choices=sorted(PRESETS))
    ap.add_argument("--heads", type=int, default=32, help="sampled heads per layer")
    ap.add_argument("--seeds", type=int, default=6, help="attention seeds (independent predictions)")
    args = ap.parse_args()
    config = preset_config(args.preset)
    print(f"{args.preset}: {config.n_layers} layers, d = {config.d_model}; {args.heads} sampled heads per layer, "
          f"{args.seeds} attention seeds; exchangeable sweeps, no batch")
    results = {name: run(config, args.heads, args.seeds, shared) for name, shared in
               (("one set of draws for every layer", True), ("a seed per layer", False))}
    for name, (values, seconds) in results.items():
        print(f"\n{name} ({seconds / args.seeds:.0f} s per prediction)")
        for k, v in values.items():
            print(f"  {k:40s} mean {v.mean():12.5g}   sd across seeds {v.std(ddof=1):10.4g} "
                  f"({100 * v.std(ddof=1) / abs(v.mean()):5.2f}%)   values {', '.join(f'{x:.5g}' for x in v)}")


if __name__ == "__main__":
    main()
