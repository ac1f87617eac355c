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
shapes, many runs sharing the GPU.

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
    "smoke": [(0.5, [("smoke", ("2x32",), 1)]), (1.0, [("smoke", (), 2)])],
}


def _command(name: str, patterns, workers: int, args, folder: Path, reuse: list[Path]) -> list[str]:
    command = [sys.executable, "-m", "sigprop", "experiment", name, "--scale", args.scale, "--device", args.device,
               "--workers", str(workers), "--out", str(folder)]
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
    ``--work`` and their kept records."""
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
    parser.add_argument("--plan", default="gpu", choices=sorted(PLANS))
    parser.add_argument("--scale", default="gpu")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    if args.budget <= 60:
        parser.error("--budget must exceed 60 s")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # many runs on one machine: no thread pools fighting for cores
    start = time.time()
    end = start + args.budget - 20  # the last copy's time
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    record = {"environment": _environment(args.device), "budget_s": args.budget, "plan": args.plan, "waves": []}
    stop_copying = threading.Event()

    def copier():
        while not stop_copying.wait(15):
            _copy_light(args.work, args.out)

    thread = threading.Thread(target=copier, daemon=True)
    thread.start()
    complete: dict[tuple, bool] = {}
    with open(args.out / "log.txt", "a", encoding="utf-8") as log:
        for fraction, wave in PLANS[args.plan]:
            deadline = min(start + args.budget * fraction, end)
            todo = [(name, patterns, workers) for name, patterns, workers in wave
                    if not complete.get((name, patterns)) and not complete.get((name, ()))]
            if not todo or time.time() >= deadline - 30:
                continue
            commands = [_command(name, patterns, workers, args, args.work / f"{name}-{args.scale}",
                                 _sharing(name, args)) for name, patterns, workers in todo]
            results = _run_wave(commands, deadline, log)
            for (name, patterns, _), result in zip(todo, results, strict=True):
                complete[(name, patterns)] = result["complete"]
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
