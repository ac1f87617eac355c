"""Keep what `sigprop experiment doctor-fixes` measured as the doctor's evidence: each case's flagged and fixed model
at its best rate (final validation loss per seed, fates), read from the experiment's stored summary and written to
``sigprop/analysis/fix_outcomes.json`` (package data: an installed sigprop's doctor reads it too), and the table
"flagged → fixed" written from those outcomes to ``docs/results/experiments/doctor-fixes/outcomes.md``.

    PYTHONPATH=. python bench/fix_outcomes.py [--results docs/results/experiments/doctor-fixes/results.json]

Only a case whose two models are both settled (their best rate interior and the scale's seeds trained at it, or no
rate trained down to the lowest the scale tries: :func:`sigprop.experiments.summary.settled`) is kept; the doctor
says "not measured in training" of the others.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from sigprop.analysis.fix_cases import FIX_CASES, OUTCOMES_FILE, FixOutcome, load_outcomes, outcomes_markdown
from sigprop.core.jsonio import write_json_atomic, write_text_atomic
from sigprop.experiments.runner import RunResult
from sigprop.experiments.summary import seed_losses

PAGE = Path(__file__).resolve().parents[1] / "docs" / "results" / "experiments" / "doctor-fixes"
RESULTS = PAGE / "results.json"
TABLE = PAGE / "outcomes.md"


def shape(fields: dict) -> str:
    """A model's shape as the tables write it, e.g. "64 × 64 post-LN xavier, dropout 0.1"."""
    return (f"{fields['n_layers']} × {fields['d_model']} {fields['norm_position']}-LN {fields.get('init', 'xavier')}, "
            f"dropout {fields.get('dropout', 0.0):g}")


def outcomes(summary: dict) -> list[FixOutcome]:
    """The settled cases of ``summary`` (an experiment summary's dict, its runs included) as outcomes, in
    :data:`FIX_CASES`' order."""
    rows = {row["model"]: row for row in summary["rows"]}
    runs = [RunResult.from_record(run) for run in summary.get("runs", [])]
    kept = []
    for case in FIX_CASES:
        flagged, fixed = rows.get(f"{case.name}: flagged"), rows.get(f"{case.name}: fixed")
        if flagged is None or fixed is None or not (flagged.get("settled") and fixed.get("settled")):
            continue
        by_seed = [{str(seed): loss for seed, loss in seed_losses(runs, row["model"], row["best_lr"]).items()}
                   if row["best_lr"] is not None else {} for row in (flagged, fixed)]
        shared = set(by_seed[0]) & set(by_seed[1])
        if shared:  # both trained: compared on the seeds both have, each mean over those alone
            by_seed = [{seed: loss for seed, loss in b.items() if seed in shared} for b in by_seed]
        means = [float(np.mean(list(b.values()))) if b else None for b in by_seed]
        # the seeds compared; where one model trained at no rate, the other's; where both trained on no common
        # seed, none (the two are then not compared)
        seeds = len(shared) if shared else 0 if all(by_seed) else max(len(b) for b in by_seed)
        kept.append(FixOutcome(case.name, *means, flagged["fates"], fixed["fates"], seeds,
                               f"sigprop experiment doctor-fixes, {shape(case.flagged)}", flagged["best_lr"],
                               fixed["best_lr"], *by_seed))
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the experiment's results.json")
    parser.add_argument("--out", type=Path, default=OUTCOMES_FILE, help="the outcomes file the doctor reads")
    parser.add_argument("--table", type=Path, default=TABLE, help="the table flagged -> fixed (markdown)")
    args = parser.parse_args(argv)
    if not args.results.is_file():
        print(f"error: {args.results} does not exist (run `sigprop experiment doctor-fixes` first)", file=sys.stderr)
        return 2
    summary = json.loads(args.results.read_text())
    if summary.get("experiment") != "doctor-fixes":
        print(f"error: {args.results} holds experiment {summary.get('experiment')!r}, not 'doctor-fixes'",
              file=sys.stderr)
        return 2
    kept = outcomes(summary)
    write_json_atomic(args.out, [o.__dict__ for o in kept])
    write_text_atomic(args.table, outcomes_markdown(load_outcomes(args.out)))  # from what was written, read back
    print(f"{len(kept)} of {len(FIX_CASES)} cases settled: {args.out}, {args.table}")
    for o in kept:
        print(f"  {o.case}: {o.sentence()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
