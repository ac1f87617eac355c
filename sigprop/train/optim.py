"""The optimiser: AdamW with decoupled weight decay on the weight matrices and embeddings only."""

from __future__ import annotations

import torch

__all__ = ["parameter_groups", "make_optimizer"]


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: tensors of two or more dimensions (weight matrices, embeddings, the patch embedding's kernel)
    decay; vectors and scalars (norm gains and biases, DyT/Derf α, linear biases, learnable residual scales β) do
    not, as in BERT and GPT-2. A parameter shared by two modules (a tied head) appears once."""
    decay, keep = [], []
    for p in model.parameters():  # parameters() yields a shared tensor once
        if p.requires_grad:
            (decay if p.dim() >= 2 else keep).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": keep, "weight_decay": 0.0}]


def make_optimizer(model: torch.nn.Module, config, device: torch.device) -> torch.optim.Optimizer:
    """AdamW (Loshchilov & Hutter 2019) over :func:`parameter_groups` with ``config``'s betas, eps and decay; the
    fused kernel on a GPU. The learning rate is set before every step (:mod:`sigprop.train.schedule`)."""
    fused = device.type == "cuda"
    return torch.optim.AdamW(parameter_groups(model, config.weight_decay), lr=config.lr,
                             betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_eps,
                             **({"fused": True} if fused else {}))
