"""Runs an experiment's training runs as parallel processes and records each one's fate.

Each run is ``sigprop train`` in a process of its own (``python -m sigprop train --config SPEC --out DIR``): one
single-threaded process per CPU core (two single-thread runs beat one two-thread run on this kind of machine) or one
per GPU (``CUDA_VISIBLE_DEVICES``). A run whose directory holds a fate is skipped; one that was interrupted is
resumed (``--resume``: exactly, from its last checkpoint). SIGINT or SIGTERM is passed on to the runs, which
checkpoint and stop; the next invocation continues them.

Fates: "trained" (the final validation loss is at least the experiment's margin below the unigram loss of the
validation text), "stalled" (it is not: the model learned nothing beyond token frequencies), "diverged" (the loss or
gradient stopped being finite: the step and the trainer's message are kept), "failed" (anything else, with the last
error line). An interrupted run gets no fate and is resumed. A failed run (a crash: out of memory, a full disk) is a
fault of the run, not a result of its model and rate: its record goes to ``failed.json`` instead of a fate, it steers
neither the rate search nor the seeds (a crashed extension past an edge would otherwise end the search there), and
the next invocation tries it again (resumed from its last checkpoint).

Every run records the SHA-256 of its training and validation data (``run.json``, :mod:`sigprop.data.fingerprint`).
A finished run whose data differ from the experiment's (:func:`corpus_mismatch`: trained on another machine's
``data=python``, or on an older build of the corpus) is not copied in from another folder, and is left out of the
experiment's table with a line saying why; one found in the experiment's own folder is set aside (a hidden sibling
folder, kept) and trained again, so that it steers neither the rate search nor the seeds. A model whose finished runs
trained in another arithmetic than this device's (bf16 on a GPU, fp32 on a CPU, for precision "auto") gets no
further runs here: its rates and seeds are compared in one arithmetic.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Literal, get_args

from ..core.jsonio import write_json_atomic
from .spec import RunSpec

__all__ = ["RunResult", "execute", "unigram_loss", "reference_data", "corpus_mismatch", "Placement", "Fate", "FATES",
           "FATE_FILE"]

#: How a run ended (module docstring).
Fate = Literal["trained", "stalled", "diverged", "failed"]
FATES: tuple[Fate, ...] = get_args(Fate)
FATE_FILE = "fate.json"
FAILED_FILE = "failed.json"  # a failed run's record: not a fate, so the run is tried again by the next invocation
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


@dataclass(frozen=True)
class RunResult:
    """A finished run: its spec's fields, its ``fate`` and ``detail`` (why, for a run that did not train), its final
    validation loss, the steps and tokens it ran, its wall time, and its validation curve [(tokens, loss)]."""

    run_id: str
    model_name: str
    seed: int
    lr: float
    tuning: bool
    fate: Fate
    detail: str
    final_val: float | None
    steps: int
    tokens: int
    wall: float
    curve: list

    @classmethod
    def from_record(cls, record: dict) -> RunResult:
        """The result a fate record (``fate.json``) holds; keys beyond the fields (e.g. ``copied_from``) are
        provenance only."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in names and k != "curve"},
                   curve=[tuple(p) for p in record["curve"]])


def unigram_loss(model_config: dict, train_config: dict) -> float:
    """The cross-entropy of the validation text under the training text's token frequencies (add-one smoothed),
    in nats: what a model that learned only the frequencies scores (for images: ln of the number of classes)."""
    from ..model.config import config_from_dict
    from ..train.config import train_config_from_dict
    from ..train.data import make_data

    mc, tc = config_from_dict(model_config), train_config_from_dict(train_config)
    return _unigram_of(make_data(mc, tc, progress=True), mc)


def reference_data(model_config: dict, train_config: dict) -> tuple[float, dict | None]:
    """(the unigram loss of :func:`unigram_loss`, the data's fingerprint) of a run's configs: the corpus as this
    machine builds it, which every pooled run must have trained on."""
    from ..data.fingerprint import data_fingerprint
    from ..model.config import config_from_dict
    from ..train.config import train_config_from_dict
    from ..train.data import make_data

    mc, tc = config_from_dict(model_config), train_config_from_dict(train_config)
    data = make_data(mc, tc, progress=True)
    return _unigram_of(data, mc), data_fingerprint(data.meta())


def _unigram_of(data, mc) -> float:
    import numpy as np

    if data.is_images:
        return math.log(mc.n_classes)
    counts = np.bincount(data.train_ids.astype(np.int64), minlength=mc.vocab_size).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[data.val_ids.astype(np.int64)].mean())


