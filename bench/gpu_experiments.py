"""Training experiments on one lent GPU within a fixed wall-time budget, their results copied out as they come.

    PYTHONPATH=. python3 bench/gpu_experiments.py --out OUT --budget 540 [--work /tmp/sigprop-gpu]
    PYTHONPATH=. python3 bench/gpu_experiments.py --out OUT --budget 90 --device cpu --scale cpu --plan smoke

The plan is a list of waves; a wave runs its experiments side by side (each ``sigprop experiment NAME --scale gpu
--device cuda --workers W [--model PATTERN ...]``, in its own folder under ``--work``) until they finish or the
wave's deadline (a fraction of the budget) passes. An experiment still running at its deadline gets SIGTERM, so its
runs checkpoint and its table is written from the runs that finished (the runner's own behaviour); a later wave with
the same experiment continues it. ``depth`` and ``divergence`` reuse each other's finished runs of identical spec
(``--runs-dir``). The default plan (``PLANS["gpu"]``): first the models that answer each question, side by side (the
shallow-wide baselines and the DSLM models of ``depth``, the Post-LN Xavier baseline and DSLM of ``divergence``);
then, with the time left, every other model of both. ``--plan rest`` runs the other experiments at ``--scale gpu``
(``prior-methods`` and ``depth-mlm`` first, then ``ablations`` and ``shaped``); ``prior-methods`` and ``ablations``
reuse the DSLM runs at 32 × 64 of ``depth`` and ``divergence`` (their folders under ``--work``, and ``depth``'s kept
records in docs/results/experiments/depth/gpu/runs). ``--plan cpu-shapes --scale cpu`` runs those four at their CPU
shapes, many runs sharing the GPU; ``--plan fixes --scale cpu`` runs ``doctor-fixes`` and ``depth-budget`` the same
way.

``--plan ladder`` runs the rungs of ``shape-ladder`` (``--rungs``, default 192,256,384,512) one after another,
smallest first (``--order largest``: largest first), as many as the budget holds by an estimate of each rung's
remaining runs (:func:`ladder_waves`; the first unfinished rung always runs, so every sitting makes progress). The
runs finished in earlier sittings are counted and reused from the kept records (``--records``, default
docs/results/experiments/shape-ladder/runs: after a sitting, ``python bench/experiment_records.py OUT/shape-ladder-cpu
RECORDS`` keeps what finished), so several short sittings add up to the whole ladder:

    PYTHONPATH=. python3 bench/gpu_experiments.py --out OUT --budget 540 --plan ladder

Every 15 s, and at the end, the light files (tables, figures, ``results.json``, each run's fate, metrics, configs and
log; not the checkpoints) are copied into ``--out``, so a machine taken back mid-run still returns what finished.
``--out``/``environment.json`` records the device, torch and each experiment's command, exit status and wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from sigprop.core.jsonio import write_json_atomic

_HEAVY = (".safetensors",)


def _copy_light(work: Path, out: Path) -> None:
    """Mirror ``work`` into ``out`` without checkpoints' tensors or lock files (a file is copied when its size or
    modification time changed)."""
    for path in work.rglob("*"):
        if not path.is_file() or path.suffix in _HEAVY or path.name == ".lock" or ".copying" in str(path):
            continue
        target = out / path.relative_to(work)
        try:
            stat = path.stat()
            if target.exists() and target.stat().st_size == stat.st_size and target.stat().st_mtime >= stat.st_mtime:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        except OSError:  # a file replaced while copying: the next pass takes it
            continue


def _environment(device: str) -> dict:
    import torch

    env = {"torch": torch.__version__, "python": sys.version.split()[0], "cpu_count": os.cpu_count()}
    if device == "cuda" and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cuda"] = torch.version.cuda
        env["gpus"] = torch.cuda.device_count()
    return env


#: name → waves; a wave: (deadline as a fraction of the budget, [(experiment, model patterns, workers), ...]).
PLANS = {
    "gpu": [
        (0.85, [("depth", ("2x256 xavier *", "*dslm pre-LN", "8x128 xavier pre-LN"), 6),
                ("divergence", ("32x64 xavier post-LN", "32x64 dslm post-LN"), 4)]),
        (1.0, [("depth", ("2x256 xavier *", "*dslm pre-LN", "8x128 xavier pre-LN"), 6),
               ("divergence", ("32x64 xavier post-LN", "32x64 dslm post-LN"), 4)]),
        (1.0, [("depth", (), 6), ("divergence", (), 4)]),
    ],
    # the other experiments at --scale gpu: ~50 minutes of one H200 shared by many runs in all
    "rest": [
        (0.6, [("prior-methods", (), 8), ("depth-mlm", (), 8)]),
        (1.0, [("prior-methods", (), 4), ("depth-mlm", (), 4), ("ablations", (), 4), ("shaped", (), 4)]),
    ],
    # the same four at their CPU shapes (``--scale cpu``; ``precision=auto`` is bf16 there, so
    # their tables are the GPU's own, not merged with the CPU's fp32 runs): ~8.7e8 tokens in all
    "cpu-shapes": [
        (0.5, [("prior-methods", (), 8), ("ablations", (), 8)]),
        (1.0, [("prior-methods", (), 4), ("ablations", (), 4), ("shaped", (), 4), ("depth-mlm", (), 4)]),
    ],
    # the doctor's fixes and the depth pair's budget rows at their CPU configuration (``--scale cpu``; bf16 on the
    # GPU, so their tables are the GPU's own): ~5e8 tokens in all
    "fixes": [(1.0, [("doctor-fixes", (), 8), ("depth-budget", (), 8)])],
    "smoke": [(0.5, [("smoke", ("2x32",), 1)]), (1.0, [("smoke", (), 2)])],
}


#: The ladder's runs: its one configuration (``--scale cpu``, whatever the device) and where finished runs are kept.
_LADDER, _LADDER_SCALE = "shape-ladder", "cpu"
_LADDER_RECORDS = Path(__file__).resolve().parents[1] / "docs/results/experiments/shape-ladder/runs"
#: Floating-point operations per second of one NVIDIA H200 shared by several small training runs: ``depth`` at
#: ``--scale gpu`` trained 1.4 M tokens/s over ten runs of ~2.6 M parameters (head included), 6 FLOPs per parameter
#: and token. A rough, conservative rate for planning (larger batches and widths use the GPU better).
_H200_FLOPS = 2.2e13
#: Runs a model may still add by extending its grid past an edge (one more rate, two seeds), for the estimate.
_EXTENSION_ALLOWANCE = 2


def _finished_fates(folders) -> dict[str, dict]:
    """Run id → fate record of every finished run in ``folders`` (experiment folders or kept records)."""
    fates = {}
    for folder in folders:
        for path in sorted(Path(folder).glob("*/fate.json")):
            try:
                fates.setdefault(path.parent.name, json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError):
                continue
    return fates


def rung_cost(rung: int, finished: dict[str, dict], flops: float = _H200_FLOPS) -> tuple[int, float]:
    """(runs left, estimated seconds) of the ladder's rung ``rung``: its tuning runs not yet finished, a third seed
    per model that has none, and :data:`_EXTENSION_ALLOWANCE` runs per model whose tuning is unfinished, each run
    its tokens × 6 FLOPs per parameter (layers and head) at ``flops``."""
    from sigprop.experiments.catalog import get_experiment
    from sigprop.experiments.ladder import ladder_model
    from sigprop.experiments.spec import non_embedding_parameters, plan_runs
    from sigprop.model.config import config_from_dict

    experiment = get_experiment(_LADDER)
    scale = experiment.scale(_LADDER_SCALE)
    names = {m.name for m in scale.models if (lm := ladder_model(m.name)) is not None and lm.rung == rung}
    tuning = [r for r in plan_runs(experiment, _LADDER_SCALE) if r.model_name in names]
    left, seconds = 0, 0.0
    for name in sorted(names):
        mine = [r for r in tuning if r.model_name == name]
        run = mine[0]
        config = config_from_dict(run.model_config)
        per_run = (6.0 * (non_embedding_parameters(config) + config.vocab_size * config.d_model)
                   * run.train_config["steps"] * run.train_config["batch_size"] * config.seq_len / flops)
        todo = sum(r.run_id not in finished for r in mine)
        seeded = any(f.get("model_name") == name and not f.get("tuning") for f in finished.values())
        runs = todo + (0 if seeded else scale.seeds - scale.tuning_seeds) + (_EXTENSION_ALLOWANCE if todo else 0)
        left += runs
        seconds += runs * per_run
    return left, seconds


def ladder_waves(budget: float, rungs, finished: dict[str, dict], workers: int, order: str = "smallest",
                 flops: float = _H200_FLOPS) -> list:
    """The waves of ``--plan ladder``: one per rung with runs left, in ``order`` ("smallest" or "largest" first),
    while the estimated seconds (:func:`rung_cost`, shared by ``workers`` runs at a time, which the estimate's
    rate already assumes) fit ``budget``; the first rung with runs left is always planned. Each wave runs until its
    rung is done or the budget ends."""
    if order not in ("smallest", "largest"):
        raise ValueError(f"--order must be smallest or largest (got {order!r})")
    waves, spent = [], 0.0
    for rung in sorted(rungs, reverse=order == "largest"):
        left, seconds = rung_cost(rung, finished, flops)
        if left == 0:
            continue
        if waves and spent + seconds > budget:
            break
        spent += seconds
        waves.append((1.0, [(_LADDER, (), workers, rung)]))
    return waves


def _command(name: str, patterns, workers: int, args, folder: Path, reuse: list[Path], rung=None) -> list[str]:
    scale = _LADDER_SCALE if name == _LADDER else args.scale
    command = [sys.executable, "-m", "sigprop", "experiment", name, "--scale", scale, "--device", args.device,
               "--workers", str(workers), "--out", str(folder)]
    if rung is not None:
        command += ["--rungs", str(rung)]
    for pattern in patterns:
        command += ["--model", pattern]
    for other in reuse:
        command += ["--runs-dir", str(other)]
    return command


#: experiment → the experiments whose finished runs of identical spec it reuses: ``depth`` and ``divergence`` share
#: their Post-LN runs at the deepest shape; ``prior-methods`` and ``ablations`` take their DSLM runs there.
_SHARES = {"depth": ("divergence",), "divergence": ("depth",), "prior-methods": ("depth", "divergence"),
           "ablations": ("depth", "divergence")}
_KEPT_RECORDS = {("depth", "gpu"): Path(__file__).resolve().parents[1] / "docs/results/experiments/depth/gpu/runs"}


def _sharing(name: str, args) -> list[Path]:
    """The folders whose finished runs ``name`` reuses (those that exist): the other experiments' folders under
    ``--work`` and their kept records (for the ladder, its own kept records)."""
    if name == _LADDER:
        return [args.records] if args.records.is_dir() else []
    folders = []
    for other in _SHARES.get(name, ()):
        folders += [args.work / f"{other}-{args.scale}", _KEPT_RECORDS.get((other, args.scale))]
    return [f for f in folders if f is not None and f.is_dir()]


def _run_wave(commands: list[list[str]], deadline: float, log) -> list[dict]:
    """Run ``commands`` side by side until each ends or ``deadline`` passes (then SIGTERM, and 90 s later SIGKILL)."""
    procs = []
    for command in commands:
        log.write(f"$ {shlex.join(['sigprop', *command[3:]])}\n")
        log.flush()
        procs.append((command, time.time(), subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)))
    stopped = False
    while any(p.poll() is None for _, _, p in procs):
        if time.time() >= deadline and not stopped:
            for _, _, p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)  # runs checkpoint; the table is written from the finished ones
            stopped, deadline = True, time.time() + 90
        elif stopped and time.time() >= deadline:
            for _, _, p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(1)
    return [{"command": shlex.join(["sigprop", *command[3:]]), "exit": p.returncode, "complete": p.returncode == 0,
             "wall_s": round(time.time() - t0, 1)} for command, t0, p in procs]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget", type=float, required=True, help="seconds for everything, copying included")
    parser.add_argument("--work", type=Path, default=Path("/tmp/sigprop-gpu"))
    parser.add_argument("--plan", default="gpu", choices=sorted([*PLANS, "ladder"]))
    parser.add_argument("--scale", default="gpu")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rungs", default="192,256,384,512", help="--plan ladder: the rungs (widths d)")
    parser.add_argument("--order", default="smallest", choices=("smallest", "largest"),
                        help="--plan ladder: which rungs first")
    parser.add_argument("--records", type=Path, default=_LADDER_RECORDS,
                        help="--plan ladder: the kept records of finished runs, reused and counted")
    parser.add_argument("--workers", type=int, default=8, help="--plan ladder: runs at a time")
    parser.add_argument("--dry-run", action="store_true", help="print the plan (the waves) and stop")
    args = parser.parse_args(argv)
    if args.budget <= 60:
        parser.error("--budget must exceed 60 s")
    if args.plan == "ladder":
        finished = _finished_fates([args.work / f"{_LADDER}-{_LADDER_SCALE}", args.records])
        rungs = [int(r) for r in args.rungs.split(",")]
        plan = ladder_waves(args.budget - 20, rungs, finished, args.workers, args.order)
    else:
        plan = PLANS[args.plan]
    if args.dry_run:
        print(json.dumps([[fraction, [list(item) for item in wave]] for fraction, wave in plan]))
        return 0
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # many runs on one machine: no thread pools fighting for cores
    start = time.time()
    end = start + args.budget - 20  # the last copy's time
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    record = {"environment": _environment(args.device), "budget_s": args.budget, "plan": args.plan, "waves": []}
    if args.plan == "ladder":
        record["ladder_plan"] = [wave[0][3] for _, wave in plan]
    stop_copying = threading.Event()

    def copier():
        while not stop_copying.wait(15):
            _copy_light(args.work, args.out)

    thread = threading.Thread(target=copier, daemon=True)
    thread.start()
    complete: dict[tuple, bool] = {}
    with open(args.out / "log.txt", "a", encoding="utf-8") as log:
        for fraction, wave in plan:
            deadline = min(start + args.budget * fraction, end)
            todo = [(name, patterns, workers, *rung) for name, patterns, workers, *rung in wave
                    if not complete.get((name, patterns, *rung)) and not complete.get((name, ()))]
            if not todo or time.time() >= deadline - 30:
                continue
            commands = [_command(name, patterns, workers, args,
                                 args.work / f"{name}-{_LADDER_SCALE if name == _LADDER else args.scale}",
                                 _sharing(name, args), *rung) for name, patterns, workers, *rung in todo]
            results = _run_wave(commands, deadline, log)
            for (name, patterns, _, *rung), result in zip(todo, results, strict=True):
                complete[(name, patterns, *rung)] = result["complete"]
            record["waves"].append(results)
            write_json_atomic(args.out / "environment.json", record)
    stop_copying.set()
    thread.join()
    _copy_light(args.work, args.out)
    record["wall_s"] = round(time.time() - start, 1)
    write_json_atomic(args.out / "environment.json", record)
    print(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
