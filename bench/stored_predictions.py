"""Do the stored comparisons in docs/results/ still reproduce? Reruns ``sigprop compare --measured FILE`` for every
stored comparison (its flags read back from the file's own meta: exchangeable or token-resolved sweeps, the gradient
boundary) and reports, per file, the largest relative difference of each predicted column from the stored one.

    python bench/stored_predictions.py --out /tmp/now                  # against the files in docs/results/
    python bench/stored_predictions.py --out /tmp/after --against /tmp/now   # against an earlier run of this script

A prediction that nothing changed on purpose reproduces to the last bits (≤ 1e-12 relative); the sampled rules
draw from fixed seeds, so they reproduce too. ``--only NAME`` (repeatable) limits the run to files whose name
contains NAME.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ("pred_fwd_mean", "pred_fwd_var", "pred_fwd_corr", "pred_grad_var", "pred_grad_corr")


def stored_files() -> list[Path]:
    docs = ROOT / "docs" / "results"
    return sorted(docs.glob("compare-*.json")) + sorted(docs.glob("*/compare-*.json"))


def flags_for(data: dict) -> list[str]:
    """The ``compare`` flags that made a stored comparison, read from its predicted meta."""
    meta, config = data["predicted_meta"], data["config"]
    flags = []
    if str(meta.get("forward_state", "")).startswith("exchangeable"):
        flags.append("--exchangeable")
    elif (str(meta.get("backward_state", "")).startswith("token-resolved") and config["arch"] == "encoder"
          and config["input"] == "tokens"):
        flags.append("--token-resolved")
    if not str(meta.get("grad_source", "")).startswith("measured"):
        flags += ["--grad-boundary", "theory"]
    return flags


def max_rel(a: list[dict], b: list[dict]) -> dict[str, float]:
    """Largest |a − b| / |b| per predicted column over the rows (0 where both are 0; NaN equal to NaN)."""
    out = {}
    for col in COLUMNS:
        worst = 0.0
        for ra, rb in zip(a, b, strict=True):
            x, y = ra.get(col), rb.get(col)
            if x is None and y is None:
                continue
            if x is None or y is None or (math.isnan(x) != math.isnan(y)):
                worst = math.inf
                continue
            if math.isnan(x) or x == y:
                continue
            worst = max(worst, abs(x - y) / max(abs(y), 1e-300))
        out[col] = worst
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the fresh comparison JSONs")
    parser.add_argument("--against", type=Path, help="compare with this earlier --out folder instead of docs/results/")
    parser.add_argument("--only", action="append", default=[], help="only files whose name contains this")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    files = [f for f in stored_files() if not args.only or any(s in str(f) for s in args.only)]
    worst_all = 0.0
    for path in files:
        data = json.loads(path.read_text())
        name = str(path.relative_to(ROOT / "docs" / "results")).replace("/", "__")
        out = args.out / name
        cmd = [sys.executable, "-m", "sigprop", "compare", "--measured", str(path), "--json", str(out),
               *flags_for(data)]
        start = time.perf_counter()
        if not out.exists():
            run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if run.returncode != 0:
                print(f"{name}: FAILED ({' '.join(cmd[3:])})\n{run.stderr[-2000:]}{run.stdout[-2000:]}", flush=True)
                continue
        seconds = time.perf_counter() - start
        reference = json.loads((args.against / name).read_text()) if args.against else data
        diffs = max_rel(json.loads(out.read_text())["per_layer"], reference["per_layer"])
        worst = max(diffs.values())
        worst_all = max(worst_all, worst)
        cells = "  ".join(f"{c.removeprefix('pred_')} {v:.1e}" for c, v in diffs.items())
        print(f"{name:48s} {seconds:6.1f} s  max rel {worst:.1e}  ({cells})  {' '.join(flags_for(data))}",
              flush=True)
    print(f"largest relative difference over {len(files)} files: {worst_all:.2e}")


if __name__ == "__main__":
    main()
