"""The training loop: :func:`fit` starts a run in a run directory, :func:`resume` continues one exactly.

Determinism. A step's batch and masking are functions of (seed, step) (:mod:`sigprop.train.data`), its dropout
masks of (seed, step, rank) (torch's global generator is seeded before the step), the learning rate of the step
(:mod:`sigprop.train.schedule`); the model, the optimiser's state and every generator are in the checkpoint. So on a
CPU a resumed run's losses equal the uninterrupted run's bit for bit, and a run resumed on another number of
processes sees the same global batches (only its dropout masks, drawn per process, and the order of float32
reductions differ).

Distributed. Every process computes the summed cross-entropy of its share of the global batch and scales it by
world / (labelled positions of the global batch), so that DistributedDataParallel's average of the gradients is the
gradient of the global batch's mean loss, however masked-LM labels fall between processes. Rank 0 writes the run
directory; all processes stop together (a stop request is summed over them every step).
"""

from __future__ import annotations

import dataclasses
import gc
import math
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from ..core.errors import TrainingDiverged
from ..data.fingerprint import same_data
from ..data.mlm import IGNORE_INDEX
from .checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    optimizer_state,
    restore_model,
    restore_rng,
    save_checkpoint,
)
from .config import TrainConfig, train_config_from_dict, with_absolute_data
from .data import make_data, rank_slice, step_generator
from .distributed import World, all_sum, join_world, leave_world
from .evaluation import evaluate
from .run_dir import METRICS_FILE, MetricsLog, TensorBoardScalars, prepare_new_run, read_run, write_run_files
from .schedule import learning_rate
from .speed import autocast_for, compile_layers, precision_used
from .tracking import TRACK_FILE, run_monitor

__all__ = ["fit", "resume", "FitResult", "TrainProgress"]


class TrainProgress(Protocol):
    """What a run reports: ``begin(total_steps, first_step)``, ``update(record)`` after every step (the metrics
    record), ``note(text)`` for a remark, ``end()``."""

    def begin(self, total_steps: int, first_step: int) -> None: ...

    def update(self, record: dict) -> None: ...

    def note(self, text: str) -> None: ...

    def end(self) -> None: ...


class _Quiet:
    def begin(self, total_steps, first_step):
        pass

    def update(self, record):
        pass

    def note(self, text):
        pass

    def end(self):
        pass


@dataclass(frozen=True)
class FitResult:
    """How a run ended: ``steps_done`` of ``total_steps``; ``stopped`` names the signal that stopped it early
    ("SIGINT" / "SIGTERM", a checkpoint written) or is None; ``last`` is the last metrics record, ``validation``
    the last validation, ``checkpoint`` the last checkpoint's JSON, ``figures`` the figures written; ``main``:
    whether this process is the one that wrote them (rank 0)."""

    run_dir: Path
    steps_done: int
    total_steps: int
    stopped: str | None
    last: dict
    validation: dict
    checkpoint: Path | None
    figures: tuple[Path, ...] = ()
    main: bool = True


def fit(model_config, train_config: TrainConfig, run_dir, *, device: str | None = None,
        progress: TrainProgress | None = None, command: str | None = None) -> FitResult:
    """Train a model of ``model_config`` (a :class:`~sigprop.model.TransformerConfig`) under ``train_config`` into
    the new run directory ``run_dir`` (:mod:`sigprop.train.run_dir`) on ``device`` (default cpu; under torchrun
    each process its own GPU). The objective follows the model (:mod:`sigprop.train.data`). Everything is checked
    before the first step: ``ValueError`` on bad input; :class:`~sigprop.core.errors.TrainingDiverged` when the
    loss or the gradient stops being finite (the last good checkpoint kept)."""
    from ..model.config import TransformerConfig

    if not isinstance(model_config, TransformerConfig):
        raise ValueError(f"model_config must be a TransformerConfig (got {type(model_config).__name__})")
    if not isinstance(train_config, TrainConfig):
        raise ValueError(f"train_config must be a TrainConfig (got {type(train_config).__name__})")
    run_dir = prepare_new_run(run_dir)
    return _run(model_config, with_absolute_data(train_config), run_dir, device, progress, None, command)


