"""Cost of the token-resolved attention rule's two ways of forming O Oᵀ, in one run.

    python bench/attention_gram_paths.py

The rule (:func:`sigprop.components.attention_gram.gram_attention`) samples X = D G^{1/2} Z per head and needs
O Oᵀ for O = A X. The row path forms X (L × d_in) and O; the Gram path (:func:`_value_free_gram`, taken for
L < d_in) forms only L × L and L × d_k products, Z Zᵀ and Z W_Q, Z W_K shared by the sequences. Both on the same
draws, at the presets' shapes (4 sequences of L = 128, d_in = 256, d_k = 64, dropout 0.1, 32 heads per sequence,
fixed-length rows); wall seconds per layer, minimum of 5 repeats after a warm-up, and the largest relative
difference of the two results (rounding only).
"""

from __future__ import annotations

import time

import torch

from sigprop.components import attention_gram as ag

B, L, D, DK, P, HEADS = 4, 128, 256, 64, 0.1, 32


def main():
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(B, L, L // 2, generator=gen, dtype=torch.float64)
    gram = a @ a.transpose(-1, -2) / (L // 2) + 0.3  # a correlated, full-rank Gram matrix per sequence
    maps = ag._input_maps(gram, D)
    blocked = torch.zeros(B, 1, 1, L, dtype=torch.bool)
    sq = sk = 1.0 / D
    draws = ag.head_draws(HEADS, L, D, DK, True, 1)

    def rows():
        out = []
        for z, zq, zk, u in draws:
            o = ag.value_free_output(ag._sampled_input(maps, z, True), zq, zk, u, sq, sk, DK, P, blocked)
            out.append(o @ o.transpose(-1, -2))
        return torch.cat(out, dim=1)

    def grams():
        return torch.cat([ag._value_free_gram(maps, z, zq, zk, u, sq, sk, DK, P, blocked, True)
                          for z, zq, zk, u in draws], dim=1)

    def best(fn):
        fn()
        times = []
        for _ in range(5):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    t_rows, t_grams = best(rows), best(grams)
    r, g = rows(), grams()
    print(f"torch threads: {torch.get_num_threads()}; {B} sequences x {HEADS} heads, L = {L}, d_in = {D}, d_k = {DK}")
    print(f"row path   {t_rows:.3f} s per layer")
    print(f"Gram path  {t_grams:.3f} s per layer  ({t_rows / t_grams:.2f}x faster)")
    print(f"largest relative difference {float((r - g).abs().max() / r.abs().max()):.1e}")


if __name__ == "__main__":
    main()
