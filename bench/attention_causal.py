"""The causal closed form against the sampled rule across the score variance s², and the cost of each, in one run.

    python bench/attention_causal.py [--heads 512]

Configuration: the presets' attention (d_in = 256, d_k = 64, dropout 0.1) at L = 32 and 128, Gaussian input of
variance 1 and token correlation r. Each row: the closed form's relative gap to the sampled rule (in percent) with
the sample's standard error in brackets, for the forward variance, the forward covariance and the gradient variance
for an independent (r_g = 0) and a shared (r_g = 1) output gradient; then the seconds per configuration of each rule
(forward and backward; the sampled one with its heads drawn afresh). Written to docs/results/bench-attention-causal.txt.
"""

from __future__ import annotations

import argparse
import math
import time

from sigprop.components import attention_causal, attention_sampled
from sigprop.components.attention import attention_backward, attention_forward
from sigprop.core.moments import GradMoments, Moments

D, DK, P = 256, 64, 0.1


def qk_var(s2, r):
    return math.sqrt(s2 / ((1.0 - r) * D * D))


def row(s2, r, L, heads):
    sq, sv, m = qk_var(s2, r), 1.0 / D, Moments(0.0, 1.0, r)
    attention_sampled._sample.cache_clear()
    attention_sampled._draw_base_cached.cache_clear()
    t = time.perf_counter()
    s = attention_sampled.sample_attention(1.0, r, D, DK, L, sq, sq, sv, P, True, heads=heads, seed=1)
    t_sampled = time.perf_counter() - t
    attention_causal._one_configuration.cache_clear()
    t = time.perf_counter()
    f = attention_forward(m, D, DK, L, sq, sq, sv, P, causal=True, approx="exact")
    bs = [attention_backward(GradMoments(1.0, rg), m, D, DK, L, sq, sq, sv, P, causal=True, approx="exact")
          for rg in (0.0, 1.0)]
    t_closed = time.perf_counter() - t
    gaps = [(f.var / s.fwd_var - 1.0, s.fwd_var_se / s.fwd_var),
            (f.var * f.corr / s.fwd_cov - 1.0, s.fwd_cov_se / s.fwd_cov),
            (bs[0].var / s.in_var - 1.0, s.in_var_se / s.in_var),
            (bs[1].var / s.sh_var - 1.0, s.sh_var_se / s.sh_var)]
    cells = " | ".join(f"{100 * g:+.2f} ({100 * se:.2f})" for g, se in gaps)
    return f"| {L} | {s2:g} | {r:g} | {cells} | {t_closed:.3f} | {t_sampled:.2f} |"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=512)
    args = parser.parse_args()
    print(f"causal closed form vs sampled rule ({args.heads} heads), d_in {D}, d_k {DK}, dropout {P}; gaps in %")
    print("| L | s² | r | fwd var | fwd cov | grad var r_g=0 | grad var r_g=1 | closed s | sampled s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for L in (32, 128):
        for s2 in (0.05, 0.2, 0.5, 0.75, 1.0):
            for r in (0.3, 0.8):
                print(row(s2, r, L, args.heads), flush=True)


if __name__ == "__main__":
    main()
