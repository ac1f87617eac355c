"""How much does a narrow model's output layer cost by itself? The softmax bottleneck of the `depth` widths.

A transformer of width d predicts log p(· | context) = Uᵀh + b with h ∈ R^d: over all contexts the matrix of
log-probabilities has rank ≤ d + 1, whatever the depth (Yang et al. 2018, "Breaking the softmax bottleneck"). At
constant N·d² the deep-thin shapes of `sigprop experiment depth` narrow d (128 → 64 → 32 at the CPU scale), so part of
a loss gap between shapes may come from the head's rank, not from depth.

This measures that part on the simplest context, the previous token: a factorised bigram model
p(b | a) = softmax(E_a U + c)_b with E ∈ R^{V×d}, trained to convergence (full-batch Adam on the training split's
bigram counts of the experiment's own corpus, tokenizer and train/validation split) and scored on the validation
split, for each d, beside the unfactorised bigram (counts with add-k smoothing, k chosen on validation). The gap
between rank d and the unfactorised model is what a width-d head loses on bigram statistics alone; a longer context
asks for more rank, not less, so it indicates the order of the width's cost, not a bound on it.

    python bench/softmax_bottleneck.py --widths 16 32 64 128 256 \
        --out docs/results/experiments/depth/softmax-bottleneck.json
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch

from sigprop.core.jsonio import write_json_atomic
from sigprop.model.config import TransformerConfig
from sigprop.train.config import TrainConfig
from sigprop.train.data import TextData


def bigram_counts(ids: np.ndarray, vocab: int) -> torch.Tensor:
    """V × V counts of (previous, next) token pairs of one id stream, float64."""
    flat = ids[:-1].astype(np.int64) * vocab + ids[1:].astype(np.int64)
    return torch.from_numpy(np.bincount(flat, minlength=vocab * vocab).reshape(vocab, vocab).astype(np.float64))


def cross_entropy(log_p: torch.Tensor, counts: torch.Tensor) -> float:
    """Mean negative log-likelihood in nats of the pairs in ``counts`` under row-wise log-probabilities ``log_p``."""
    return float(-(counts * log_p).sum() / counts.sum())


def smoothed_bigram(train: torch.Tensor, val: torch.Tensor) -> tuple[float, float]:
    """(validation loss, k) of the add-k bigram model, the k of a log grid that scores best on validation."""
    best = (math.inf, 0.0)
    for k in np.geomspace(1e-3, 1.0, 13):
        smoothed = train + k
        best = min(best, (cross_entropy(torch.log(smoothed / smoothed.sum(1, keepdim=True)), val), float(k)))
    return best


def factorised_bigram(train: torch.Tensor, val: torch.Tensor, d: int, steps: int, seed: int) -> dict:
    """Train p(b|a) = softmax(E_a U + c) of rank d on the training counts (full batch, Adam, cosine decay); the
    validation loss at the best step of every 25 (early stopping on validation: the bound is the model's best)."""
    vocab = train.shape[0]
    gen = torch.Generator().manual_seed(seed)
    emb = (torch.randn(vocab, d, generator=gen, dtype=torch.float64) / math.sqrt(d)).requires_grad_(True)
    out = (torch.randn(d, vocab, generator=gen, dtype=torch.float64) / math.sqrt(d)).requires_grad_(True)
    bias = torch.zeros(vocab, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([emb, out, bias], lr=0.03)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    total = train.sum()
    best_val, best_step, train_loss = math.inf, 0, math.nan
    for step in range(1, steps + 1):
        log_p = torch.log_softmax(emb @ out + bias, dim=1)
        loss = -(train * log_p).sum() / total
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 25 == 0 or step == steps:
            with torch.no_grad():
                v = cross_entropy(torch.log_softmax(emb @ out + bias, dim=1), val)
            if v < best_val:
                best_val, best_step, train_loss = v, step, float(loss.detach())
    return {"d": d, "val_loss": best_val, "best_step": best_step, "train_loss": train_loss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    parser.add_argument("--vocab", type=int, default=2048, help="the depth experiment's CPU vocabulary")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)

    config = TransformerConfig(arch="decoder", vocab_size=args.vocab, seq_len=128, max_len=128)
    data = TextData.from_corpus(config, TrainConfig(data="python"))
    train, val = bigram_counts(data.train_ids, args.vocab), bigram_counts(data.val_ids, args.vocab)
    unigram = train.sum(0) + 1.0
    rows = {"unigram": cross_entropy(torch.log(unigram / unigram.sum()).expand(args.vocab, -1), val)}
    full, k = smoothed_bigram(train, val)
    rows["bigram"] = full
    print(f"corpus: {len(data.train_ids):,} training / {len(data.val_ids):,} validation tokens, vocabulary "
          f"{args.vocab}; validation loss: unigram {rows['unigram']:.3f}, bigram (add-{k:.3g}) {full:.3f} nats")
    print("| head width d | rank-d bigram, validation loss | gap to the full bigram | best step | seconds |")
    print("|---:|---:|---:|---:|---:|")
    results = []
    for d in args.widths:
        start = time.perf_counter()
        r = factorised_bigram(train, val, d, args.steps, args.seed)
        r["seconds"] = time.perf_counter() - start
        results.append(r)
        print(f"| {d} | {r['val_loss']:.3f} | {r['val_loss'] - full:+.3f} | {r['best_step']} | {r['seconds']:.0f} |",
              flush=True)
    if args.out is not None:
        write_json_atomic(args.out, {"vocab": args.vocab, "steps": args.steps, "seed": args.seed,
                                     "train_tokens": int(len(data.train_ids)), "val_tokens": int(len(data.val_ids)),
                                     "unigram": rows["unigram"], "bigram": full, "bigram_k": k, "factorised": results})
        print(f"JSON: {args.out}")


if __name__ == "__main__":
    main()
