"""Where the seed-to-seed spread of a Post-LN gradient comes from: one layer's backward gain, redrawn.

    python bench/postln_gain_spread.py [--width 128] [--layers 48] [--seeds 16] [--draws 64]

In a Post-LN stack log σ²_g(l) of one weight draw is a sum of per-layer log gains, so its spread across seeds
(docs/results/accuracy.md, "Post-LN gradients: the spread across seeds") is the sum of the per-layer gains' variances
(plus their covariances). This script measures, for Post-LN Xavier on 4 × 128 real tokens with dropout 0.1:

* *across seeds*: the variance over ``--seeds`` whole models of each layer's log gain log(σ²_g(l−1)/σ²_g(l)), averaged
  over the layers, and the variance of log σ²_g(0)/σ²_g(top) against the sum of the per-layer ones (1 if the layers'
  gains are uncorrelated);
* *one layer redrawn*, at the middle layer, over ``--draws`` fresh draws of that layer's weights and dropout masks,
  its log gain |∂⟨G, layer(X)⟩/∂X|²/|G|² with:
  - X, G: the input and output gradient of that layer in a real model (two seeds);
  - the same with X and G each turned by a random rotation of the feature space (Gram matrices kept);
  - Gaussian rows with the expected token Gram matrices of the theory's token-resolved sweeps (forward, and the
    backward from the masked-LM loss), normalised per token like a LayerNorm output;
  - Gaussian rows with one correlation for every token pair (the exchangeable state's r and r_g).

What it shows (docs/results/postln-gain-spread.txt): a layer's fresh weights, given the X and G a real model feeds it,
reproduce the per-layer spread across seeds, and rotations that keep the Gram matrices keep it; Gaussian rows with
the *expected* Gram matrices give about a third of it. The spread lives in how each seed's own Gram matrices (which
tokens carry the gradient, how strongly) differ from their expectation: a state of expectations cannot predict the
typical seed, a fluctuation (four-point) state would have to.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch

from sigprop.measurement.hooks import measure
from sigprop.model.batches import token_batch
from sigprop.model.config import TransformerConfig
from sigprop.model.transformer import Transformer
from sigprop.theory.boundaries import head_gradient_gram
from sigprop.theory.resolved import gram_moments
from sigprop.theory.sweep import backward_sweep, gram_forward_sweep


def seed_log_gains(config, batch, seeds: int) -> np.ndarray:
    """(seeds, layers) log σ²_g at each layer output, per seed."""
    out = []
    for s in range(seeds):
        model = Transformer(config, generator=torch.Generator().manual_seed(s))
        model.train()
        torch.manual_seed(10_000 + s)
        rows = {r.layer: r for r in measure(model, batch).rows if r.site == "layer"}
        out.append([math.log(rows[i].grad_var) for i in range(config.n_layers)])
    return np.array(out)


def real_inputs(config, batch, seed: int, k: int):
    """(X, G, kwargs) of layer ``k`` in the model of ``seed``: its input and the loss gradient at its output."""
    model = Transformer(config, generator=torch.Generator().manual_seed(seed))
    model.train()
    torch.manual_seed(10_000 + seed)
    store = {}

    def before(module, args, kwargs):
        store.update(x=args[0].detach(), kwargs=kwargs)

    def after(module, args, kwargs, out):
        out.retain_grad()
        store["y"] = out

    hooks = [model.layers[k].register_forward_pre_hook(before, with_kwargs=True),
             model.layers[k].register_forward_hook(after, with_kwargs=True)]
    model.loss(batch).backward()
    for h in hooks:
        h.remove()
    return store["x"], store["y"].grad.detach(), store["kwargs"]


def rotated(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(t.shape[-1], t.shape[-1], generator=gen, dtype=torch.float64))
    return (t.double() @ q).float()


def gaussian_rows(gram: torch.Tensor, d: int, gen: torch.Generator) -> torch.Tensor:
    """Rows with per-element token Gram ``gram`` (B, L, L): C Z with C Cᵀ = gram, Z i.i.d. N(0, 1) (L × d)."""
    ev, vec = torch.linalg.eigh(gram)
    c = vec * ev.clamp_min(0.0).sqrt()[..., None, :]
    return (c @ torch.randn(gram.shape[0], gram.shape[-1], d, generator=gen, dtype=torch.float64)).float()


def as_given(x, g, kwargs):
    return lambda gen: (x, g, kwargs)


def turned(x, g, kwargs):
    return lambda gen: (rotated(x, gen), rotated(g, gen), kwargs)


def layer_norm_rows(x: torch.Tensor) -> torch.Tensor:
    x = x - x.mean(-1, keepdim=True)
    return x / x.std(-1, keepdim=True, unbiased=False)


def redrawn_gains(model, k: int, make, draws: int) -> np.ndarray:
    """Log gains of layer ``k`` of ``model`` over ``draws`` fresh draws of its weights (the whole plan is redrawn;
    only layer k is run), with (X, G, kwargs) = make(generator) per draw."""
    out = []
    for i in range(draws):
        gen = torch.Generator().manual_seed(1000 + i)
        model.plan.apply(model, gen)
        x, g, kwargs = make(gen)
        x = x.clone().requires_grad_(True)
        (gx,) = torch.autograd.grad(model.layers[k](x, **kwargs), x, g)
        out.append(math.log(float(gx.pow(2).sum() / g.pow(2).sum())))
    return np.array(out)


def line(label: str, gains: np.ndarray) -> str:
    v = gains.var(ddof=1)
    return f"  {label:<68} {v:.4f} ± {v * math.sqrt(2 / (len(gains) - 1)):.4f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--draws", type=int, default=64)
    args = ap.parse_args()
    d = args.width
    config = TransformerConfig(norm_position="post", init="xavier", n_layers=args.layers, d_model=d,
                               n_heads=max(1, d // 64), seq_len=128)
    batch = token_batch(config, batch_size=4)
    k = args.layers // 2
    logs = seed_log_gains(config, batch, args.seeds)
    steps = logs[:, :-1] - logs[:, 1:]
    per_layer = steps.var(axis=0, ddof=1)
    total = (logs[:, 0] - logs[:, -1]).var(ddof=1)
    print(f"Post-LN Xavier, d = {d}, {args.layers} layers, 4 × 128 real tokens, dropout 0.1")
    print(f"across {args.seeds} seeds: variance of a layer's log gain, mean over layers {per_layer.mean():.4f} "
          f"(layer {k}: {per_layer[k - 1]:.4f}); log σ²_g(0)/σ²_g(top): {total:.3f} against the layers' sum "
          f"{per_layer.sum():.3f} (ratio {total / per_layer.sum():.2f})")
    print(f"layer {k} redrawn {args.draws} times: variance of its log gain")
    model = Transformer(config, generator=torch.Generator().manual_seed(0))
    model.train()
    for seed in (0, 1):
        x, g, kw = real_inputs(config, batch, seed, k)
        print(line(f"seed {seed}'s X and G", redrawn_gains(model, k, as_given(x, g, kw), args.draws)))
        print(line(f"seed {seed}'s X and G, each rotated (Gram matrices kept)",
                   redrawn_gains(model, k, turned(x, g, kw), args.draws)))
    theory = Transformer(config, sample=False)
    sweep = gram_forward_sweep(theory, batch.inputs, attention_heads=16, pooled=False)
    gram_in = sweep.stacks[0].saved[k].value.clone()
    grads = backward_sweep(theory, sweep, head_gradient_gram(theory, sweep.output, batch.labels)).rows
    gram_g = grads[(k, "layer")]
    print(line("Gaussian rows, the expected token-resolved Gram matrices",
               redrawn_gains(model, k, lambda gen: (layer_norm_rows(gaussian_rows(gram_in, d, gen)),
                                                    gaussian_rows(gram_g, d, gen), {}), args.draws)))
    r, r_g = gram_moments(gram_in).corr, gram_moments(gram_g).corr
    B, L = batch.inputs.shape
    uniform = lambda c: (1 - c) * torch.eye(L, dtype=torch.float64) + c * torch.ones(L, L, dtype=torch.float64)  # noqa: E731
    print(line(f"Gaussian rows, one correlation per state (r = {r:.3f}, r_g = {r_g:.3f})",
               redrawn_gains(model, k, lambda gen: (layer_norm_rows(gaussian_rows(uniform(r).expand(B, L, L), d, gen)),
                                                    gaussian_rows(uniform(r_g).expand(B, L, L), d, gen), {}),
                             args.draws)))


if __name__ == "__main__":
    main()
