"""How a model is trained: :class:`TrainConfig`, frozen and validated in one place, separate from the model's
:class:`~sigprop.model.config.TransformerConfig`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

from ..core.overrides import DictConfig, apply_field_overrides, dataclass_from_dict
from ..core.validate import check_choice, check_integer, check_number

__all__ = ["TrainConfig", "SCHEDULES", "PRECISIONS", "Arithmetic", "resolve_precision", "with_absolute_data",
           "train_config_from_dict", "apply_train_overrides"]

#: Learning-rate schedules after the linear warmup (:mod:`sigprop.train.schedule`).
Schedule = Literal["cosine", "linear", "constant"]
SCHEDULES: tuple[Schedule, ...] = get_args(Schedule)
#: Arithmetic of the forward and backward passes: "auto" is bf16 autocast on a GPU and float32 on a CPU.
Precision = Literal["auto", "fp32", "bf16"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
#: The arithmetic a run actually trains in, once "auto" is resolved for its device.
Arithmetic = Literal["fp32", "bf16"]


def resolve_precision(precision: Precision, device_type: str) -> Arithmetic:
    """The arithmetic a run trains in: "auto" is bf16 on a GPU ("cuda"), fp32 elsewhere; fp32 and bf16 as they are.

    Args:
        precision: a :class:`TrainConfig`'s ``precision``.
        device_type: ``"cpu"`` or ``"cuda"``.

    Returns:
        ``"fp32"`` or ``"bf16"``.

    Example:
        >>> resolve_precision("auto", "cuda"), resolve_precision("auto", "cpu")
        ('bf16', 'fp32')
    """
    if precision == "auto":
        return "bf16" if device_type == "cuda" else "fp32"
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision

#: Largest values the validation accepts where a bigger one is a typo, not a run (steps, batch).
MAX_STEPS = 10**9
MAX_BATCH = 10**6


@dataclass(frozen=True)
class TrainConfig(DictConfig):
    """One training run's settings (the model's are its ``TransformerConfig``).

    Optimiser: AdamW (Loshchilov & Hutter 2019) with decoupled ``weight_decay`` on the weight matrices and
    embeddings only (no decay on norms, biases or residual scales β), moments ``adam_beta1`` / ``adam_beta2``,
    ``adam_eps``. Learning rate: linear warmup over ``warmup_steps`` (step t at ``lr·(t+1)/warmup_steps``, so the
    first step already moves), then ``schedule`` ("cosine", "linear" or "constant") from ``lr`` down to
    ``lr·final_lr_fraction`` at the last step (a run with ``warmup_steps`` ≥ ``steps`` ends inside its warmup, at
    ``lr·steps/warmup_steps``). ``clip``: the global gradient norm is
    clipped to it (None: no clipping). ``batch_size`` is the global batch (sequences or images per step, split over
    the processes of a distributed run). Validation every ``eval_every`` steps on ``eval_batches`` held-out batches
    (the held-out ``val_fraction`` of the corpus's files, or of the images). A checkpoint every
    ``checkpoint_every`` steps, the last ``keep_checkpoints`` kept. ``track_every``: record every layer's
    statistics on a fixed probe batch of ``track_batch`` every K steps (None: never). ``seed`` fixes the weights,
    the data order and the dropout masks. ``data``: a text file or folder (a folder of images or a ``.npy`` for a
    patch model) instead of the default corpus (the standard library's source; the digits for a patch model), or
    ``"python"``, the larger built-in corpus (the standard library and the installed packages,
    :data:`sigprop.data.corpus.PYTHON_CORPUS`).
    ``precision``, ``compile`` (compile one transformer layer and reuse it for every layer of its shape):
    :mod:`sigprop.train.speed`. ``tensorboard``: also write the metrics as TensorBoard scalars into
    ``RUN_DIR/tensorboard`` (needs the ``tensorboard`` extra: ``pip install sigprop[tensorboard]``).
    """

    steps: int = 300
    batch_size: int = 16
    lr: float = 1e-3
    warmup_steps: int = 30
    schedule: Schedule = "cosine"
    final_lr_fraction: float = 0.1
    clip: float | None = 1.0
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_eps: float = 1e-8
    eval_every: int = 50
    eval_batches: int = 4
    val_fraction: float = 0.05
    checkpoint_every: int = 100
    keep_checkpoints: int = 2
    track_every: int | None = None
    track_batch: int = 4
    seed: int = 0
    data: str | None = None
    precision: Precision = "auto"
    compile: bool = False
    tensorboard: bool = False

    def __post_init__(self):
        check_integer(self, "steps", 1)
        check_integer(self, "batch_size", 1)
        for name, hi in (("steps", MAX_STEPS), ("batch_size", MAX_BATCH)):
            if getattr(self, name) > hi:
                raise ValueError(f"{name} must be <= {hi} (got {getattr(self, name)})")
        check_number(self, "lr", 0.0, 1e3, lo_open=True)
        check_integer(self, "warmup_steps", 0)
        check_choice(self, "schedule", SCHEDULES)
        check_number(self, "final_lr_fraction", 0.0, 1.0)
        check_number(self, "clip", 0.0, lo_open=True, optional=True)
        check_number(self, "weight_decay", 0.0, 1e3)
        check_number(self, "adam_beta1", 0.0, 1.0, hi_open=True)
        check_number(self, "adam_beta2", 0.0, 1.0, hi_open=True)
        check_number(self, "adam_eps", 0.0, 1.0, lo_open=True)
        for name in ("eval_every", "eval_batches", "checkpoint_every", "keep_checkpoints", "track_batch"):
            check_integer(self, name, 1)
        check_integer(self, "track_every", 1, optional=True)
        check_number(self, "val_fraction", 0.0, 0.5, lo_open=True)
        check_integer(self, "seed", 0)
        if self.data is not None and (not isinstance(self.data, str) or not self.data.strip()):
            raise ValueError(f"data must be a path or None (got {self.data!r})")
        check_choice(self, "precision", PRECISIONS)
        for name in ("compile", "tensorboard"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false (got {getattr(self, name)!r})")


def train_config_from_dict(data: dict) -> TrainConfig:
    """A :class:`TrainConfig` from a plain dict (a JSON file), rejecting unknown keys by name."""
    return dataclass_from_dict(TrainConfig, data, "training config")


def apply_train_overrides(config: TrainConfig, overrides) -> TrainConfig:
    """Apply ``key=value`` strings (the command line's ``--train-set``), each parsed by its field's type."""
    return apply_field_overrides(config, list(overrides or ()), "--train-set", "training config field")


def with_absolute_data(config: TrainConfig) -> TrainConfig:
    """``config`` with a relative ``data`` path made absolute, so that a run's record names its data wherever it is
    resumed from; the default, the built-in (``"python"``) and the pinned corpora, and a path that does not exist
    (refused later, by name), as they are.

    Args:
        config: a new run's :class:`TrainConfig`.

    Returns:
        The same config, ``data`` absolute where it is a relative path to a file or folder.

    Example:
        >>> with_absolute_data(TrainConfig(data="pinned:python-v1")).data
        'pinned:python-v1'
    """
    from pathlib import Path

    from ..data.corpus import PYTHON_CORPUS
    from ..data.pinned import is_pinned

    data = config.data
    if data is None or data == PYTHON_CORPUS or is_pinned(data) or Path(data).is_absolute() or not Path(data).exists():
        return config
    return replace(config, data=str(Path(data).resolve()))

