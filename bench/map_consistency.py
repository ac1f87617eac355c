"""Is each rule of the token-resolved forward sweep right where the real model is? A per-layer test of the maps.

Run: python bench/map_consistency.py [--preset fig4-dslm-pre] [--seeds 48] [--layers 10 50 100 150]
        [--set d_model=128 --set n_heads=2] [--heads 64]

A whole-model comparison cannot tell a small bias of one rule from the seed-to-seed spread of a deep stream (the
stream's token correlation differs by ~0.024 from one seed to the next at depth 100 of `fig4-dslm-pre`, so a bias of
0.003 needs ~600 seeds to reach three standard errors). A single map can be tested far more finely. For a rule f and
the seeds' actual inputs X_s with Gram matrices G_s, the sweep is unbiased where E_s[truth(X_s)] = f(E_s[G_s]); both
sides move together with the seeds' mean input, so their difference has a small spread. Per layer l of a Pre-LN
encoder preset, on the batch `compare` uses, with the seeds' dropout masks as `measure_seeds` draws them:

* LayerNorm (the attention's and the FFN's): the seeds' mean Gram of the norm's output against the LayerNorm rule
  (pairwise, :func:`sigprop.resolved.pairwise_forward`) on the seeds' mean Gram of its input. The rule lowers each
  pair's correlation r(G) = G_jl/√(G_jj G_ll) by the expected cosine's Olkin–Pratt term, r(1 − r²)/(2(d − 1)) to
  first order: what d independent Gaussian features give. ``xK`` says how many times that lowering the seeds show.
* Attention: the exact expectation over the layer's weights given each seed's actual input X_s (W_Q, W_K, dropout
  resampled on X_s, W_V averaged exactly: σ²_v (A X_s X_sᵀ Aᵀ), ``--heads`` draws per sequence) against the rule
  (:func:`sigprop.components.attention_gram.gram_attention`, fixed-length rows) on the seeds' mean input Gram. The
  rule resamples X with Gaussian rows; this tests whether that stands in for the real seed-to-seed spread of X.
* FFN (after its norm): given the seed's input the pre-activations are exactly Gaussian (W_1 is), so the pairwise
  rules on the seed's own input Gram give the exact expectation over the layer's weights; Δ is what the seeds'
  spread of that Gram adds (a Jensen term: the ReLU kernel is convex in the correlation).

Pooled as the measurement pools (diagonal = variance, off-diagonal = token covariance). Standard errors: jackknife
over seeds (the rule re-evaluated on each leave-one-out mean with the same draws), plus the rule's own sampling
error. For context, the stream entering the layer: the sweep's prediction of its token correlation against the
seeds' pooled one (jackknife SE), and how much a token's squared norm varies between seeds, as a multiple of what d
independent Gaussian features give.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch

from sigprop.components import attention_gram as ag
from sigprop.components.sequential import call_rule
from sigprop.experiment import token_batch
from sigprop.model import Transformer
from sigprop.model.config import apply_overrides
from sigprop.presets import PRESETS
from sigprop.resolved import forward_sweep, pairwise_forward
from sigprop.terminal import progress_bar


class _Captured(Exception):
    """Raised by the last hook: the layers above are not needed."""


def pooled(gram: torch.Tensor, keep: torch.Tensor) -> np.ndarray:
    """(pooled diagonal, pooled off-diagonal) of a (B, L, L) Gram matrix."""
    diag, off = ag.pooled_gram_means(gram[:, None].double(), keep)
    return np.array([float(diag[0]), float(off[0])])


def mean_without(t: torch.Tensor, s: int | None) -> torch.Tensor:
    """Mean over the seeds (axis 0) of ``t``, leaving seed ``s`` out (None: all seeds)."""
    return t.mean(0) if s is None else (t.sum(0) - t[s]) / (len(t) - 1)


def with_corr(v: np.ndarray) -> np.ndarray:
    """(variance, covariance) → (variance, covariance, correlation)."""
    return np.array([v[0], v[1], v[1] / v[0]])


def jackknife(stats: np.ndarray, value_without, f=lambda v: v) -> tuple[np.ndarray, np.ndarray]:
    """(estimate on all seeds, jackknife SE) of Δ = f(mean(stats)) − f(rule at the mean input);
    ``value_without(s)`` gives the rule on the inputs' mean without seed s (None: on all seeds)."""
    n = len(stats)
    full = f(stats.mean(0)) - f(value_without(None))
    reps = np.array([f((stats.sum(0) - stats[s]) / (n - 1)) - f(value_without(s)) for s in range(n)])
    return full, np.sqrt((n - 1) / n * ((reps - reps.mean(0)) ** 2).sum(0))


