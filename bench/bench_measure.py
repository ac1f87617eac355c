"""Benchmark: the overhead of sigprop.measure's on-the-fly statistics over a plain forward + backward.

Run: python bench/bench_measure.py [--layers 48] [--width 128] [--batch 8] [--seq 128] [--repeats 7] [--threads 1]
Builds ``sigprop.Transformer(sigprop.TransformerConfig(...))``, then times, interleaved and from the same seed,
after a warm-up:

* plain     model.loss(batch).backward()                            (parameter gradients, no statistics)
* recorder  the same inside ``with Recorder(model, mask=...)``      (statistics at every site, forward + gradient)
* measure   ``sigprop.measure(model, batch)``               (statistics; backward w.r.t. the sites only)

and prints the median seconds of each and the ratios recorder / plain and measure / plain measured in this run (as
a ratio of medians, a median of the per-round ratios and a ratio of minima), plus the one-off cost of
``Recorder.profile()`` (the only host synchronisation). On CPU it also prints the ratios of median process CPU
time, which other processes on a shared machine disturb less, and the time spent inside the statistics themselves
(the hooks' tensor operations and the batched float64 finish, timed around the calls in the recorder mode) as a
share of the plain step: on a shared CPU, where the ratios move by ±5% from run to run, that share is the
stable part of the overhead (the rest is the hooks' dispatch and cache effects). Raise --repeats on a noisy machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from sigprop.measurement import hooks as measurement
from sigprop.measurement.hooks import Recorder, measure
from sigprop.model import Transformer, TransformerConfig, make_batch


def build_model(layers, width, heads, vocab, seq, dropout):
    """(model, batch builder, description): a sigprop.Transformer encoder of this size."""
    cfg = TransformerConfig(n_layers=layers, d_model=width, n_heads=heads, vocab_size=vocab, max_len=seq,
                            seq_len=seq, dropout=dropout)
    return Transformer(cfg), (lambda ids, mask: make_batch(cfg, ids, padding_mask=mask)), "sigprop.Transformer"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--padding", type=float, default=0.25,
                        help="fraction of sequences whose last quarter is padding (0 = no mask)")
    parser.add_argument("--repeats", type=int, default=7, help="timed passes per mode (median reported)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if args.repeats < 5:
        parser.error("--repeats must be >= 5")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dev = torch.device(args.device)
    model, make, kind = build_model(args.layers, args.width, args.heads, args.vocab, args.seq, args.dropout)
    model.to(dev).train()
    ids = torch.randint(2, args.vocab, (args.batch, args.seq), device=dev)
    mask = None
    if args.padding > 0:
        mask = torch.ones(args.batch, args.seq, dtype=torch.bool, device=dev)
        mask[: max(1, round(args.padding * args.batch)), -(args.seq // 4):] = False
    batch = make(ids, mask)
    if kind == "stand-in" and mask is None:
        batch = (ids, torch.ones_like(ids, dtype=torch.bool))

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def plain():
        model.loss(batch).backward()
        model.zero_grad(set_to_none=True)

    recorders = []
    inside = []  # seconds inside the statistics per recorder pass (CPU only: on GPU the calls are asynchronous)

    def timed(fn, spent):
        def wrapper(*args):
            t0 = time.perf_counter()
            out = fn(*args)
            spent[0] += time.perf_counter() - t0
            return out
        return wrapper if dev.type == "cpu" else fn

    def recorded():
        spent = [0.0]
        raw_sums, finish = measurement._raw_sums, measurement._finish
        measurement._raw_sums, measurement._finish = timed(raw_sums, spent), timed(finish, spent)
        try:
            with Recorder(model, mask=mask) as rec:
                model.loss(batch).backward()
        finally:
            measurement._raw_sums, measurement._finish = raw_sums, finish
        model.zero_grad(set_to_none=True)
        recorders.append(rec)
        inside.append(spent[0])

    def measured():
        measure(model, batch, mask=mask)

    modes = {"plain": plain, "recorder": recorded, "measure": measured}
    times = {k: [] for k in modes}
    cpu = {k: [] for k in modes}
    for fn in modes.values():  # warm-up: allocator growth, lazy inits
        torch.manual_seed(1)
        fn()
    sync()
    names = list(modes)
    for r in range(args.repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:  # rotate the order: no mode always first
            torch.manual_seed(1)
            sync()
            t0, c0 = time.perf_counter(), time.process_time()
            modes[name]()
            sync()
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    t0 = time.perf_counter()
    recorders[-1].profile()
    t_profile = time.perf_counter() - t0
    med = {k: statistics.median(v) for k, v in times.items()}
    n_sites = len(model.sites())
    print(f"model: {kind}, {args.layers} layers, d={args.width}, batch {args.batch}x{args.seq}, {n_sites} sites, "
          f"device {dev}, {args.threads} thread(s), mask {'yes' if mask is not None else 'no'}, "
          f"{args.repeats} interleaved repeats")
    for k in modes:
        print(f"  {k:9s} median {med[k]:8.4f} s   (min {min(times[k]):.4f}, max {max(times[k]):.4f})")
    for k, note in (("recorder", ""), ("measure", "   (backward w.r.t. the site tensors only)")):
        paired = statistics.median(a / b for a, b in zip(times[k], times["plain"], strict=True))
        print(f"  {k:8s} / plain = {med[k] / med['plain']:.3f} (ratio of medians), {paired:.3f} (median of "
              f"per-round ratios), {min(times[k]) / min(times['plain']):.3f} (ratio of minima){note}")
    if dev.type == "cpu":
        print("  process CPU time (less sensitive to other processes on a shared machine): " + ", ".join(
            f"{k} / plain = {statistics.median(cpu[k]) / statistics.median(cpu['plain']):.3f}"
            for k in ("recorder", "measure")))
    if dev.type == "cpu":
        print(f"  inside the statistics (recorder mode): {statistics.median(inside):.4f} s per pass = "
              f"{statistics.median(inside) / med['plain']:.3f} of plain (median)")
    print(f"  Recorder.profile(): {t_profile:.4f} s once per profile")


if __name__ == "__main__":
    main()