def corpus_mismatch(run_dir, expected: dict | None, required: bool = False) -> str | None:
    """Why the run in ``run_dir`` must not be pooled with an experiment whose data have fingerprint ``expected``
    (None: it may): its ``run.json`` records other data, or (``required``: the experiment trains on a pinned corpus)
    records none. A run recorded before fingerprints were, with ``required`` false, is pooled as before."""
    from ..data.fingerprint import data_fingerprint

    if expected is None:
        return None
    try:
        record = json.loads((Path(run_dir) / "run.json").read_text(encoding="utf-8")).get("data")
    except (OSError, ValueError, AttributeError):
        record = None
    found = data_fingerprint(record)
    if found is None:
        return (f"{Path(run_dir).name}: its run record holds no data fingerprint; this experiment's corpus is "
                f"pinned (training data {expected['train_sha256'][:12]}…)") if required else None
    if found != expected:
        return (f"{Path(run_dir).name} trained on other data (training data {found['train_sha256'][:12]}…, "
                f"validation {found['validation_sha256'][:12]}…; this experiment's: "
                f"{expected['train_sha256'][:12]}…, {expected['validation_sha256'][:12]}…)")
    return None


def _recorded_precision(run_dir: Path) -> str | None:
    """The arithmetic a finished run's record says it trained in (``run.json``'s ``precision``), None if unknown."""
    try:
        precision = json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("precision")
    except (OSError, ValueError, AttributeError):
        return None
    return precision if isinstance(precision, str) else None


def _set_aside(run_dir: Path, why: str) -> Path:
    """Move a finished run that may not count here out of the way (a hidden sibling ``.RUN_ID.WHY[.k]``, which no
    table reads), so that its run trains again; returns where it went."""
    aside = run_dir.with_name(f".{run_dir.name}.{why}")
    k = 1
    while aside.exists():
        aside, k = run_dir.with_name(f".{run_dir.name}.{why}.{k}"), k + 1
    run_dir.rename(aside)
    return aside


def _fate_of(run_dir: Path) -> dict | None:
    """The run's fate record; None where it has none (not finished), or where an older version recorded a crash as
    the fate "failed" (tried again, as a failed run is now)."""
    try:
        fate = json.loads((run_dir / FATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return None if fate.get("fate") == "failed" else fate


def _metrics(run_dir: Path) -> list[dict]:
    from ..train.run_dir import read_metrics

    return read_metrics(run_dir)


def _last_error(log: Path) -> str:
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    errors = [line for line in lines if line.startswith("error:")]
    return (errors[-1] if errors else (lines[-1] if lines else ""))[:500]


def _judge(spec: RunSpec, run_dir: Path, code: int, log: Path, unigram: float, margin: float, wall: float):
    metrics = _metrics(run_dir)
    curve = [(m["tokens"], m["val_loss"]) for m in metrics if m.get("val_loss") is not None and "tokens" in m]
    last = metrics[-1] if metrics else {}
    evaluations = [m for m in metrics if "val_loss" in m]  # a non-finite loss is logged as null: it stays here
    final = evaluations[-1]["val_loss"] if evaluations else None
    fate: Fate
    if code == 0:
        if evaluations and (final is None or not math.isfinite(final)):
            final = None
            fate, detail = "diverged", f"non-finite validation loss at step {evaluations[-1].get('step', '?')}"
        elif final is None:
            fate, detail = "failed", "no final validation loss"
        elif final > unigram - margin:
            fate, detail = "stalled", f"final validation loss {final:.4f} ≥ unigram loss {unigram:.4f} − {margin:g}"
        else:
            fate, detail = "trained", ""
    elif code == 3:
        fate, detail = "diverged", _last_error(log).removeprefix("error: ")
    else:
        fate, detail = "failed", f"exit status {code}: {_last_error(log)}"
    return RunResult(spec.run_id, spec.model_name, spec.seed, spec.lr, spec.tuning, fate, detail, final,
                     int(last.get("step", 0)), int(last.get("tokens", 0) or 0), wall, curve)


def _prepare_child() -> None:
    """In the child, before it runs: its own process group, so a Ctrl-C at the terminal reaches the runner alone
    (which passes SIGTERM on to each run in order), but the runner's session, so the runner's priority holds for its
    runs: a ``nice sigprop experiment …`` stays nice (Linux shares the CPU between sessions first, its autogroups,
    and a run in a session of its own would get a fresh one at the default priority). Then, on Linux, ask to be sent
    SIGTERM when the runner dies, even by SIGKILL, so a run checkpoints and stops instead of training on for nobody
    (``PR_SET_PDEATHSIG``)."""
    os.setpgid(0, 0)
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))  # 1 = PR_SET_PDEATHSIG


