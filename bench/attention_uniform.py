"""The uniform (zeroth-order) token-resolved attention rule against the sampled Gram rule, across the score variance:
where does leaving out the scores cost more than the sampled rule's own noise? Sets ``UNIFORM_MAX_S2``.

    python bench/attention_uniform.py              # causal and causal with rotary positions, L = 256, d_in = 256

One attention layer, token-resolved, on a norm's output (unit diagonal) whose pairs differ by position as a causal
decoder's do (an equicorrelated Gram, r = 0.5, after one causal-averaging residual step, renormalised), and a
gradient Gram on every position (H = I, a next-token loss). The query and key weights' std is set so that the
largest score variance d_in² σ²_q σ²_k max G_jj² takes each value of the grid. Printed per s²: the relative
difference of the uniform rule's pooled variance and token covariance (forward) and the input gradient's pooled
variance (backward) from the sampled rule's (128 heads), beside that sampled estimate's standard error where the
rule gives one.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from sigprop.components.attention_gram import gram_attention, gram_attention_backward, pooled_gram_means
from sigprop.components.attention_uniform import (
    gram_score_variance,
    uniform_gram_attention,
    uniform_gram_attention_backward,
    uniform_weights,
)


def decoder_like_gram(L: int, r: float = 0.5) -> torch.Tensor:
    """(1, L, L): an equicorrelated Gram after one causal-averaging residual step, scaled to a unit diagonal."""
    g = (1.0 - r) * torch.eye(L, dtype=torch.float64) + r
    u = uniform_weights(g[None], causal=True)[0]
    g = g + u @ g @ u.T
    s = g.diagonal().rsqrt()
    return (s[:, None] * g * s[None, :])[None]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--L", type=int, default=256)
    ap.add_argument("--d-in", type=int, default=256)
    ap.add_argument("--d-k", type=int, default=64)
    ap.add_argument("--heads", type=int, default=128)
    ap.add_argument("--s2", type=float, nargs="+", default=[0.005, 0.01, 0.02, 0.05, 0.1, 0.3])
    args = ap.parse_args()
    torch.set_num_threads(1)
    gram = decoder_like_gram(args.L)
    grad = torch.eye(args.L, dtype=torch.float64)[None]
    keep = torch.ones(1, args.L, dtype=torch.bool)
    sv = 1.0 / args.d_in
    print(f"one causal layer, L {args.L}, d_in {args.d_in}, d_k {args.d_k}; sampled rule: {args.heads} heads")
    print("relative difference uniform - sampled (sampled's SE)")
    print(f"{'rotary':>7} {'s2':>6} {'fwd var':>18} {'fwd cov':>18} {'grad var':>9} {'time':>6}")
    uni = uniform_gram_attention(gram, args.d_in, sv, causal=True)
    uvar, ucov = (float(t[0]) for t in pooled_gram_means(uni[:, None], keep))
    ugrad = float(uniform_gram_attention_backward(grad, args.d_k, sv, causal=True).diagonal(dim1=-2, dim2=-1).mean())
    for rope in (None, 10000.0):
        for s2 in args.s2:
            sigma2 = math.sqrt(s2 / gram_score_variance(gram, args.d_in, 1.0, 1.0))
            t0 = time.time()
            s = gram_attention(gram, args.d_in, args.d_k, sigma2, sigma2, sv, causal=True, heads=args.heads,
                               fixed_norm=True, rope=rope)
            svar, scov = (float(t[0]) for t in pooled_gram_means(s.gram[:, None], keep))
            sg = gram_attention_backward(gram, grad, args.d_in, args.d_k, sigma2, sigma2, sv, causal=True,
                                         heads=args.heads, fixed_norm=True, rope=rope)
            sgrad = float(sg.diagonal(dim1=-2, dim2=-1).mean())
            print(f"{'yes' if rope else 'no':>7} {s2:6.3f} {uvar / svar - 1:+8.2%} ({s.var_se / svar:5.2%}) "
                  f"{ucov / scov - 1:+8.2%} ({s.cov_se / scov:5.2%}) {ugrad / sgrad - 1:+9.2%} "
                  f"{time.time() - t0:5.0f}s", flush=True)


if __name__ == "__main__":
    main()
