"""One seed's measurement: model number ``seed`` of a config (:func:`~sigprop.model.transformer.seeded_model`: its
weights from the seed, drawn on the CPU, its dropout masks from its own seed) measured with hooks on a batch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.profile import Profile
from ..model.batches import batch_to
from ..model.config import TransformerConfig
from ..model.transformer import seeded_model
from .hooks import measure

if TYPE_CHECKING:
    import torch

    from ..model.batch import Batch

__all__ = ["measure_seed"]


def measure_seed(config: TransformerConfig, batch: Batch | dict, seed: int,
                 device: torch.device | str | None = None) -> Profile:
    """The measured profile of model number ``seed`` of ``config`` (:func:`~sigprop.model.transformer.seeded_model`:
    identical weights on every device, training mode, dropout masks from its own seed) on ``batch`` (moved to
    ``device``; a no-op where it is already there)."""
    model = seeded_model(config, seed, device)
    return measure(model, batch if device is None else batch_to(batch, device))
