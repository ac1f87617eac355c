"""Validation: the summed cross-entropy, labelled positions and correct predictions over fixed held-out batches,
added over every process, turned into the loss and its perplexity (or the accuracy, for images)."""

from __future__ import annotations

import math

import torch

from ..model.batch import Batch
from .distributed import World, all_sum
from .speed import autocast_for

__all__ = ["evaluate"]


def evaluate(model, batches: list[Batch], device: torch.device, is_images: bool, precision: str = "fp32",
             world: World | None = None) -> dict:
    """``{"val_loss", "val_ppl"}`` (or ``"val_acc"`` for images) of ``model`` on ``batches`` in eval mode (no
    dropout; the mode is restored): the loss is Σ cross-entropy / Σ labelled positions over all batches (and all
    processes of ``world``), each batch's sum in float32 (:func:`sigprop.model.objective.objective_sums`), the
    totals in float64. NaN where nothing was labelled; perplexity exp(loss), infinite beyond e^700. The top-1
    count (an arg-max over the vocabulary) is taken for images only."""
    from ..model.objective import objective_sums

    was_training = model.training
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)
    try:
        with torch.no_grad(), autocast_for(precision, device):
            for batch in batches:
                total, count, correct = objective_sums(model, Batch.from_any(batch).to(device), top1=is_images)
                totals += torch.stack([total.double(), count.double(), correct.double()])
    finally:
        model.train(was_training)
    total, count, correct = (all_sum(world, *totals) if world is not None else totals).tolist()
    loss = total / count if count else math.nan
    if is_images:
        return {"val_loss": loss, "val_acc": correct / count if count else math.nan}
    return {"val_loss": loss, "val_ppl": math.exp(loss) if loss < 700 else math.inf}
