"""Where DeepScaleLM's gradient change drifts with depth: the log change of the gradient variance per quarter of the
stack, with the gradient's and the stream's token correlation at each quarter's bottom, from theory, for the
``fig1-preln`` encoder under ``init=dslm`` at several depths (Kedia et al. App. E.3: the change is
Π(1 + k(C6,n − 1)/N), C6 = r_g/r_x).

    python bench/dslm_gradient_drift.py --depths 12,48,192 > docs/results/dslm-gradient-drift.txt
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from sigprop import predict
from sigprop.model.presets import PRESETS


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--depths", default="12,48,192")
    ap.add_argument("--attention-heads", type=int, default=32)
    args = ap.parse_args()
    t0 = time.perf_counter()
    print("fig1-preln with init=dslm (masked LM, Zipf tokens in theory); quarters from the input (Q1) to the top (Q4)")
    print(f"{'N':>5} {'first/last':>10} | log change of σ²_g per quarter, Q1 … Q4 | r_x, r_g at the bottom of Q1 … Q4")
    for n in (int(v) for v in args.depths.split(",")):
        profile = predict(PRESETS["fig1-preln"].config().replace(init="dslm", n_layers=n),
                          attention_heads=args.attention_heads)
        layers = profile.site("layer")
        log_g = np.log([r.grad_var for r in layers])
        edges = [0, n // 4, n // 2, 3 * n // 4, n - 1]
        quarters = [log_g[edges[i]] - log_g[edges[i + 1]] for i in range(4)]
        corr = [f"{layers[e].fwd_corr:.3f}/{layers[e].grad_corr:.3f}" for e in edges[:4]]
        print(f"{n:>5} {np.exp(log_g[0] - log_g[-1]):>10.3f} | " + " ".join(f"{q:+.3f}" for q in quarters)
              + " | " + " ".join(corr))
    print(f"wall {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