def resume(run_dir, *, device: str | None = None, progress: TrainProgress | None = None,
           command: str | None = None) -> FitResult:
    """Continue the run in ``run_dir`` from its newest checkpoint, exactly (module docstring), on ``device``
    (default: the device it ran on); a run stopped before its first checkpoint starts again from step 0 (the same
    run: its start is a function of its configs). ``ValueError`` when the folder holds no run;
    :class:`~sigprop.train.checkpoint.CheckpointError` when the checkpoint is truncated, tampered with or foreign."""
    from ..model.config import config_from_dict

    run = read_run(run_dir)
    path = latest_checkpoint(run_dir)
    model_config = config_from_dict(run["model_config"])
    train_config = train_config_from_dict(run["train_config"])
    for partial in Path(run_dir).glob(".ckpt-*.tmp"):  # a checkpoint whose writing was cut short
        partial.unlink(missing_ok=True)
    if path is not None:  # truncated, tampered with or foreign: said before the corpus is read and the model built
        load_checkpoint(path, model_config.to_dict())
    if path is None:  # killed before its first checkpoint: step 0 is the run's start, which is deterministic
        for name in (METRICS_FILE, TRACK_FILE):
            (Path(run_dir) / name).unlink(missing_ok=True)
        if progress is not None:
            progress.note(f"{run_dir} holds no checkpoint yet: starting it again from step 0")
    return _run(model_config, train_config, Path(run_dir), device or run.get("device"), progress, path, command,
                expected_data=run.get("data") if path is None else None)


def _check_memory(model_config, train_config, world: World) -> None:
    if world.device.type != "cpu":
        return
    from ..model.size import check_fits, measure_bytes, parameter_count

    per_rank = train_config.batch_size // world.size
    need = measure_bytes(model_config, per_rank) + 12 * parameter_count(model_config)  # + grads, Adam's moments
    check_fits(need, f"training a model of {model_config.total_layers} layers, d = {model_config.d_model}")


def _dropout_seed(seed: int, step: int, rank: int) -> int:
    return int(step_generator(seed, step, stream=2 + rank).initial_seed())


class _Signals:
    """SIGINT and SIGTERM set a flag (the loop checkpoints and stops after the current step) instead of raising
    inside a step; the previous handlers come back on exit. Only the main thread can install handlers."""

    def __init__(self):
        self.received: str | None = None
        self._previous: dict = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.received is None:
            self.received = signal.Signals(signum).name

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        return False


def _evaluate(model, data, train_config, world: World, precision: str) -> dict:
    """The validation on this process's share of the fixed held-out batches, added over the processes."""
    batches = data.val_batches(train_config.eval_batches, train_config.batch_size, world.rank, world.size)
    return evaluate(model, batches, world.device, data.is_images, precision, world)


def _divergence_hint(model_config) -> str:
    """What the theory says of the model at initialisation, for the message of a run whose loss stopped being
    finite: the first flagged finding and the diagnosis's hint, or "" when nothing is flagged (or the theory fails)."""
    try:
        from ..analysis.diagnosis import diagnose
        from ..theory.predict import predict

        diagnosis = diagnose(predict(model_config))
    except Exception:  # the message must not fail: the theory's opinion is a bonus
        return ""
    flagged = [f.describe() for f in diagnosis.findings if f.flagged]
    if not flagged:
        return " The theory flags nothing at initialisation: try a smaller lr or a longer warmup."
    return f" At initialisation the theory says: {flagged[0]}" + (f"; {diagnosis.hint}" if diagnosis.hint else "")


def _residual_scales(model) -> list[float] | None:
    from ..components.residual import Residual

    betas = [float(m.beta.detach()) for m in model.modules()
             if isinstance(m, Residual) and isinstance(m.beta, torch.nn.Parameter)]
    return betas or None


