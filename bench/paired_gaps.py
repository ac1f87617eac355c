"""The gaps between the experiments' models, paired by seed, from the stored run records; and what choosing the best
rate on seed 0 alone does to each model's loss.

    PYTHONPATH=. python bench/paired_gaps.py --out docs/results/experiments/paired-gaps

**Pairs.** At one seed two models of an experiment see the same batches in the same order (a step's batch is a
function of (seed, step), and the models compared share the batch size, the sequence length and the corpus), so the
gap between them is read per seed: Δ_s = loss(first, s) − loss(second, s), each model at its own best rate. Reported:
each Δ_s, their mean and Student's t 95% interval with n − 1 degrees of freedom
(:func:`sigprop.experiments.summary.paired_gap_at_best`). With two seeds that is one degree of freedom (t = 12.71):
the interval is 12.7 times half the two differences' spread, and it excludes zero only where the two seeds' Δ agree
closely.

**Seed 0's best rate.** Every model's rate is chosen on seed 0 alone (one tuning seed); seed 1 trains at that rate
only. The lowest of several noisy seed-0 losses is biased low (the winner's curse), so the seed-1 loss at the same
rate shows how much of the chosen rate's advantage was the seed's: the table gives both, per model.

The records read: each experiment's ``results.json`` (every run's fate record, as the tables were made from), and for
`depth` at ``--scale gpu`` its ``results.json`` (seed 0) with ``seed1.json`` (the second seeds, matched to their models
by run id through the catalogue).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from sigprop.core.jsonio import finite_or_null, write_json_atomic, write_text_atomic
from sigprop.experiments import catalog
from sigprop.experiments.runner import RunResult
from sigprop.experiments.spec import plan_runs
from sigprop.experiments.summary import best_learning_rates, paired_gap_at_best, seed_losses

ROOT = Path(__file__).resolve().parents[1] / "docs" / "results" / "experiments"


@dataclass(frozen=True)
class Records:
    """One experiment at one scale: where its stored records are, and the gaps its page quotes (first, second)."""

    experiment: str
    scale: str
    folder: str
    pairs: tuple[tuple[str, str], ...]
    second_seeds: str | None = None  # a file of second-seed records keyed by run id (depth's GPU runs)


_PRIOR = ("rezero (no norm)", "layerscale (pre-LN)", "skipinit (pre-LN)", "noci2022 (pre-LN)", "dsinit (pre-LN)",
          "bamboo (pre-LN, sigma=0.02)", "value-skipinit (pre-LN)", "mup-style (pre-LN)")

RECORDS = (
    Records("depth", "cpu", "depth", (
        ("8x64 dslm pre-LN", "2x128 xavier pre-LN"), ("8x64 dslm pre-LN", "2x128 xavier post-LN"),
        ("32x32 dslm pre-LN", "2x128 xavier pre-LN"), ("8x64 xavier pre-LN", "2x128 xavier pre-LN"),
        ("32x32 xavier pre-LN", "2x128 xavier pre-LN"), ("8x64 dslm pre-LN", "8x64 xavier pre-LN"),
        ("32x32 dslm pre-LN", "32x32 xavier pre-LN"), ("8x64 dslm post-LN", "2x128 xavier post-LN"),
        ("32x32 dslm post-LN", "2x128 xavier post-LN"), ("2x128 xavier post-LN", "2x128 xavier pre-LN"))),
    Records("depth", "gpu", "depth/gpu", (
        ("8x128 dslm pre-LN", "2x256 xavier pre-LN"), ("8x128 xavier pre-LN", "2x256 xavier pre-LN"),
        ("8x128 dslm pre-LN", "8x128 xavier pre-LN"), ("32x64 dslm pre-LN", "2x256 xavier pre-LN"),
        ("2x256 xavier post-LN", "2x256 xavier pre-LN")), second_seeds="seed1.json"),
    Records("depth-mlm", "cpu", "depth-mlm", (
        ("8x64 dslm pre-LN", "2x128 xavier pre-LN"), ("32x32 dslm pre-LN", "2x128 xavier pre-LN"),
        ("8x64 dslm post-LN", "2x128 xavier post-LN"), ("32x32 dslm post-LN", "2x128 xavier post-LN"),
        ("2x128 xavier post-LN", "2x128 xavier pre-LN"), ("8x64 xavier post-LN", "8x64 dslm post-LN"),
        ("8x64 dslm pre-LN", "8x64 xavier pre-LN"), ("32x32 xavier pre-LN", "32x32 dslm pre-LN"))),
    Records("divergence", "cpu", "divergence", (("32x32 dslm post-LN, no warmup", "32x32 dslm post-LN"),)),
    Records("ablations", "cpu", "ablations", (
        ("post-LN dslm, beta^2=2/N learnable", "post-LN dslm, beta^2=2/N fixed"),
        ("pre-LN dslm-simple", "pre-LN dslm"), ("pre-LN sigma=0.02 + scaling", "pre-LN dslm"),
        ("pre-LN xavier-init + scaling", "pre-LN dslm"),
        ("pre-LN xavier-init + scaling", "pre-LN sigma=0.02 + scaling"))),
    Records("prior-methods", "cpu", "prior-methods",
            tuple(("dslm (pre-LN)", m) for m in _PRIOR) + (("dslm (post-LN)", "deepnet (post-LN)"),)),
    Records("shaped", "cpu", "shaped", (
        ("shaped, learn", "pre-LN"), ("shaped, recover", "pre-LN"), ("shaped, fixed", "pre-LN"))),
)


def _result(record: dict) -> RunResult:
    return RunResult(**{k: record[k] for k in RunResult.__dataclass_fields__ if k != "curve"}, curve=[])


def load_results(records: Records, root: Path = ROOT) -> list[RunResult]:
    """Every stored run of ``records``: the runs of its ``results.json``, and its second-seed records where the
    experiment keeps them apart (each matched to its model by the run id the catalogue gives it)."""
    stored = json.loads((root / records.folder / "results.json").read_text(encoding="utf-8"))
    results = [_result(r) for r in stored["runs"]]
    if records.second_seeds is None:
        return results
    extra = json.loads((root / records.folder / records.second_seeds).read_text(encoding="utf-8"))
    unigram = {row["model"]: row["unigram_loss"] for row in stored["rows"]}
    experiment = catalog.get_experiment(records.experiment)
    margin = experiment.stall_margin
    planned = {r.run_id: r for r in plan_runs(experiment, records.scale, best_lr=best_learning_rates(results))}
    for run_id, record in extra.items():
        if run_id not in planned:
            raise ValueError(f"{records.second_seeds}: {run_id} is no run the catalogue plans for "
                             f"{records.experiment} at {records.scale} scale")
        spec, final = planned[run_id], record["final_val"]
        fate = "trained" if final is not None and final < unigram[spec.model_name] - margin else "stalled"
        results.append(RunResult(run_id, spec.model_name, spec.seed, spec.lr, spec.tuning, fate, "", final,
                                 record["steps"], record["tokens"], record.get("train_wall_s", math.nan), []))
    return results


def gaps(records: Records, results: list[RunResult]) -> list[dict]:
    """Each pair's per-seed differences, mean and 95% t interval (None where a model has one seed or none)."""
    rows = []
    for first, second in records.pairs:
        gap = paired_gap_at_best(results, first, second)
        rows.append({"first": first, "second": second,
                     "seeds": list(gap.seeds) if gap else [], "differences": list(gap.differences) if gap else [],
                     "mean": gap.mean if gap else None, "dof": gap.dof if gap else None,
                     "low": gap.low if gap else None, "high": gap.high if gap else None})
    return rows


