"""Benchmark: how many configurations to simulate as one tensor, and the cost of each component's sweep.

Run: python bench/bench_verify.py [--configs N] [component ...]
Prints, for each component, milliseconds per configuration when configurations are simulated one at a time and in
batches of 4, 16 and 64 per tensor, and each batch size's speed-up over one at a time, all measured in this run.
"""

from __future__ import annotations

import argparse
import time

from sigprop.verify.harness import run_component
from sigprop.verify.registry import available, load_spec

GROUPS = (1, 4, 16, 64)


def ms_per_config(spec, n, max_group):
    t0 = time.perf_counter()
    run_component(spec, n_configs=n, max_group=max_group, seed=3)
    return 1000 * (time.perf_counter() - t0) / n


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("components", nargs="*", default=["dropout", "relu", "dyt", "layernorm"])
    parser.add_argument("--configs", type=int, default=64)
    args = parser.parse_args()
    names = [c for c in args.components if c in available()]
    run_component(load_spec(names[0]), n_configs=4, seed=0)  # warm-up: one-time imports and allocator growth
    print(f"{'component':12s}" + "".join(f"{f'{g}/tensor ms':>14s}" for g in GROUPS)
          + "".join(f"{f'x{g} vs 1':>10s}" for g in GROUPS[1:]))
    for name in names:
        spec = load_spec(name)
        ms = [ms_per_config(spec, args.configs, g) for g in GROUPS]
        print(f"{name:12s}" + "".join(f"{m:14.1f}" for m in ms) + "".join(f"{ms[0] / m:9.2f}x" for m in ms[1:]))


if __name__ == "__main__":
    main()