class _Launched:
    def __init__(self, spec: RunSpec, proc: subprocess.Popen, log, started: float):
        self.spec, self.proc, self.log, self.started = spec, proc, log, started


def _gpu_for(slot: int, gpus: int) -> str:
    """The GPU of the ``slot``-th run at a time: GPU ``slot mod gpus`` (more runs than GPUs share them in turn),
    counted among those this process may see (an inherited ``CUDA_VISIBLE_DEVICES`` is respected)."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    index = slot % max(gpus, 1)
    return visible[index] if index < len(visible) else str(index)


def _launch(spec: RunSpec, out: Path, device: str, slot: int, gpus: int = 1) -> _Launched:
    run_dir = out / spec.run_id
    specs = out / "specs"
    specs.mkdir(parents=True, exist_ok=True)
    config = specs / f"{spec.run_id}.json"
    write_json_atomic(config, {"model_config": spec.model_config, "train_config": spec.train_config})
    if (run_dir / "run.json").exists():
        args = ["train", "--resume", str(run_dir)]
    else:
        args = ["train", "--config", str(config), "--out", str(run_dir), "--device", device]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_PACKAGE_PARENT, os.environ.get("PYTHONPATH")]))}
    if device == "cpu":
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    else:
        env["CUDA_VISIBLE_DEVICES"] = _gpu_for(slot, gpus)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = open(logs / f"{spec.run_id}.log", "a", encoding="utf-8")  # noqa: SIM115 - closed when the run ends
    proc = _spawn([sys.executable, "-m", "sigprop", *args], log, env)
    return _Launched(spec, proc, log, time.perf_counter())


def _spawn(argv: list[str], log, env: dict) -> subprocess.Popen:
    """Start one run's process, its output into ``log`` (:func:`_prepare_child`: its process group, the runner's
    session and priority)."""
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            preexec_fn=_prepare_child)


def _finished_twin(spec: RunSpec, folder: Path) -> Path | None:
    """The run folder in ``folder`` holding a finished run of ``spec``'s configs: the same run id, or the same id
    under another model name (an id ends in the rate, the seed and a digest of both configs; the name is only its
    readable start, so two experiments that call one model differently share its runs)."""
    if _fate_of(folder / spec.run_id) is not None:
        return folder / spec.run_id
    tail = spec.run_id[len(spec.run_id.rsplit("-lr", 1)[0]):]  # "-lr{rate}-s{seed}-{digest}"
    for candidate in sorted(folder.glob(f"*{tail}")):
        fate = _fate_of(candidate)
        if fate is not None and fate.get("lr") == spec.lr and fate.get("seed") == spec.seed:
            return candidate
    return None


def _reuse(spec: RunSpec, out: Path, folders, corpus=None, say=print) -> dict | None:
    """The fate of ``spec``'s run finished in one of ``folders`` (other experiments', or kept records: a run id is a
    digest of the whole spec, so the same digest is the same run), copied into ``out`` whole (checkpoints too), its
    fate renamed to this experiment's model name where the other called it otherwise, and given this experiment's
    role for it (a tuning run here may be another's run at its best rate: the same configs, seed and rate;
    ``copied_from`` says which run); None if there is none or ``out`` already holds a start of the run (resumed
    there instead). ``corpus``: (the experiment's data fingerprint, whether one is required); a twin trained on other
    data is not copied (said)."""
    if not folders or (out / spec.run_id).exists():
        return None
    twins = [t for t in (_finished_twin(spec, Path(f)) for f in folders) if t is not None]
    twin = None
    for candidate in twins:
        why = corpus_mismatch(candidate, *corpus) if corpus is not None else None
        if why is None:
            twin = candidate
            break
        say(f"not copied: {why}")
    if twin is None:
        return None
    out.mkdir(parents=True, exist_ok=True)
    partial = out / f".{spec.run_id}.copying"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(twin, partial)
    fate = _fate_of(partial)
    if twin.name != spec.run_id or fate.get("tuning") != spec.tuning:  # this experiment's name, id and role
        write_json_atomic(partial / FATE_FILE, {**fate, "run_id": spec.run_id, "model_name": spec.model_name,
                                                "tuning": spec.tuning,
                                                "copied_from": f"{twin.parent.name}/{twin.name}"})
    partial.rename(out / spec.run_id)  # whole or not at all: an interrupted copy leaves only the hidden folder
    return _fate_of(out / spec.run_id)


@dataclass(frozen=True)
class Placement:
    """Where an experiment's runs train and what they may reuse.

    Attributes:
        gpus: on CUDA, run ``k`` of those in progress gets GPU ``k mod gpus``.
        reuse: folders (other experiments', or kept records) whose finished runs of identical spec are copied in
            instead of trained again: one folder, several, or None.
        corpus: model name → (its data's fingerprint, whether one is required), against which a run to copy is
            checked (:func:`corpus_mismatch`); None checks nothing.
    """

    gpus: int = 1
    reuse: str | Path | list | tuple | None = None
    corpus: dict | None = None


def execute(runs: list[RunSpec] | Callable[[dict[str, RunResult]], list[RunSpec]], out, workers: int, device: str,
            unigram: dict, margin: float, say=print, watch=None,
            placement: Placement = Placement()) -> tuple[list[RunResult], int | None]:
    """Run ``runs`` (those without a fate) on ``workers`` processes at once; returns (every run's result, including
    those finished before, and the signal that stopped it early: ``signal.SIGINT``, ``signal.SIGTERM`` or None).
    ``runs`` is a list, or a schedule: a callable from the finished runs (run id → result) to every run needed so
    far, in the order to start them (:class:`~sigprop.experiments.schedule.Schedule`), asked again whenever a run
    finishes. ``unigram``: model name → its unigram loss. ``watch``, if given, is called about once a second with the
    specs of the runs in progress (to show their progress from their run directories). ``placement``: the GPUs, the
    folders to reuse finished runs from and the corpus they must match (:class:`Placement`)."""
    gpus, reuse, corpus = placement.gpus, placement.reuse, placement.corpus
    out = Path(out)
    folders = [] if reuse is None else [Path(reuse)] if isinstance(reuse, str | Path) else [Path(f) for f in reuse]
    schedule = runs if callable(runs) else (lambda finished, fixed=list(runs): fixed)
    results: dict[str, RunResult] = {}
    seen: set[str] = set()  # run ids whose earlier fate has been looked for
    interrupted: set[str] = set()  # runs stopped from outside: resumed by the next invocation, not by this one
    failed: set[str] = set()  # runs that crashed: tried again by the next invocation, not by this one
    reused = 0
    running: dict[int, _Launched] = {}

    def plan(report: bool = True) -> tuple[list[RunSpec], list[RunSpec]]:
        """(every run needed, those still to start), finished runs found on disk or in ``folders`` taken in until
        the schedule asks for nothing new; ``report``: say how many were copied in."""
        nonlocal reused
        before = reused
        while True:
            needed = schedule(results)
            found = False
            for spec in needed:
                if spec.run_id in seen:
                    continue
                seen.add(spec.run_id)
                known = _fate_of(out / spec.run_id)
                mine = None if corpus is None else corpus.get(spec.model_name)
                why = None if known is None or mine is None else corpus_mismatch(out / spec.run_id, *mine)
                if why is not None:  # trained on other data: neither pooled nor steering the schedule; trained again
                    aside = _set_aside(out / spec.run_id, "other-data")
                    say(f"set aside as {aside.name}: {why}; it trains again")
                    known = None
                if known is None and (known := _reuse(spec, out, folders, mine, say)) is not None:
                    reused += 1
                if known is not None:
                    if known.get("tuning") != spec.tuning:  # a copy made with another experiment's role for it
                        known = {**known, "tuning": spec.tuning}  # (a tuning run here, another's best-rate seed)
                        write_json_atomic(out / spec.run_id / FATE_FILE, known)  # the table reads it from disk
                    results[spec.run_id] = RunResult.from_record(known)
                    found = True
            if not found:
                if report and reused > before:
                    say(f"{reused - before} more finished run(s) of identical spec copied from "
                        f"{', '.join(map(str, folders))}")
                skip = {job.spec.run_id for job in running.values()} | interrupted | failed
                todo = [s for s in needed if s.run_id not in results and s.run_id not in skip]
                return needed, [s for s in todo if not arithmetic_clash(s)]

    clashes: dict[str, str] = {}  # model name → the arithmetic its finished runs trained in, where it is not ours
    recorded: dict[tuple[str, int], str | None] = {}  # (run id, its record's mtime) → the record's arithmetic

    def recorded_precision(run_id: str) -> str | None:
        try:
            key = (run_id, (out / run_id / "run.json").stat().st_mtime_ns)
        except OSError:
            return None
        if key not in recorded:
            recorded[key] = _recorded_precision(out / run_id)
        return recorded[key]

    def arithmetic_clash(spec: RunSpec) -> bool:
        """Whether ``spec``'s model has finished runs here trained in another arithmetic than this device's (bf16
        on a GPU, fp32 on a CPU, for precision "auto"): its other runs are then not trained here, since one model's
        seeds and rates are compared in one arithmetic (said once per model)."""
        from ..train.config import resolve_precision

        ours = resolve_precision(spec.train_config.get("precision", "auto"), device)
        theirs = {recorded_precision(r.run_id) for r in results.values() if r.model_name == spec.model_name}
        other = sorted(p for p in theirs if p is not None and p != ours)
        if not other:
            return False
        if spec.model_name not in clashes:
            clashes[spec.model_name] = other[0]
            say(f"not trained here: {spec.model_name}'s finished runs trained in {other[0]}, and this device trains "
                f"{ours}; run its other runs where those ran (--device), or into a new --out")
        return True

    needed, todo = plan(report=False)  # the first plan's copies are said below, with the count of finished runs
    if reused:
        say(f"{reused} finished run(s) of identical spec copied from {', '.join(map(str, folders))}")
    if len(results):
        say(f"{len(results)} of {len(needed)} runs already finished; {len(todo)} to run")
    stop = {"signal": None}

    def on_signal(signum, frame):
        stop["signal"] = signum

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    done, watched = 0, 0.0
    try:
        while (todo or running) and stop["signal"] is None:
            free = [slot for slot in range(workers) if slot not in running]
            while todo and free and stop["signal"] is None:
                spec, slot = todo.pop(0), free.pop(0)
                running[slot] = _launch(spec, out, device, slot, gpus)
                say(f"start {spec.run_id}")
            time.sleep(0.2)
            if watch is not None and time.perf_counter() - watched >= 1.0:
                watch([job.spec for job in running.values()])
                watched = time.perf_counter()
            for slot, job in list(running.items()):
                code = job.proc.poll()
                if code is None:
                    continue
                job.log.close()
                del running[slot]
                if code in (130, 143, -signal.SIGINT, -signal.SIGTERM, -signal.SIGKILL):
                    say(f"interrupted {job.spec.run_id} (resumed next time)")
                    interrupted.add(job.spec.run_id)
                    continue
                result = _judge(job.spec, out / job.spec.run_id, code, Path(job.log.name),
                                unigram[job.spec.model_name], margin, time.perf_counter() - job.started)
                done += 1
                if result.fate == "failed":
                    write_json_atomic(out / job.spec.run_id / FAILED_FILE, asdict(result))
                    failed.add(result.run_id)
                    say(f"failed {result.run_id} ({result.detail}); tried again next invocation")
                    continue
                write_json_atomic(out / job.spec.run_id / FATE_FILE, asdict(result))
                results[result.run_id] = result
                if stop["signal"] is None:  # the schedule may now ask for more (a grid extension, other seeds)
                    needed, todo = plan()
                final = "–" if result.final_val is None else f"{result.final_val:.4f}"
                say(f"{result.fate} {result.run_id}: validation {final}, {result.wall:.0f} s "
                    f"({done}/{done + len(todo) + len(running)} of this invocation)")
    finally:
        for job in running.values():  # a signal: every run checkpoints and stops, to be resumed next time
            job.proc.send_signal(signal.SIGTERM)
        for job in running.values():
            try:
                job.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                job.proc.kill()
                job.proc.wait()
            job.log.close()
            say(f"interrupted {job.spec.run_id} at its last checkpoint (resumed next time)")
        for s, handler in previous.items():
            signal.signal(s, handler)
    if failed:
        waiting = sorted({s.model_name for s in needed if s.run_id in failed})
        say(f"{len(failed)} run(s) failed (see {out / 'logs'}); {', '.join(waiting)} wait(s) for them and is not "
            "settled. Rerun the same command to try them again")
    if interrupted and stop["signal"] is None:
        waiting = sorted({s.model_name for s in needed if s.run_id in interrupted})
        say(f"{len(interrupted)} run(s) ended by a signal the runner did not send (killed from outside, or for "
            f"memory: see {out / 'logs'}); {', '.join(waiting)} wait(s) for them and is not settled. Rerun the same "
            "command to resume them from their last checkpoints")
    return [results[s.run_id] for s in needed if s.run_id in results], stop["signal"]