def _gram(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().double()
    return t @ t.transpose(-1, -2) / t.shape[-1]


def _capture(got: dict, layer: int, name: str, last: bool):
    """Forward hook of layer ``layer``'s ``name`` ("attn" / "ffn") norm: the Gram matrices of its input and output
    (and the attention norm's output rows) into ``got``; ``last`` stops the forward pass."""
    def hook(module, inputs, output):
        got[(layer, "stream" if name == "attn" else "ffn_in")] = _gram(inputs[0])
        got[(layer, f"{name}_norm")] = _gram(output)
        if name == "attn":
            got[(layer, "x")] = output.detach().double()
        if last:
            raise _Captured
    return hook


def exact_attention(mha, x: torch.Tensor, keep: torch.Tensor, heads: int, seed: int) -> torch.Tensor:
    """E over W_Q, W_K, W_V and the attention dropout of one head's per-element output Gram, given the actual input
    rows ``x`` (B, L, d): W_V averaged exactly, the rest sampled (``heads`` draws per sequence)."""
    sq, sk, sv = (float(np.asarray(v)) for v in mha._declared())
    p, d_k = float(mha.dropout_p), mha.d_head
    B, L, d = x.shape
    blocked = ~keep[:, None, None, :]
    if mha.causal:
        blocked = blocked | torch.ones(L, L, dtype=torch.bool).triu(1)
    total = torch.zeros(B, L, L, dtype=torch.float64)
    for _, zq, zk, u in ag._draws(heads, L, d, d_k, p > 0.0, seed):
        o = ag._value_free(x[:, None], zq, zk, u, sq, sk, d_k, p, blocked)
        total += sv * (o @ o.transpose(-1, -2)).sum(1)
    return total / heads


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
    except ValueError as err:
        ap.error(str(err))
    if cfg.arch != "encoder" or cfg.norm_position != "pre" or cfg.norm != "layernorm":
        ap.error("a Pre-LN LayerNorm encoder is needed (its attention and FFN read a norm's output)")
    if args.seeds < 3 or any(not 0 <= layer < cfg.n_layers for layer in args.layers):
        ap.error(f"--seeds >= 3 and layers in [0, {cfg.n_layers}) are needed")
    layers = sorted(set(args.layers))
    batch = token_batch(cfg, preset.batch_size)
    keep = torch.ones(batch["inputs"].shape, dtype=torch.bool)
    theory = Transformer(cfg, sample=False)
    B = batch["inputs"].shape[0]
    with progress_bar() as bar:
        task = bar.add_task("forward sweep (theory)", total=cfg.n_layers)
        sweep = forward_sweep(theory, batch["inputs"], batch.get("segment_ids"),
                              progress=lambda k: bar.advance(task, k))
    sites = ("stream", "attn_norm", "ffn_in", "ffn_norm")
    grams = {(layer, s): [] for layer in layers for s in sites}
    attn_truth = {layer: [] for layer in layers}
    with progress_bar() as bar:
        task = bar.add_task(f"{args.seeds} models of {args.preset}", total=args.seeds)
        for seed in range(args.seeds):
            model = Transformer(cfg, generator=torch.Generator().manual_seed(seed)).train()
            torch.manual_seed(10_000 + seed)  # the dropout masks measure_seeds draws
            got, hooks = {}, []
            for layer in layers:
                blocks = model.layers[layer]
                for name, norm in (("attn", blocks.attn.branch.norm), ("ffn", blocks.ffn.branch.norm)):
                    last = name == "ffn" and layer == layers[-1]
                    hooks.append(norm.register_forward_hook(_capture(got, layer, name, last)))
            try:
                with torch.no_grad():
                    model.loss(batch)
            except _Captured:
                pass
            for h in hooks:
                h.remove()
            for layer in layers:
                for s in sites:
                    grams[(layer, s)].append(got[(layer, s)])
                mha = model.layers[layer].attn.branch.attn
                attn_truth[layer].append(pooled(exact_attention(mha, got[(layer, "x")], keep, args.heads,
                                                                seed=7_000 + seed), keep))
            bar.advance(task)
    print(f"{args.preset}{''.join(f' {kv}' for kv in args.set)}: d = {cfg.d_model}, {args.seeds} seeds, "
          f"batch {B} x {cfg.seq_len}; Δ = seeds' mean − rule on the seeds' mean input (jackknife SE)")
    print("layer | stream corr: sweep / seeds ± SE | norm² spread | attn LN corr Δ ± SE (z) xK | "
          "FFN LN corr Δ ± SE (z) xK | attention var Δ% ± SE (z) | attention corr Δ ± SE (z) | FFN var Δ% / cov Δ%")
    print("      (norm² spread: the variance over seeds of a token's |x|²/d, relative to its mean², averaged over the "
          "tokens, as a multiple of d Gaussian features' 2/d)")
    print("      (xK: how many times the Gaussian rule's lowering of the correlation by the norm, r(1 − r²)/(2(d − 1)) "
          "to first order, the seeds' LayerNorm lowers it)")
    for layer in layers:
        stream = torch.stack(grams[(layer, "stream")])
        per_seed = np.array([pooled(g, keep) for g in stream])
        total, n = per_seed.sum(0), len(per_seed)
        loo = np.array([(total[1] - row[1]) / (total[0] - row[0]) for row in per_seed])  # leave one seed out
        corr_se = math.sqrt((n - 1) / n * ((loo - loo.mean()) ** 2).sum())
        th = pooled(sweep.layer_inputs[layer][0], keep)
        norms = torch.diagonal(stream, dim1=-2, dim2=-1)  # (seeds, B, L): |x_j|²/d
        spread = float((norms.var(0) / norms.mean(0) ** 2).mean()) / (2.0 / cfg.d_model)
        cells = [f"{th[1] / th[0]:.4f} / {total[1] / total[0]:.4f} ± {corr_se:.4f} | {spread:.2f}"]
        for inp, out, norm in (("stream", "attn_norm", theory.layers[layer].attn.branch.norm),
                               ("ffn_in", "ffn_norm", theory.layers[layer].ffn.branch.norm)):
            g_in, g_out = torch.stack(grams[(layer, inp)]), torch.stack(grams[(layer, out)])
            stats = np.array([pooled(g, keep) for g in g_out])

            def ln_rule(s, g_in=g_in, norm=norm):
                return pooled(pairwise_forward(norm.forward_moments, mean_without(g_in, s), L=cfg.seq_len), keep)

            delta, se = jackknife(stats, ln_rule)
            mean = g_in.mean(0)
            root = torch.diagonal(mean, dim1=-2, dim2=-1).sqrt()
            lowering = pooled(mean / (root[..., :, None] * root[..., None, :]), keep)[1] - ln_rule(None)[1]
            times = (lowering - delta[1]) / lowering
            cells.append(f"{delta[1]:+.5f} ± {se[1]:.5f} ({delta[1] / se[1]:+.1f}) x{times:.1f}")
        mha = theory.layers[layer].attn.branch.attn
        x_grams = torch.stack(grams[(layer, "attn_norm")])

        def attn_rule(s, x_grams=x_grams, mha=mha, seed=99):
            sq, sk, sv = (float(np.asarray(v)) for v in mha._declared())
            res = ag.gram_attention(mean_without(x_grams, s), mha.d_in, mha.d_head, sq, sk, sv,
                                    float(mha.dropout_p), mha.causal, None, args.heads, seed, fixed_norm=True)
            return pooled(res.gram, keep)

        truth = np.array(attn_truth[layer])
        delta, se = jackknife(truth, attn_rule, with_corr)
        # the rule's own sampling error: its spread over six draws at the seeds' mean input
        draws = np.array([with_corr(attn_rule(None, seed=99 + i)) for i in range(6)])
        se = np.hypot(se, draws.std(0, ddof=1))
        ref = with_corr(truth.mean(0))
        cells += [f"{100 * delta[0] / ref[0]:+.2f}% ± {100 * se[0] / ref[0]:.2f}% ({delta[0] / se[0]:+.1f})",
                  f"{delta[2]:+.5f} ± {se[2]:.5f} ({delta[2] / se[2]:+.1f})"]
        ffn_grams = torch.stack(grams[(layer, "ffn_norm")])
        after_norm = list(theory.layers[layer].ffn.branch.children())[1:]

        def after_norm_rule(m, after_norm=after_norm, **context):
            for child in after_norm:
                m = call_rule(child.forward_moments, m, **context)
            return m

        def ffn_rule(gram, rule=after_norm_rule):
            return pooled(pairwise_forward(rule, gram, L=cfg.seq_len), keep)

        truth = np.array([ffn_rule(g) for g in ffn_grams])  # exact given the seed's input: W_1 is Gaussian
        delta, se = jackknife(truth, lambda s, g=ffn_grams, f=ffn_rule: f(mean_without(g, s)))
        ref = truth.mean(0)
        cells.append(" / ".join(f"{100 * delta[i] / ref[i]:+.2f}% ± {100 * se[i] / ref[i]:.2f}%" for i in (0, 1)))
        print(f"{layer:5d} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
