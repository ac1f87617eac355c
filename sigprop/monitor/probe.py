"""The probe: one fixed batch measured on the model as it is now, without changing the training.

Three guarantees make a probe invisible to the run it watches:

* **random state**: the pass runs inside ``torch.random.fork_rng`` (the CPU generator, and the current CUDA
  device's when the model is on one), seeded the same way every time, so the probe's dropout masks are the same at
  every point and the run's own random stream continues as if no probe had run;
* **gradients**: the backward pass is ``torch.autograd.grad`` to the site tensors only
  (:func:`sigprop.measurement.hooks.measure`): no parameter's ``.grad`` is written, so an accumulating gradient is
  left as it was;
* **mode and precision**: the pass runs in training mode (dropout on, as the theory assumes) and the model's mode is
  restored after it; autocast is switched off for it, so a run under bf16 autocast is measured in the weights' own
  precision, the same at every point whatever the caller's context.

The model probed is the module under its wrappers: a ``torch.compile``\\ d module's ``_orig_mod`` and a
``DistributedDataParallel``'s ``module`` (so the probe enters no collective operation and can run on one rank).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import fields, is_dataclass, replace

import torch
from torch import nn

__all__ = ["PROBE_SEED", "unwrap", "batch_to", "Probe"]

#: Added to the monitor's seed to seed the probe's forked generator.
PROBE_SEED = 0x5EED


def unwrap(model: nn.Module) -> nn.Module:
    """The module under ``torch.compile`` (``_orig_mod``) and ``DistributedDataParallel`` / ``DataParallel``
    (``module``) wrappers, however nested.

    Example:
        >>> from torch import nn
        >>> net = nn.Linear(2, 2)
        >>> unwrap(nn.parallel.DataParallel(net)) is net
        True
    """
    while True:
        inner = getattr(model, "_orig_mod", None)
        if inner is None and isinstance(model, nn.DataParallel | nn.parallel.DistributedDataParallel):
            inner = model.module
        if not isinstance(inner, nn.Module):
            return model
        model = inner


def batch_to(batch, device: torch.device):
    """``batch`` with every tensor moved to ``device``: a tensor, a mapping of tensors (other values kept) or a
    dataclass batch such as :class:`~sigprop.model.batch.Batch`."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    if is_dataclass(batch) and not isinstance(batch, type):
        moved = {f.name: getattr(batch, f.name).to(device) for f in fields(batch)
                 if isinstance(getattr(batch, f.name), torch.Tensor)}
        return replace(batch, **moved)
    return batch


def _device_of(model: nn.Module) -> torch.device:
    first = next(model.parameters(), None)
    return torch.device("cpu") if first is None else first.device


@contextlib.contextmanager
def _own_forward(model: nn.Module):
    """The model's own ``forward`` for the duration: accelerate's mixed precision (the Hugging Face Trainer's
    ``bf16=True`` / ``fp16=True``) replaces a model's ``forward`` by one that enters autocast itself, keeping the
    original as ``_original_forward``, which an autocast-off context around the call cannot undo."""
    original, patched = getattr(model, "_original_forward", None), model.__dict__.get("forward")
    if original is None or patched is None:
        yield
        return
    model.forward = original
    try:
        yield
    finally:
        model.forward = patched


class Probe:
    """Measures ``model`` on ``batch`` (module docstring).

    Args:
        model: the model, possibly compiled or wrapped for data parallelism.
        batch: any batch :func:`sigprop.measure` takes (sigprop's dict, a Hugging Face dict, token ids, a
            :class:`~sigprop.model.batch.Batch`), or whatever ``loss_fn`` reads; kept on the CPU and moved to the
            model's device at each pass (the model may move after the probe is made).
        loss_fn: ``loss_fn(model, batch) -> scalar tensor``; default the model's own loss.
        seed: the forked generator is seeded with ``seed + PROBE_SEED``.
    """

    def __init__(self, model: nn.Module, batch, loss_fn: Callable | None = None, seed: int = 0):
        if loss_fn is not None and not callable(loss_fn):
            raise ValueError(f"loss_fn must be callable as loss_fn(model, batch) (got {type(loss_fn).__name__})")
        self.model = unwrap(model)
        self.cpu_batch = batch
        self.loss_fn = loss_fn
        self.seed = int(seed)
        self._on: tuple[torch.device, object] | None = None

    @property
    def device(self) -> torch.device:
        return _device_of(self.model)

    def batch(self):
        """The batch on the model's device (moved once per device)."""
        device = self.device
        if self._on is None or self._on[0] != device:
            self._on = (device, batch_to(self.cpu_batch, device))
        return self._on[1]

    @contextlib.contextmanager
    def isolated(self):
        """Training mode, autocast off (also inside a forward that a framework's mixed precision wrapped in one:
        :func:`_own_forward`) and a forked random state seeded as every time (on every GPU the model's
        parameters are on); afterwards every module's mode and every buffer's values as they were
        (:func:`~sigprop.measurement.preserved.preserved_state`: a BatchNorm's running statistics untouched)."""
        from ..measurement.preserved import preserved_state

        device = self.device
        gpus = sorted({p.device.index or 0 for p in self.model.parameters() if p.device.type == "cuda"})
        with preserved_state(self.model), _own_forward(self.model):
            self.model.train()
            with torch.random.fork_rng(devices=gpus), torch.autocast(device.type, enabled=False):
                torch.manual_seed(self.seed + PROBE_SEED)
                yield

    def check(self) -> None:
        """One forward pass of the loss on the batch, without gradients, then one probe (forward and backward), in
        the probe's isolation: ``ValueError`` saying what failed when the model cannot take the batch (a wrong key,
        shape or vocabulary, no labels its head needs, a loss that is not a scalar) or cannot be measured (blocks
        re-run by activation checkpointing), before any training."""
        from ..measurement.adapters import adapt

        name = type(self.model).__name__
        try:
            adapter = adapt(self.model)
            batch = self.batch()
            with self.isolated(), torch.no_grad():
                if self.loss_fn is not None:
                    loss = self.loss_fn(self.model, batch)
                else:
                    as_batch = adapter.batch(batch)
                    loss = adapter.loss(batch if as_batch is None else as_batch)
        except (ValueError, TypeError, IndexError, KeyError, RuntimeError, AttributeError) as err:
            raise ValueError(f"the probe batch cannot be taken by {name}: {_first_line(err)}") from err
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ValueError(f"the probe batch cannot be taken by {name}: the loss must be a scalar tensor (got "
                             f"{getattr(loss, 'shape', type(loss).__name__)})")
        try:  # one probe now, gradients included: what only a backward finds (checkpointed blocks) stops no training
            self.measure()
        except (ValueError, RuntimeError) as err:
            raise ValueError(f"the monitor cannot measure {name}: {_first_line(err)}") from err

    def measure(self):
        """The measured :class:`~sigprop.core.profile.Profile` of the batch, now (module docstring)."""
        from ..measurement.hooks import measure

        batch = self.batch()
        with self.isolated():
            return measure(self.model, batch, loss_fn=self.loss_fn)


def _first_line(err: BaseException) -> str:
    """The first line of ``err``'s message, or its class's name where it has none."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
