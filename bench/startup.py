"""Start-up cost of the package and the command line against the heavy libraries it loads only on demand, in one run.

    python bench/startup.py [--runs 10]

Times, as separate processes run in turn (start-up included, wall clock; the median of ``--runs``):
``python -c "import sigprop"``, ``sigprop --help``, ``sigprop compare --help``, and ``python -c "import torch,
scipy.stats, matplotlib"`` (what every command would pay if the package imported them up front), and prints each
median with its ratio to the last. Results on the 2-core CPU: docs/results/performance.md.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "import sigprop": [sys.executable, "-c", "import sigprop"],
    "sigprop --help": [sys.executable, "-m", "sigprop", "--help"],
    "sigprop compare --help": [sys.executable, "-m", "sigprop", "compare", "--help"],
    "import torch, scipy.stats, matplotlib": [sys.executable, "-c", "import torch, scipy.stats, matplotlib"],
}


def wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    for command in COMMANDS.values():  # warm the file cache
        wall(command)
    times = {name: [] for name in COMMANDS}
    for _ in range(args.runs):  # interleaved, so drift of the machine's speed hits every command alike
        for name, command in COMMANDS.items():
            times[name].append(wall(command))
    heavy = statistics.median(times["import torch, scipy.stats, matplotlib"])
    print(f"{'command':40s} {'median s':>9s} {'min s':>7s} {'max s':>7s}  ÷ heavy imports")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:40s} {median:9.3f} {min(values):7.3f} {max(values):7.3f}  {median / heavy:8.3f}")


if __name__ == "__main__":
    main()