def _run(model_config, train_config: TrainConfig, run_dir: Path, device, progress, checkpoint_path, command,
         expected_data: dict | None = None):
    from ..core.versions import package_versions
    from ..model.objective import objective_sums
    from ..model.transformer import seeded_model
    from .optim import make_optimizer

    world = join_world(device)
    held: dict = {}  # what must be released before the process group is left
    progress = progress if (progress is not None and world.main) else _Quiet()
    try:
        if train_config.batch_size % world.size:
            raise ValueError(f"batch_size {train_config.batch_size} does not split over {world.size} processes")
        if model_config.arch == "decoder" and model_config.seq_len < 2:  # before the corpus is read and encoded
            raise ValueError("no position of a training batch has a target (a decoder predicts the next token: it "
                             f"needs seq_len >= 2, got {model_config.seq_len})")
        _check_memory(model_config, train_config, world)
        if train_config.tensorboard:
            TensorBoardScalars.check_available()
        torch.set_flush_denormal(True)
        data = make_data(model_config, train_config, progress=world.main)
        first = data.train_batch(0, train_config.batch_size)
        if first.labels is not None and not bool((first.labels != IGNORE_INDEX).any()):
            raise ValueError("no position of a training batch has a target (a decoder predicts the next token: it "
                             f"needs seq_len >= 2, got {model_config.seq_len})")
        if expected_data is not None and not same_data(expected_data, data.meta()):
            raise ValueError(f"{run_dir} started on other data than its data ({train_config.data or 'the default'}) "
                             "gives now (the corpus, its tokenizer or the images changed, or a relative path "
                             "names another folder from here): start a new run")
        if checkpoint_path is None:  # a DSLM ViT's correlation schedule starts from its images' (App. H)
            from ..analysis.experiment import with_batch_input_correlation

            model_config = with_batch_input_correlation(model_config, first)
        model = seeded_model(model_config, train_config.seed, device=world.device)
        optimizer = make_optimizer(model, train_config, world.device)
        start, tokens, wall0, initial = 0, 0, 0.0, None
        if checkpoint_path is not None:
            ck = restore_model(checkpoint_path, model, model_config, data.meta(), train_config)
            optimizer.load_state_dict(optimizer_state(ck, optimizer))
            restore_rng(ck.tensors, ck.info["rng"])
            start, tokens, wall0 = ck.step, int(ck.info.get("tokens", 0)), float(ck.info.get("wall", 0.0))
        precision = precision_used(train_config, world.device)
        run = {"model_config": model_config.to_dict(), "train_config": train_config.to_dict(), "data": data.meta(),
               "device": str(world.device) if world.size == 1 else world.device.type, "world_size": world.size,
               "precision": precision, "versions": package_versions(), "command": command}
        if train_config.compile:
            compile_layers(model)
        net = held["net"] = model
        if world.size > 1:
            from torch.nn.parallel import DistributedDataParallel

            net = held["net"] = DistributedDataParallel(
                model, device_ids=[world.device.index] if world.device.type == "cuda" else None)
        tracker = None
        if train_config.track_every is not None and world.main:
            tracker = run_monitor(model, data.probe_batch(train_config.track_batch), run_dir, train_config.seed,
                                  train_config.track_every, resume_step=start if checkpoint_path is not None else None)
        if checkpoint_path is None:
            initial = _evaluate(model, data, train_config, world, precision)
            if world.main:
                write_run_files(run_dir, {**run, "initial_validation": initial})
            if tracker is not None:
                progress.note("tracking: predicting the model's statistics at step 0 from theory ...")
                failed = tracker.predict().note
                if failed:
                    progress.note(f"tracking: {failed}")
                tracker.step(0)
        if start >= train_config.steps:
            progress.note(f"the run is complete ({start} of {train_config.steps} steps): nothing to resume")
            figures = ()
            if world.main and not (run_dir / "curves.png").exists():  # stopped between its last step and figures
                from .plots import write_run_figures

                figures = write_run_figures(run_dir)
            return FitResult(run_dir, start, train_config.steps, None, {}, {}, checkpoint_path, figures, world.main)
        log = MetricsLog(run_dir, keep_through_step=start if checkpoint_path is not None else None) \
            if world.main else None
        if log is not None and train_config.tensorboard:
            log = _Both(log, TensorBoardScalars(run_dir, start))
        result = _loop(_LoopSetup(net, model, optimizer, data, train_config, world, precision, run, run_dir,
                                  objective_sums, progress, log, tracker),
                       _LoopStart(start, tokens, wall0))
        if log is not None:
            log.close()
        figures = ()
        if world.main and result.stopped is None:
            from .plots import write_run_figures

            figures = write_run_figures(run_dir)
        return dataclasses.replace(result, figures=figures)
    finally:
        # DistributedDataParallel's reducer holds communication work: drop it while the process group still exists
        # (gloo work destroyed at interpreter exit aborts the process: "terminate called without an active exception")
        net = held.pop("net", None)
        del net
        gc.collect()
        leave_world(world)


class _Both:
    """The metrics log and the TensorBoard scalars, written together."""

    def __init__(self, *logs):
        self.logs = logs

    def write(self, record: dict) -> None:
        for log in self.logs:
            log.write(record)

    def close(self) -> None:
        for log in self.logs:
            log.close()


@dataclass(frozen=True)
class _LoopSetup:
    """What the training loop works with: the model (``net``: the model itself, or its DistributedDataParallel
    wrapper), its optimiser and data, the run's settings, its description (``run``: what every checkpoint repeats)
    and folder, the objective, and where it reports (the progress, the metrics log and the tracker, each optional
    but the progress)."""

    net: torch.nn.Module
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    data: object
    train_config: TrainConfig
    world: World
    precision: str
    run: dict
    run_dir: Path
    objective_sums: object
    progress: TrainProgress
    log: object | None
    tracker: object | None


@dataclass(frozen=True)
class _LoopStart:
    """Where the loop starts: the first step, the tokens already seen and the wall time already spent (0 for a new
    run, a checkpoint's for a resumed one)."""

    step: int
    tokens: int
    wall: float


def _loop(setup: _LoopSetup, begin: _LoopStart) -> FitResult:
    params = [p for p in setup.model.parameters() if p.requires_grad]
    ckpt = latest_checkpoint(setup.run_dir)
    t0 = time.perf_counter()
    progress = setup.progress
    progress.begin(setup.train_config.steps, begin.step)
    try:
        return _steps(setup, begin, params, ckpt, t0)
    finally:
        progress.end()  # also when the loop raises: a terminal's live bar is closed and its cursor shown


