"""A model's state that a measurement pass must leave as it found it: every module's train/eval mode (not only the
root's: a frozen backbone or a BatchNorm kept in eval mode stays so) and the running statistics of its batch and
instance norms (which a pass in training mode updates). Other buffers (rotary tables, masks, quantised weights) are
not copied: a forward pass does not write them, and copying them would double their memory at every probe."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn
from torch.nn.modules.batchnorm import _NormBase

__all__ = ["preserved_state"]


@contextlib.contextmanager
def preserved_state(model: nn.Module) -> Iterator[None]:
    """Restore every submodule's mode and every norm's running statistics on leaving, whatever the body did or
    raised.

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
        saved = [(buffer, buffer.detach().clone()) for module in model.modules() if isinstance(module, _NormBase)
                 for buffer in module.buffers(recurse=False) if buffer is not None]
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training
        with torch.no_grad():
            for buffer, value in saved:
                buffer.copy_(value)
