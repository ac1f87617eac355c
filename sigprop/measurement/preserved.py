"""A model's state that a measurement pass must leave as it found it: every module's train/eval mode (not only the
root's: a frozen backbone or a BatchNorm kept in eval mode stays so) and every buffer's values (a BatchNorm's running
statistics, which a pass in training mode would update)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

__all__ = ["preserved_state"]


@contextlib.contextmanager
def preserved_state(model: nn.Module) -> Iterator[None]:
    """Restore every submodule's mode and every buffer's values on leaving, whatever the body did or raised.

    Args:
        model: the model a measurement pass runs through.

    Example:
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)).train()
        >>> _ = net[1].eval()
        >>> with preserved_state(net):
        ...     _ = net.train()(torch.randn(4, 2))
        >>> net[1].training, float(net[1].running_mean.abs().sum())
        (False, 0.0)
    """
    modes = [(module, module.training) for module in model.modules()]
    with torch.no_grad():
        saved = [(buffer, buffer.detach().clone()) for buffer in model.buffers()]
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training
        with torch.no_grad():
            for buffer, value in saved:
                buffer.copy_(value)
