"""The entropy of every layer's self-attention probabilities on a batch, normalised by its largest value: 1 for a
uniform row over the keys a query may see, 0 for a row on a single key (entropy collapse, the failure shaped
attention prevents: Noci et al. 2023 Sec. 4, App. D; Alekseev 2026 Sec. 1).

For a query with m visible keys (causal and padding masks applied) and probabilities p = softmax(q·kᵀ/τ) over them,
H = −Σ p log p and the normalised entropy is H / log m (queries with m = 1, and padded positions' queries, are left
out); the value per layer is its
mean over the batch, the heads and the queries. τ is √d_head for softmax attention (scaled dot-product attention)
and shaped attention's own temperature τ = τ₀√(d·d_head) for its softmax part (Eq. 9). Value-SkipInit attention
reports its softmax matrix A (what β multiplies).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from ..model.batch import Batch
    from ..model.transformer import Transformer

__all__ = ["attention_entropies"]


def _self_attention(layer: nn.Module) -> Any:
    block = getattr(getattr(layer, "attn", None), "branch", None)
    return getattr(block, "attn", None)


def _normalised_entropy(q: torch.Tensor, k: torch.Tensor, tau: float, causal: bool,
                        key_mask: torch.Tensor | None) -> float:
    logits = (q @ k.transpose(-1, -2)).double() / tau  # (B, H, L, L)
    lq, lk = logits.shape[-2:]
    visible = torch.ones(lq, lk, dtype=torch.bool, device=logits.device)
    if causal:
        visible = visible.tril()
    visible = visible.expand(logits.shape)
    if key_mask is not None:
        visible = visible & key_mask.bool()[:, None, None, :]
    logp = torch.log_softmax(logits.masked_fill(~visible, float("-inf")), dim=-1)
    p = logp.exp()
    entropy = -(torch.where(visible, p * logp, torch.zeros_like(p))).sum(-1)
    m = visible.sum(-1)
    keep = m >= 2
    if key_mask is not None:  # self-attention: a padded position's query row is no query of the sequence
        keep = keep & key_mask.bool()[:, None, :].expand(keep.shape)
    if not bool(keep.any()):
        return math.nan
    return float((entropy[keep] / torch.log(m[keep].double())).mean())


def attention_entropies(model: Transformer, batch: Batch | dict[str, Any]) -> list[float]:
    """Normalised attention entropy of each layer's self-attention (module docstring) on ``batch`` (a
    :class:`~sigprop.model.batch.Batch` or sigprop's dict: :func:`sigprop.model.objective.make_batch`), in eval
    mode without gradients; NaN for a layer whose self-attention is not a softmax attention sigprop knows."""
    from ..components.attention import MultiHeadAttention
    from ..components.shaped_attention import ShapedAttention
    from ..model.objective import objective_sums

    captured: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
    hooks = []
    layers = list(model.all_layers())
    for layer in layers:
        attn = _self_attention(layer)
        if isinstance(attn, MultiHeadAttention | ShapedAttention):
            def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                     index: int = layer.index) -> None:
                captured[index] = (args[0].detach(), kwargs.get("key_padding_mask"))
            hooks.append(attn.register_forward_pre_hook(hook, with_kwargs=True))
    from .preserved import preserved_state

    try:
        with preserved_state(model), torch.no_grad(), torch.autocast(_device_type(model), enabled=False):
            model.eval()
            objective_sums(model, batch, top1=False)
    finally:
        for h in hooks:
            h.remove()
    out = []
    for layer in layers:
        attn = _self_attention(layer)
        if layer.index not in captured:
            out.append(math.nan)
            continue
        x, key_mask = captured[layer.index]

        tau = float(attn.tau) if isinstance(attn, ShapedAttention) else math.sqrt(attn.d_head)
        with torch.no_grad():
            q, k = attn.queries_and_keys(x)
            out.append(_normalised_entropy(q, k, tau, attn.causal, key_mask))
    return out


def _device_type(model: nn.Module) -> str:
    return next((p.device.type for p in model.parameters()), "cpu")
