"""Benchmark: batched configurations vs one configuration at a time, and the cost of each component's sweep.

Run: python bench/bench_verify.py [--configs N] [component ...]
Prints, for each component, the seconds per configuration when configurations are simulated as one batched tensor
(the default) and when they are simulated one by one, and their ratio, all measured in this run.
"""

from __future__ import annotations

import argparse
import time

from sigprop.verify.harness import run_component
from sigprop.verify.registry import available, load_spec


def seconds(spec, n, max_group):
    t0 = time.perf_counter()
    run_component(spec, n_configs=n, max_group=max_group, seed=3)
    return time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("components", nargs="*", default=["dropout", "relu", "layernorm"])
    parser.add_argument("--configs", type=int, default=32)
    args = parser.parse_args()
    names = [c for c in args.components if c in available()]
    print(f"{'component':12s} {'batched s/config':>17s} {'one-by-one s/config':>20s} {'speed-up':>9s}")
    for name in names:
        spec = load_spec(name)
        batched = seconds(spec, args.configs, max_group=64) / args.configs
        single = seconds(spec, args.configs, max_group=1) / args.configs
        print(f"{name:12s} {batched:17.4f} {single:20.4f} {single / batched:8.2f}x")


if __name__ == "__main__":
    main()
