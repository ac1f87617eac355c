"""Keep the light records of an experiment's finished runs, so that the experiment continues on another machine.

    python bench/experiment_records.py experiments/prior-methods-cpu docs/experiments/prior-methods/runs

copies, for every run folder of the experiment folder (first argument) that holds a fate (``fate.json``: the run
finished, and how), its ``fate.json``, ``run.json`` (configs, device, precision, versions, command) and
``track.jsonl`` (the tracked statistics, where the run tracked any) into ``RECORDS/RUN_ID/`` (second argument),
each file written atomically; checkpoints and the per-step metrics stay behind (megabytes per run). A later

    sigprop experiment prior-methods --out experiments/prior-methods-cpu --runs-dir docs/experiments/prior-methods/runs

counts those runs as finished (a run id is a digest of both configs: the same id is the same run) and trains only the
rest; its table holds them all. Evaluations that need the trained weights (``fp8``) need the full run folders.

``--restore-shaped RESULTS ENTROPY RECORDS`` rebuilds the records of the ``shaped`` runs whose folders were lost
from the stored ``results.json`` (every run's fate record, verbatim) and ``entropy.json`` (each run's last tracked
attention entropy per layer, the one track point the entropy table reads), marking the track file as restored.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sigprop.core.jsonio import write_json_atomic, write_text_atomic

LIGHT_FILES = ("fate.json", "run.json", "track.jsonl")


def keep_records(experiment_folder: Path, records: Path) -> list[str]:
    """Copy the light files of every finished run of ``experiment_folder`` into ``records``; the run ids kept."""
    kept = []
    for fate in sorted(experiment_folder.glob("*/fate.json")):
        run = fate.parent
        for name in LIGHT_FILES:
            if (run / name).is_file():
                write_text_atomic(records / run.name / name, (run / name).read_text(encoding="utf-8"))
        kept.append(run.name)
    return kept


def restore_shaped(results: Path, entropy: Path, records: Path) -> list[str]:
    """The ``shaped`` records from its stored tables: ``fate.json`` from ``results.json``'s runs, a one-point
    ``track.jsonl`` from ``entropy.json`` (matched by model, rate and seed)."""
    runs = json.loads(results.read_text(encoding="utf-8"))["runs"]
    rows = json.loads(entropy.read_text(encoding="utf-8"))["rows"]
    kept = []
    for run in runs:
        write_json_atomic(records / run["run_id"] / "fate.json", run)
        row = next(r for r in rows if (r["model"], r["lr"], r["seed"]) == (run["model_name"], run["lr"], run["seed"]))
        if row["track_step"] is not None:
            point = {"step": row["track_step"], "attn_entropy": row["entropy"],
                     "restored_from": f"{entropy.name}: the last track point only"}
            write_text_atomic(records / run["run_id"] / "track.jsonl", json.dumps(point) + "\n")
        kept.append(run["run_id"])
    return kept


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, nargs="+", help="EXPERIMENT_FOLDER, or RESULTS ENTROPY with "
                                                              "--restore-shaped")
    parser.add_argument("records", type=Path)
    parser.add_argument("--restore-shaped", action="store_true")
    args = parser.parse_args(argv)
    if args.restore_shaped:
        if len(args.source) != 2:
            parser.error("--restore-shaped takes RESULTS ENTROPY RECORDS")
        kept = restore_shaped(*args.source, args.records)
    else:
        if len(args.source) != 1 or not args.source[0].is_dir():
            parser.error("give one experiment folder and the records folder")
        kept = keep_records(args.source[0], args.records)
    print(f"{len(kept)} run record(s) in {args.records}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