def _steps(setup: _LoopSetup, begin: _LoopStart, params: list, ckpt, t0: float) -> FitResult:
    """The training steps of :func:`_loop`, from ``begin`` to the last (or a stop)."""
    from ..model.shaped import anneal_shaped

    net, model, optimizer, data, tc, world = (setup.net, setup.model, setup.optimizer, setup.data,
                                              setup.train_config, setup.world)
    precision, progress, log, tracker, run, run_dir = (setup.precision, setup.progress, setup.log, setup.tracker,
                                                       setup.run, setup.run_dir)
    start, tokens, wall0 = begin.step, begin.tokens, begin.wall
    last: dict = {}
    validation: dict = {}
    with _Signals() as signals:
        for step in range(start, tc.steps):
            t_step = time.perf_counter()
            lr = learning_rate(step, tc)
            for group in optimizer.param_groups:
                group["lr"] = lr
            anneal_shaped(model, step)  # shaped "recover" modules follow App. D's schedule (stateless: resumes)
            torch.manual_seed(_dropout_seed(tc.seed, step, world.rank))
            global_batch = data.train_batch(step, tc.batch_size)
            labelled = int((global_batch.labels != IGNORE_INDEX).sum())
            batch = rank_slice(global_batch, world.rank, world.size).to(world.device, non_blocking=True)
            with autocast_for(precision, world.device):
                total, _, _ = setup.objective_sums(net, batch, top1=False)
            optimizer.zero_grad(set_to_none=True)
            (total * (world.size / labelled)).backward()
            if tc.clip is not None:
                grad_norm = torch.nn.utils.clip_grad_norm_(params, tc.clip)
            else:
                grad_norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
            stop = torch.tensor(1.0 if signals.received else 0.0)
            summed, stops = all_sum(world, total, stop).tolist()
            loss = summed / labelled
            gn = float(grad_norm)
            if not (math.isfinite(loss) and math.isfinite(gn)):
                what = "loss" if not math.isfinite(loss) else "gradient norm"
                if log is not None:
                    log.write({"step": step + 1, "loss": loss, "lr": lr, "grad_norm": gn, "non_finite": what})
                    log.close()
                kept = f"the last good checkpoint is {ckpt.name}" if ckpt else "no checkpoint had been written yet"
                raise TrainingDiverged(
                    f"step {step + 1}: the {what} is not finite ({loss if what == 'loss' else gn}); the run stopped "
                    f"and {kept}.{_divergence_hint(model.config)}")
            optimizer.step()
            done = step + 1
            step_tokens = data.tokens(global_batch)
            tokens += step_tokens
            elapsed = time.perf_counter() - t_step
            record = {"step": done, "tokens": tokens, "loss": loss, "lr": lr, "grad_norm": gn,
                      "tokens_per_s": step_tokens / elapsed if elapsed > 0 else None,
                      "wall": wall0 + time.perf_counter() - t0}
            if done % tc.eval_every == 0 or done == tc.steps:
                validation = {"step": done, **_evaluate(model, data, tc, world, precision)}
                record.update({k: v for k, v in validation.items() if k != "step"})
            betas = _residual_scales(model)
            if betas is not None:
                record["beta"] = betas
            point = None if tracker is None else tracker.step(done)
            if point is not None:
                record["diagnosis"] = point.diagnosis.to_dict()
                if point.diagnosis.flagged_findings:  # seen before the loss shows it, if it ever does
                    progress.note(f"step {done}, tracked: {point.diagnosis.flagged_findings[0]}")
            if log is not None:
                log.write(record)
            last = record
            progress.update(record)
            stopped = None
            if stops > 0 and done < tc.steps:  # a stop asked on the last step: the run is finished all the same
                stopped = signals.received or "a signal in another process"
            if (done % tc.checkpoint_every == 0 or done == tc.steps or stopped) and world.main:
                info = {"model_config": run["model_config"], "train_config": run["train_config"],
                        "data": run["data"], "next_step": done, "world_size": world.size, "tokens": tokens,
                        "wall": record["wall"], "versions": run["versions"]}
                ckpt = save_checkpoint(run_dir, done, model, optimizer, info, tc.keep_checkpoints)
            if stopped:
                progress.note(f"{stopped}: checkpoint written at step {done}; continue with "
                              f"`sigprop train --resume {run_dir}`")
                return FitResult(run_dir, done, tc.steps, stopped, last, validation, ckpt, (), world.main)
    return FitResult(run_dir, tc.steps, tc.steps, None, last, validation, ckpt, (), world.main)