def _shared_identity(run_id: str) -> str:
    """The rate, seed and config digest that end a run id: the same run under any experiment's model name."""
    return run_id.rsplit("-lr", 1)[1]


def seed_zero_choice(results: list[RunResult]) -> list[dict]:
    """Every model with a second seed: its best rate (chosen on seed 0), both seeds' losses there, and seed 1 − 0."""
    rows = []
    for model, lr in best_learning_rates(results).items():
        losses = seed_losses(results, model, lr)
        if lr is not None and {0, 1} <= set(losses):
            run = next(r for r in results if r.model_name == model and r.lr == lr and r.seed == 0)
            rows.append({"model": model, "lr": lr, "seed0": losses[0], "seed1": losses[1],
                         "seed1_minus_seed0": losses[1] - losses[0], "run": _shared_identity(run.run_id)})
    return rows


def _f(x, spec=".3f", signed=False) -> str:
    return "–" if x is None else format(x, ("+" if signed else "") + spec)


def _interval(row: dict) -> str:
    if row["low"] is None:
        return "– (one seed)" if row["seeds"] else "– (no trained run)"
    verdict = "excludes 0" if row["low"] > 0 or row["high"] < 0 else "includes 0"
    return f"[{row['low']:+.3f}, {row['high']:+.3f}] ({row['dof']} df; {verdict})"


