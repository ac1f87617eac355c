"""Keep the light records of an experiment's finished runs, so that the experiment continues on another machine.

    python bench/experiment_records.py experiments/prior-methods-cpu docs/results/experiments/prior-methods/runs

copies, for every run folder of the experiment folder (first argument) that holds a fate (``fate.json``: the run
finished, and how), its ``fate.json``, ``run.json`` (configs, device, precision, versions, command) and
``track.jsonl`` (the tracked statistics, where the run tracked any) into ``RECORDS/RUN_ID/`` (second argument),
each file written atomically; checkpoints and the per-step metrics stay behind (megabytes per run). The command in a
kept ``run.json`` names its files relative to the experiment folder (``--config specs/RUN_ID.json --out RUN_ID``), so
that the records say nothing of the machine they were trained on. A later

    sigprop experiment prior-methods --out experiments/prior-methods-cpu \
        --runs-dir docs/results/experiments/prior-methods/runs

counts those runs as finished (a run id is a digest of both configs: the same id is the same run) and trains only the
rest; its table holds them all. Evaluations that need the trained weights (``fp8``) need the full run folders.

``--restore RESULTS RECORDS [--entropy ENTROPY]`` rebuilds the records of runs whose folders were lost from a stored
``results.json`` (every run's fate record, verbatim); with ``--entropy`` (``shaped``'s ``entropy.json``: each run's
last tracked attention entropy per layer, the one track point its entropy table reads) also a one-point
``track.jsonl``, marked as restored.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sigprop.core.jsonio import write_json_atomic, write_text_atomic

#: The light files of a run, its fate last: the fate marks a record finished, so an interrupted keep never leaves a
#: fate without the run record (and data fingerprint) beside it.
LIGHT_FILES = ("run.json", "track.jsonl", "fate.json")


def relative_command(run_record: dict, experiment_folder: Path) -> dict:
    """``run.json``'s record with the experiment folder's absolute path dropped from its ``command`` (the paths it
    names become relative to that folder); any other field, and a record without a command, unchanged."""
    command = run_record.get("command")
    if not isinstance(command, str):
        return run_record
    return {**run_record, "command": command.replace(f"{experiment_folder.resolve()}/", "")}


def keep_records(experiment_folder: Path, records: Path) -> list[str]:
    """Copy the light files of every finished run of ``experiment_folder`` into ``records``; the run ids kept."""
    kept = []
    for fate in sorted(experiment_folder.glob("*/fate.json")):
        run = fate.parent
        if run.name.startswith("."):  # an interrupted copy (".RUN_ID.copying") or a run set aside: not a finished run
            continue
        for name in LIGHT_FILES:
            if not (run / name).is_file():
                continue
            text = (run / name).read_text(encoding="utf-8")
            if name == "run.json":
                write_json_atomic(records / run.name / name, relative_command(json.loads(text), experiment_folder))
            else:
                write_text_atomic(records / run.name / name, text)
        kept.append(run.name)
    return kept


def restore(results: Path, records: Path, entropy: Path | None = None) -> list[str]:
    """Fate records from a stored ``results.json``'s runs; with ``entropy``, a one-point ``track.jsonl`` per run from
    ``entropy.json`` (matched by model, rate and seed)."""
    runs = json.loads(results.read_text(encoding="utf-8"))["runs"]
    rows = [] if entropy is None else json.loads(entropy.read_text(encoding="utf-8"))["rows"]
    kept = []
    for run in runs:
        write_json_atomic(records / run["run_id"] / "fate.json", run)
        key = (run["model_name"], run["lr"], run["seed"])
        row = next((r for r in rows if (r["model"], r["lr"], r["seed"]) == key), None)
        if row is not None and row["track_step"] is not None:
            point = {"step": row["track_step"], "attn_entropy": row["entropy"],
                     "restored_from": f"{entropy.name}: the last track point only"}
            write_text_atomic(records / run["run_id"] / "track.jsonl", json.dumps(point) + "\n")
        kept.append(run["run_id"])
    return kept


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="an experiment folder, or with --restore a stored results.json")
    parser.add_argument("records", type=Path, help="the records folder, e.g. docs/results/experiments/NAME/runs")
    parser.add_argument("--restore", action="store_true", help="rebuild fate records from a stored results.json")
    parser.add_argument("--entropy", type=Path, help="with --restore: shaped's entropy.json, for track points")
    args = parser.parse_args(argv)
    if args.restore:
        if not args.source.is_file():
            parser.error(f"{args.source}: no such results.json")
        kept = restore(args.source, args.records, args.entropy)
    else:
        if not args.source.is_dir():
            parser.error(f"{args.source}: no such experiment folder")
        kept = keep_records(args.source, args.records)
    print(f"{len(kept)} run record(s) in {args.records}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
