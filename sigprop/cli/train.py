"""``sigprop train``: train a model into a run directory (``--out``), continue one (``--resume``), and overlay runs'
curves (``sigprop train plot``). Parses, calls :func:`sigprop.train.fit` / :func:`~sigprop.train.resume` /
:func:`~sigprop.train.plots.plot_runs`, prints."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections import deque
from pathlib import Path
from typing import Annotated

import typer

from .options import Overrides
from .terminal import console, note

__all__ = ["train_app", "TrainDisplay"]

train_app = typer.Typer(
    add_completion=False, pretty_exceptions_enable=False, invoke_without_command=True,
    help="Train a model of any config (encoder: masked-LM; decoder: next token; encoder-decoder: continuation; ViT: "
         "digits) into a run directory: metrics.jsonl, checkpoints (safetensors + JSON), figures. Exact resume; "
         "several processes with `torchrun --nproc-per-node N -m sigprop train …`.")

TrainPreset = Annotated[str, typer.Option(
    "--preset", help="Start from a training preset (cpu-deep, cpu-encoder, cpu-encdec, cpu-vit: `--list-presets`) or "
                     "a model preset of `sigprop compare --list-presets` with the default training.")]
ConfigFiles = Annotated[list[Path], typer.Option(
    "--config", help="A JSON file of TransformerConfig and/or TrainConfig fields, or a run's run.json (repeatable; "
                     "applied over the preset).")]
TrainOverrides = Annotated[list[str], typer.Option(
    "--train-set", help="Override one TrainConfig field, e.g. --train-set steps=1000 --train-set lr=3e-4 "
                        "(fields: steps, batch_size, lr, warmup_steps, schedule, final_lr_fraction, clip, "
                        "weight_decay, eval_every, eval_batches, checkpoint_every, keep_checkpoints, seed, precision, "
                        "compile, …).")]


class TrainDisplay:
    """A run's progress: on a terminal a bar with step, loss, validation loss, tokens/s and ETA; elsewhere a plain
    line every 10 s and at every validation (a log stays informative)."""

    EVERY_S = 10.0

    def __init__(self):
        self.tty = sys.stdout.isatty()
        self._bar = None
        self._last_line = 0.0
        self._val = None
        self._rate = None
        self._recent: deque = deque(maxlen=20)  # (tokens, wall) of the last steps: the rate over them
        self._t0 = time.perf_counter()

    def begin(self, total_steps: int, first_step: int) -> None:
        self.total, self.first = total_steps, first_step
        self._t0 = time.perf_counter()
        if self.tty:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn("train"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[info]}"), TimeRemainingColumn(), console=console,
                                 transient=False)
            self._bar.__enter__()
            self._task = self._bar.add_task("train", total=total_steps, completed=first_step, info="")
        else:
            self._line(f"training steps {first_step + 1}-{total_steps}")

    def _info(self, record: dict) -> str:
        parts = [f"loss {record['loss']:.4f}"]
        if self._val is not None:
            parts.append(f"val {self._val:.4f}")
        if self._rate:
            parts.append(f"{self._rate:,.0f} tok/s")
        return "  ".join(parts)

    def update(self, record: dict) -> None:
        if record.get("val_loss") is not None:
            self._val = record["val_loss"]
        self._recent.append((record["tokens"], record["wall"]))
        (t0, w0), (t1, w1) = self._recent[0], self._recent[-1]
        if len(self._recent) > 1 and w1 > w0:
            self._rate = (t1 - t0) / (w1 - w0)
        elif record.get("tokens_per_s"):
            self._rate = record["tokens_per_s"]
        if self._bar is not None:
            self._bar.update(self._task, completed=record["step"], info=self._info(record))
            return
        now = time.perf_counter()
        if now - self._last_line >= self.EVERY_S or "val_loss" in record or record["step"] == self.total:
            done = record["step"] - self.first
            eta = (now - self._t0) / done * (self.total - record["step"]) if done else float("nan")
            self._line(f"step {record['step']}/{self.total}  {self._info(record)}  lr {record['lr']:.3g}  "
                       f"ETA {eta:.0f} s")

    def _line(self, text: str) -> None:
        self._last_line = time.perf_counter()
        sys.stderr.write(f"[{time.perf_counter() - self._t0:7.1f} s] {text}\n")
        sys.stderr.flush()

    def note(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(f"note: {text}")
        else:
            note(text)

    def end(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None


def _command_line() -> str:
    return " ".join(["sigprop", *sys.argv[1:]])


def _print_result(result) -> None:
    if not result.main:  # one report per run: rank 0's
        return
    last, val = result.last, result.validation
    if last:
        console.print(f"step {result.steps_done}/{result.total_steps}: training loss {last['loss']:.4f}"
                      + (f", validation loss {val['val_loss']:.4f}" if val.get("val_loss") is not None else "")
                      + (f" (perplexity {val['val_ppl']:.4g})" if val.get("val_ppl") is not None else "")
                      + (f" (accuracy {val['val_acc']:.3f})" if val.get("val_acc") is not None else ""))
    console.print(f"run directory: {result.run_dir}", highlight=False)
    if result.checkpoint is not None:
        console.print(f"checkpoint: {result.checkpoint}", highlight=False)
    for fig in result.figures:
        console.print(f"figure: {fig}", highlight=False)


@train_app.callback()
def train_command(
    ctx: typer.Context,
    preset: TrainPreset = None,
    config: ConfigFiles = None,
    overrides: Overrides = None,
    train_overrides: TrainOverrides = None,
    out: Annotated[Path, typer.Option(help="The run directory to create (a folder holding no run).")] = None,
    resume_dir: Annotated[Path, typer.Option("--resume", help="Continue the run in this directory from its last "
                                             "checkpoint, exactly.")] = None,
    track_every: Annotated[int, typer.Option(help="Record every layer's statistics on a fixed probe batch every K "
                                             "steps, with the theory at step 0 (track.jsonl, track.png).")] = None,
    data: Annotated[str, typer.Option(help="Text file or folder to train on (default: the Python standard "
                                       "library's source, ~2.6 M tokens at a vocabulary of 2048; `python`: the "
                                       "standard library and the installed packages, 64 MB, ~22 M tokens); for a "
                                       "ViT a folder of images or a .npy array.")] = None,
    device: Annotated[str, typer.Option(help="cpu or cuda (under torchrun: each process its own GPU).")] = None,
    list_presets: Annotated[bool, typer.Option("--list-presets", help="List the presets and exit.")] = False,
) -> None:
    """Train, or resume with --resume RUN_DIR. Presets: `--list-presets`."""
    if ctx.invoked_subcommand is not None:
        return
    from ..train.presets import TRAIN_PRESETS

    if list_presets:
        for name, p in TRAIN_PRESETS.items():
            console.print(f"[bold]{name}[/bold]: {p.description}")
        console.print("(and every model preset of `sigprop compare --list-presets`, with the default training)")
        return
    from ..train import fit, resume

    if resume_dir is not None:
        if out is not None or preset is not None or config or overrides or train_overrides or track_every is not None \
                or data is not None:
            raise ValueError("--resume continues a run as it was configured: give it alone (and --device)")
        result = resume(resume_dir, device=device, progress=TrainDisplay(), command=_command_line())
    else:
        if out is None:
            raise ValueError("give --out RUN_DIR (a new run) or --resume RUN_DIR")
        from ..train.presets import resolve_train_configs

        extra = list(train_overrides or ())
        if track_every is not None:
            extra.append(f"track_every={track_every}")
        model_config, train_config = resolve_train_configs(preset, config, overrides, extra)
        if data is not None:  # as typed: `./python` is a folder, `python` the installed packages' corpus
            train_config = dataclasses.replace(train_config, data=data)
        result = fit(model_config, train_config, out, device=device, progress=TrainDisplay(),
                     command=_command_line())
    _print_result(result)
    if result.stopped:
        raise typer.Exit(130 if result.stopped == "SIGINT" else 143)


@train_app.command("plot")
def plot_command(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run directories to overlay.")],
    out: Annotated[Path, typer.Option(help="The PNG to write.")] = Path("runs.png"),
) -> None:
    """Overlay the training and validation curves of several runs."""
    from ..core.outputs import check_output_path
    from ..train.plots import plot_runs
    from ..train.run_dir import read_run

    out = check_output_path(out, "--out", ".png")
    for run_dir in run_dirs:
        read_run(run_dir)
    console.print(f"figure: {plot_runs(run_dirs, out)}")