def markdown(report: list[dict], command: str) -> str:
    """The report as a page: per experiment, the paired gaps, then seed 0's choice of rate."""
    lines = ["# Paired gaps and seed 0's choice of rate, from the stored records", "",
             f"Command: `{command}` (`bench/paired_gaps.py`; reads the stored records only, trains nothing).", "",
             "Δ = loss(first) − loss(second), each model at its own best rate, per seed (a seed fixes the batches, "
             "the same for both models); the mean and Student's t 95% interval with n − 1 degrees of freedom "
             "(two seeds: 1 df, t = 12.71). Then every model's rate as seed 0 chose it, with seed 1's loss at that "
             "rate (seed 1 trained at no other).", ""]
    for block in report:
        lines += [f"## `{block['experiment']}` at `--scale {block['scale']}`", "",
                  "| first − second | Δ per seed | mean | 95% t interval |", "|---|---|---:|---|"]
        for r in block["gaps"]:
            per_seed = ", ".join(f"s{s}: {d:+.3f}" for s, d in zip(r["seeds"], r["differences"], strict=True)) or "–"
            lines.append(f"| {r['first']} − {r['second']} | {per_seed} | {_f(r['mean'], signed=True)} | "
                         f"{_interval(r)} |")
        choice = block["seed_zero_choice"]
        lines += ["", "| model | rate (seed 0's best) | seed 0 | seed 1 | seed 1 − seed 0 |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| {c['model']} | {c['lr']:g} | {c['seed0']:.3f} | {c['seed1']:.3f} | "
                  f"{c['seed1_minus_seed0']:+.3f} |" for c in choice]
        if choice:
            diffs = [c["seed1_minus_seed0"] for c in choice]
            lines += ["", f"Seed 1 − seed 0 at seed 0's rate: mean {sum(diffs) / len(diffs):+.3f} over "
                          f"{len(diffs)} models, positive in {sum(d > 0 for d in diffs)}."]
        lines.append("")
    unique = {c["run"]: c["seed1_minus_seed0"] for block in report for c in block["seed_zero_choice"]}
    every = list(unique.values())
    mean, median = sum(every) / len(every), statistics.median(every)
    lines += ["## Over every experiment", "",
              f"Seed 1 − seed 0 at seed 0's best rate, each run once (experiments share some runs): mean {mean:+.3f} "
              f"nats (median {median:+.3f}) over {len(every)} models, positive in {sum(d > 0 for d in every)}, "
              f"largest {max(every):+.3f}. Were the rate not chosen on seed 0, the two seeds would differ by zero on "
              "average.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write OUT.md and OUT.json (default: print the page)")
    args = parser.parse_args(argv)
    report = []
    for records in RECORDS:
        results = load_results(records)
        report.append({"experiment": records.experiment, "scale": records.scale, "gaps": gaps(records, results),
                       "seed_zero_choice": seed_zero_choice(results)})
    command = "PYTHONPATH=. python bench/paired_gaps.py" + (f" --out {args.out}" if args.out else "")
    page = markdown(report, command)
    if args.out is None:
        print(page)
        return 0
    write_text_atomic(args.out.with_suffix(".md"), page)
    write_json_atomic(args.out.with_suffix(".json"), finite_or_null({"command": command, "experiments": report}))
    print(f"{args.out.with_suffix('.md')}, {args.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
