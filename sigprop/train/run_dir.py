"""A run directory holds everything about one training run:

* ``run.json``: both configs, the data's split and task, the device, the world size, the versions, the command;
* ``model_config.json`` and ``train_config.json``: the two configs alone (``--config`` reads either);
* ``metrics.jsonl``: one JSON object per step (:data:`METRICS`), appended and flushed as the run goes;
* ``ckpt-<step>.safetensors`` / ``.json``: the last checkpoints (:mod:`sigprop.train.checkpoint`);
* ``curves.png``: loss, validation and learning rate against the step;
* with tracking, ``track.jsonl``, ``track-prediction.json`` and ``track.png`` (:mod:`sigprop.train.tracking`).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from ..core.jsonio import read_json, read_jsonl, write_json_atomic, write_text_atomic
from ..core.outputs import check_output_folder

__all__ = ["RUN_FILE", "METRICS_FILE", "prepare_new_run", "write_run_files", "read_run", "newest_checkpoint",
           "trained_model", "MetricsLog", "TensorBoardScalars", "read_metrics"]

RUN_FILE = "run.json"
METRICS_FILE = "metrics.jsonl"


def prepare_new_run(run_dir) -> Path:
    """``run_dir`` checked for a new run (before any work): a folder that can be written and holds no run yet."""
    run_dir = check_output_folder(run_dir, "--out")
    if (run_dir / RUN_FILE).exists():
        raise ValueError(f"--out: {run_dir} already holds a run; continue it with `sigprop train --resume {run_dir}` "
                         "or choose another folder")
    if run_dir.is_dir() and any(run_dir.glob("ckpt-*.json")):  # another run's checkpoints would be taken for ours
        raise ValueError(f"--out: {run_dir} holds checkpoints (ckpt-*.json) of another run; choose another folder")
    return run_dir


def write_run_files(run_dir: Path, run: dict) -> None:
    """``run.json`` and the two configs, atomically."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / "model_config.json", run["model_config"])
    write_json_atomic(run_dir / "train_config.json", run["train_config"])
    write_json_atomic(run_dir / RUN_FILE, _clean(run))


def read_run(run_dir) -> dict:
    """The ``run.json`` of ``run_dir``; ``ValueError`` naming the folder when there is none or it is unreadable."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"{run_dir} is not a run directory (no such folder)")
    path = run_dir / RUN_FILE
    run = read_json(path, ValueError, f"{run_dir} is not a run directory (no {RUN_FILE})", f"{path} is unreadable")
    if not isinstance(run, dict) or not isinstance(run.get("model_config"), dict) \
            or not isinstance(run.get("train_config"), dict):
        raise ValueError(f"{path} lacks the run's configs")
    return run


def newest_checkpoint(run_dir, purpose: str):
    """(model config, training config, the newest checkpoint's JSON path) of the run in ``run_dir``, for a command
    that reads its trained weights; ``ValueError`` (one line, naming ``purpose``) for a folder that is no run or a run
    without a checkpoint."""
    from ..model.config import config_from_dict
    from .checkpoint import latest_checkpoint
    from .config import train_config_from_dict

    run = read_run(run_dir)
    path = latest_checkpoint(run_dir)
    if path is None:
        raise ValueError(f"{run_dir} holds no checkpoint yet: nothing to {purpose}")
    return config_from_dict(run["model_config"]), train_config_from_dict(run["train_config"]), path


def trained_model(run_dir, purpose: str):
    """(model, its config, the checkpoint's step) of the newest checkpoint of the run in ``run_dir``: a
    :class:`~sigprop.model.transformer.Transformer` holding the trained weights, in eval mode (checkpoint checked:
    its SHA-256, model config and tensor shapes). ``ValueError`` (one line, naming ``purpose``) for a folder that is
    no run or a run without a checkpoint; ``CheckpointError`` for a damaged or foreign checkpoint."""
    import torch

    from ..model.transformer import Transformer
    from .checkpoint import load_checkpoint, model_state

    config, _, path = newest_checkpoint(run_dir, purpose)
    model = Transformer(config, generator=torch.Generator().manual_seed(0))
    ck = load_checkpoint(path, config.to_dict(), {k: tuple(v.shape) for k, v in model.state_dict().items()})
    model.load_state_dict(model_state(ck))
    return model.eval(), config, ck.step


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


class MetricsLog:
    """``metrics.jsonl``, appended one line per step and flushed (a new run starts it empty). Opening it for a
    resumed run first keeps only the lines up to the checkpoint's step (a killed run may have logged steps past its
    last checkpoint), rewriting the file atomically."""

    def __init__(self, run_dir: Path, keep_through_step: int | None = None):
        self.path = Path(run_dir) / METRICS_FILE
        if keep_through_step is not None:
            kept = [r for r in read_metrics(run_dir) if r.get("step", 0) <= keep_through_step]
            write_text_atomic(self.path, "".join(json.dumps(r, allow_nan=False) + "\n" for r in kept))
        mode = "w" if keep_through_step is None else "a"  # a new run starts an empty log
        self._file = open(self.path, mode, encoding="utf-8")  # noqa: SIM115 - held open for the run

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(_clean(record), allow_nan=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()


class TensorBoardScalars:
    """The numeric metrics of each step as TensorBoard scalars in ``RUN_DIR/tensorboard`` (the ``tensorboard``
    extra); checked when the run starts, so a missing package is an error before any work."""

    @staticmethod
    def check_available() -> None:
        """``ValueError`` when the ``tensorboard`` package is missing."""
        try:
            import tensorboard  # noqa: F401
        except ImportError:
            raise ValueError("tensorboard=true needs the tensorboard package: pip install 'sigprop[tensorboard]'") \
                from None

    def __init__(self, run_dir: Path, first_step: int):
        self.check_available()
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(str(Path(run_dir) / "tensorboard"), purge_step=first_step + 1 or None)

    def write(self, record: dict) -> None:
        for key, value in record.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and key != "step" \
                    and math.isfinite(value):
                self._writer.add_scalar(key, value, record["step"])

    def close(self) -> None:
        self._writer.close()


def read_metrics(run_dir) -> list[dict]:
    """The metrics of a run directory, one dict per line (a last line cut by a killed process is skipped)."""
    return read_jsonl(Path(run_dir) / METRICS_FILE)
