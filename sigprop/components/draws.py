"""The random numbers of the sampled attention rules (:mod:`~sigprop.components.attention_sampled`,
:mod:`~sigprop.components.attention_gram`): which seed each layer of a sweep draws from, and how the draws are made.

A sweep's sampling errors must be independent from layer to layer. A variance or a gradient deep in the model
accumulates the per-layer results (a Pre-LN stream adds its branches; a gradient multiplies the per-layer factors),
so an error shared by every layer adds up linearly over depth, where independent errors add like √depth. Every
sweep of :func:`sigprop.predict` therefore gives each layer a seed of its own (:func:`layer_seed`), through one
function every walker calls (:func:`layer_context`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["layer_context", "layer_seed", "standard_normal", "uniform", "DEFAULT_HEADS", "DEFAULT_GRAM_HEADS"]

#: Heads the exchangeable sampled rule draws per configuration (a layer of a sweep) by default: the relative standard
#: error of a variance is then about a percent at d_k = 64, L = 128 (its precision and cost against the number of
#: heads: the results page bench-attention-sampled.txt).
DEFAULT_HEADS = 128
#: Heads the token-resolved rule draws per sequence by default. With a batch of 4 sequences this is 128 heads in all,
#: the exchangeable sampled rule's default, at about the same cost.
DEFAULT_GRAM_HEADS = 32


def layer_seed(attention_seed: int, layer_index: int, backward: bool = False) -> int:
    """The seed of the sampled attention heads of layer ``layer_index`` in the forward (or ``backward``) sweep: a
    stream of its own per layer and sweep (module docstring).

    One set of draws shared by every layer adds its sampling error up linearly over depth and shifts a whole curve;
    independent draws per layer add like √depth. What that changed on the token-resolved and the exchangeable
    sweeps (``bench/exchangeable_layer_seeds.py``): the accuracy page, docs/results/accuracy.md, "Sampling errors
    must not compound"."""
    return int(attention_seed) + 7919 * (2 * int(layer_index) + (2 if backward else 1))


def layer_context(ctx: dict, layer_index: int, backward: bool = False) -> dict:
    """The rule context of layer ``layer_index``: ``ctx`` (a sweep's context, whose ``"attention_seed"`` is the
    sweep's seed) with ``"attention_seed"`` replaced by the layer's own (:func:`layer_seed`). A shallow copy: what
    ``ctx`` shares by reference (the forward sweep's cache of attention draws) stays shared.

    The exchangeable walker passes ``backward=False`` in both sweeps, so a layer's backward rule reuses its forward
    draw (the sampled rule caches it; the backward rule needs the forward's attention probabilities). The
    token-resolved backward sweep draws its gradient heads afresh and takes ``backward=True``: a stream independent
    of the forward's."""
    return {**ctx, "attention_seed": layer_seed(ctx["attention_seed"], layer_index, backward)}


def standard_normal(shape: tuple, generator: torch.Generator) -> torch.Tensor:
    """Standard-normal draws generated in float32 and used in float64: every sum, product and softmax of the rules
    is computed in float64; only the draws themselves have float32 resolution (2⁻²⁴ relative, far below the
    Monte-Carlo error of a few hundred heads), and they are generated faster than float64 draws (timed:
    docs/results/performance.md)."""
    import torch

    return torch.randn(*shape, generator=generator, dtype=torch.float32).to(torch.float64)


def uniform(shape: tuple, generator: torch.Generator) -> torch.Tensor:
    """Uniform draws on [0, 1) (dropout masks), generated in float32 and used in float64, like
    :func:`standard_normal`."""
    import torch

    return torch.rand(*shape, generator=generator, dtype=torch.float32).to(torch.float64)
