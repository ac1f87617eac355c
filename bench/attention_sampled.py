"""Cost and precision of the sampled attention rule against the number of heads drawn, and its gap to the closed
form across the score variance s², in one run.

    python bench/attention_sampled.py

Configuration: the presets' attention (d_in = 256, d_k = 64, L = 128, dropout 0.1), Gaussian input with variance 1
and token correlation r. Times are wall seconds per configuration (forward and backward bases), the heads drawn
afresh each time, as each layer of a prediction draws its own (:func:`sigprop.components.draws.layer_seed`);
minimum of 3 repeats after a warm-up.
"""

from __future__ import annotations

import math
import time

import torch

from sigprop.components import attention_sampled as sampled
from sigprop.components.attention import attention_backward
from sigprop.core.moments import GradMoments, Moments

D, DK, L, P = 256, 64, 128, 0.1


def qk_var(s2, r):
    return math.sqrt(s2 / ((1.0 - r) * D * D))


def timed(heads, s2, r):
    best = float("inf")
    for rep in range(4):
        sampled._sample.cache_clear()
        sampled._draw_base_cached.cache_clear()
        t = time.perf_counter()
        s = sampled.sample_attention(1.0, r, D, DK, L, qk_var(s2, r), qk_var(s2, r), 1.0 / D, P, heads=heads)
        if rep:
            best = min(best, time.perf_counter() - t)
    return best, s


def main():
    print(f"torch threads: {torch.get_num_threads()}")
    print("heads   s/config   rel SE fwd var   rel SE grad var (r_g = 0)")
    for heads in (32, 64, 128, 256):
        t, s = timed(heads, 1.0, 0.3)
        fwd, grad = 100 * s.fwd_var_se / s.fwd_var, 100 * s.in_var_se / s.in_var
        print(f"{heads:5d}   {t:8.3f}   {fwd:13.2f}%   {grad:13.2f}%")
    print("\nclosed form / sampled − 1 for the gradient variance (r_g = 0), 256 heads:")
    print("  s²     r = 0.0          r = 0.5")
    for s2 in (0.1, 0.3, 0.5, 1.0, 2.0, 4.0):
        cells = []
        for r in (0.0, 0.5):
            _, s = timed(256, s2, r)
            m = Moments(0.0, 1.0, r)
            try:
                cb = attention_backward(GradMoments(1.0, 0.0), m, D, DK, L, qk_var(s2, r), qk_var(s2, r), 1.0 / D, P)
                cells.append(f"{100 * (cb.var / s.in_var - 1):+6.1f}% ± {100 * s.in_var_se / s.in_var:.1f}%")
            except ValueError:
                cells.append("   (out of domain)")
        print(f"{s2:5.1f}   " + "   ".join(cells))


if __name__ == "__main__":
    main()
