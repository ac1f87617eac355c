"""The gradient an encoder–decoder's encoder output (the memory) receives, decoder layer by decoder layer: theory
(the sampled cross-attention rule's memory gradient, as ``sigprop.predict`` sums it) against measurement (each
decoder layer reads its own copy of the memory, so autograd returns each layer's share), and the check that the
shares add (the walker assumes zero cross terms between layers).

    python bench/encdec_memory_gradient.py [--encoder 8] [--decoder 24] [--seeds 16] [--width 256]

Pre-LN, Xavier, dropout 0.1, 4 sequences of 128 real tokens of the default corpus; gradient boundary from theory.
Prints per decoder layer the predicted and measured variance and token correlation of the memory gradient (with
the standard error over seeds), the total, and (sum of the measured per-layer variances) / (measured total).
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch
import torch.nn.functional as F

from sigprop.analysis.experiment import predict_for_batch
from sigprop.core.moments import GradMoments, independent_grad_sum
from sigprop.measurement.hooks import masked_sums, pool_sums
from sigprop.model import Transformer, TransformerConfig
from sigprop.model.batches import token_batch


def measured_shares(config: TransformerConfig, batch: dict, seed: int):
    """Per decoder layer, the sums of ∂Loss/∂memory through that layer only; and of the total."""
    model = Transformer(config, generator=torch.Generator().manual_seed(seed))
    model.train()
    torch.manual_seed(10_000 + seed)
    x = model.embed_drop(model.embed(batch.inputs))
    for layer in model.layers:
        x = layer(x)
    memory = model.enc_norm(x)
    copies = [memory.detach().clone().requires_grad_(True) for _ in model.dec_layers]
    y = model.dec_embed_drop(model.embed(batch.decoder_inputs))
    for layer, mem in zip(model.dec_layers, copies, strict=True):
        y = layer(y, memory=mem)
    logits = model.head(model.final_norm(y) * model.head_scale)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.labels.reshape(-1), ignore_index=-100)
    grads = torch.autograd.grad(loss, copies)
    return [masked_sums(g) for g in grads], masked_sums(sum(grads))


def predicted_shares(config: TransformerConfig, batch: dict):
    """The memory-gradient moments of each decoder layer's cross-attention (bottom layer first) and their sum, as
    predicted (``meta["memory_gradient"]``)."""
    shares = [GradMoments(var=s["var"], corr=s["corr"])
              for s in predict_for_batch(config, batch).meta["memory_gradient"]]
    return shares, independent_grad_sum([(1.0, s) for s in shares])


def mean_se(sums) -> tuple[float, float]:
    v = np.array([s.var() for s in sums])
    return pool_sums(sums).var(), float(v.std(ddof=1) / math.sqrt(len(v)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", type=int, default=8)
    ap.add_argument("--decoder", type=int, default=24)
    ap.add_argument("--seeds", type=int, default=16)
    ap.add_argument("--width", type=int, default=256)
    args = ap.parse_args()
    if args.seeds < 2:
        ap.error("--seeds must be >= 2 (standard errors)")
    config = TransformerConfig(arch="encoder_decoder", n_layers=args.encoder, n_decoder_layers=args.decoder,
                               d_model=args.width, n_heads=4, dropout=0.1, seq_len=128, max_len=128,
                               vocab_size=8192, norm_position="pre", init="xavier")
    batch = token_batch(config, batch_size=4, seed=0)
    shares, totals = [[] for _ in range(args.decoder)], []
    for s in range(args.seeds):
        per_layer, total = measured_shares(config, batch, s)
        for lst, sums in zip(shares, per_layer, strict=True):
            lst.append(sums)
        totals.append(total)
    pred, pred_total = predicted_shares(config, batch)
    print(f"encoder {args.encoder} + decoder {args.decoder} layers, d = {args.width}, {args.seeds} seeds; memory "
          "gradient per decoder layer (variance, token correlation)")
    print(f"{'layer':>5} {'theory var':>11} {'measured var':>13} {'± SE':>9} {'ratio':>6} {'theory r':>9} "
          f"{'measured r':>10}")
    for j, (g, sums) in enumerate(zip(pred, shares, strict=True)):
        mv, se = mean_se(sums)
        print(f"{args.encoder + j:5d} {float(g.var):11.4g} {mv:13.4g} {se:9.2g} {float(g.var) / mv:6.3f} "
              f"{float(g.corr):9.3f} {pool_sums(sums).corr():10.3f}")
    mv, se = mean_se(totals)
    pv = float(pred_total.var)
    print(f"total: theory {pv:.4g}, measured {mv:.4g} ± {se:.2g} (ratio {pv / mv:.3f}, {(pv - mv) / se:+.1f} SE); "
          f"token correlation {float(pred_total.corr):.3f} vs {pool_sums(totals).corr():.3f}")
    added = sum(pool_sums(s).var() for s in shares)
    print(f"measured total / sum of the measured per-layer variances: {mv / added:.4f} (cross terms between layers)")


if __name__ == "__main__":
    main()
