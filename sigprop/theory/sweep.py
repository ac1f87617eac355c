"""A sweep: the walker (:mod:`sigprop.walk.walker`) taken through a whole :class:`~sigprop.model.Transformer`, stack by
stack as the model's own :meth:`~sigprop.model.Transformer.stacks` lists them, layer by layer, in one state.

Forward (:func:`forward_sweep`): each stack starts from its input boundary (given by the caller, one value per stack:
:mod:`sigprop.theory.boundaries`); every layer is walked under its own context (:func:`~sigprop.components.draws.
layer_context`: each layer's sampled rules draw from a seed of their own, so sampling errors do not compound over
depth); the state at every site of :meth:`~sigprop.model.Transformer.sites` is recorded. An encoder whose output
the next stack reads hands it on through its memory norm, and the next stack's rules read it as
``memory_moments`` (with its length ``L_memory``).

Backward (:func:`backward_sweep`): from the gradient at the last layer's output, layer by layer down each stack,
recording the gradient at every site. The gradients the decoder's cross-attentions send to the memory add (their
value weights are independent), go back through the memory norm and down the encoder. A state that keeps its
tapes (the exchangeable one: a few floats a module) walks them back; one that does not (the Gram matrices) re-walks
each layer's forward from its recorded input first, the attention outputs being kept by the state.

Progress: ``progress(1)`` after every layer of each sweep. A rule's ``ValueError`` is re-raised naming its layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, cast

import torch
from torch import nn

from ..components.draws import DEFAULT_GRAM_HEADS, layer_context
from ..core.errors import NotFinite
from ..core.moments import GradMoments, Moments
from ..model.layer import TransformerLayer
from ..model.transformer import Stack, Transformer
from ..walk.state import Forward, Gradient, WalkState
from ..walk.walker import Flow, GradFlow, Site, Tape, Walker
from .boundaries import input_gram
from .resolved import GramState, resolved_supported

__all__ = ["StackWalk", "ForwardWalk", "BackwardWalk", "forward_sweep", "backward_sweep", "gram_forward_sweep",
           "model_sites"]


def model_sites(model: Transformer) -> dict[int, Site]:
    """{id(module): (layer, site)} of the model's measured sites."""
    return {id(module): (layer, site) for layer, site, module in model.sites()}


@dataclass
class StackWalk(Generic[Forward]):
    """One stack's forward walk: the stack, the context its layers were walked under, per layer what the backward
    walk needs (a tape, or the layer's input flow for a state that re-walks), its output flow, and for an encoder
    the memory norm's tape (None without a norm)."""

    stack: Stack
    context: dict[str, Any]
    saved: list[Tape[Forward] | Flow[Forward]]
    output: Flow[Forward]
    memory_tape: Tape[Forward] | None = None


@dataclass
class ForwardWalk(Generic[Forward, Gradient]):
    """The forward sweep of a model: ``rows`` {(layer, site): pooled state}, one :class:`StackWalk` per stack."""

    state: WalkState[Forward, Gradient]
    rows: dict[Site, Moments | Forward]
    stacks: list[StackWalk[Forward]]

    @property
    def output(self) -> Forward:
        """The last layer's output state."""
        return self.stacks[-1].output.value


@dataclass
class BackwardWalk(Generic[Gradient]):
    """The backward sweep of a model: ``rows`` {(layer, site): pooled gradient, None where it is exactly zero},
    ``memory`` [(decoder layer, gradient it sends to the memory)] bottom layer first, and ``encoder_reached``:
    False when no gradient reached the encoder (every cross-attention branch scaled by β = 0)."""

    rows: dict[Site, GradMoments | Gradient | None] = field(default_factory=dict)
    memory: list[tuple[int, Gradient]] = field(default_factory=list)
    encoder_reached: bool = True


def _at_layer(index: int, err: ValueError) -> ValueError:
    """``err`` naming the layer it came from, of the same kind (:class:`~sigprop.core.errors.NotFinite`: the
    moments overflowed, which a caller may diagnose rather than refuse)."""
    if isinstance(err, NotFinite):
        return NotFinite(f"layer {index}: {err}", overflow=err.overflow)
    return ValueError(f"layer {index}: {err}")


def _walk_layer(walker: Walker[Forward, Gradient], layer: TransformerLayer,
                flow: Flow[Forward]) -> tuple[Flow[Forward], Tape[Forward]]:
    try:
        return walker.forward(layer, flow)
    except ValueError as err:
        raise _at_layer(layer.index, err) from None


def forward_sweep(model: Transformer, state: WalkState[Forward, Gradient], inputs: list[Forward],
                  context: dict[str, Any], progress: Callable[[int], None] | None = None,
                  contexts: list[dict[str, Any]] | None = None) -> ForwardWalk[Forward, Gradient]:
    """Walk ``model`` forward in ``state`` from ``inputs`` (one input state per stack) under ``context`` (the
    sweep's: ``L``, ``attention_heads``, ``attention_seed``; ``contexts`` gives one per stack instead, e.g. a
    decoder's own ``L``). Module docstring."""
    tick = progress or (lambda k: None)
    rows: dict[Site, Moments | Forward]
    walks: list[StackWalk[Forward]]
    memory: Forward | None
    sites, rows, walks, memory = model_sites(model), {}, [], None
    stacks = model.stacks()
    contexts = contexts or [context] * len(stacks)
    for stack, x0, ctx in zip(stacks, inputs, contexts, strict=True):
        if memory is not None:
            ctx = {**ctx, "memory_moments": memory, "L_memory": walks[-1].context["L"]}
        rows[stack.input_site] = state.pool(x0)
        saved: list[Tape[Forward] | Flow[Forward]]
        flow, saved = Flow(x0), []
        for layer in stack.layers:
            walker = Walker(state, layer_context(ctx, layer.index), sites, rows)
            out, tape = _walk_layer(walker, layer, flow)
            saved.append(tape if state.keeps_tapes else flow)
            flow = out
            tick(1)
        walk = StackWalk(stack, ctx, saved, flow)
        if stack.memory:
            memory = flow.value
            if stack.memory_norm is not None:
                out, walk.memory_tape = Walker(state, ctx).forward(stack.memory_norm, flow)
                memory = out.value
        walks.append(walk)
    return ForwardWalk(state, rows, walks)


def backward_sweep(model: Transformer, forward: ForwardWalk[Forward, Gradient], grad_top: Gradient,
                   progress: Callable[[int], None] | None = None) -> BackwardWalk[Gradient]:
    """Walk ``model`` backward from the gradient ``grad_top`` at the last layer's output, after its ``forward``
    sweep (module docstring)."""
    tick = progress or (lambda k: None)
    out: BackwardWalk[Gradient] = BackwardWalk()
    state, sites = forward.state, model_sites(model)
    state.check_boundary(grad_top, forward.output)
    gflow: GradFlow[Gradient] = GradFlow(grad_top)
    sent: list[tuple[int, Gradient]] = []
    for walk in reversed(forward.stacks):
        if walk.stack.memory:  # an encoder: its gradient is what the stack above sent to its output
            if not sent:
                out.encoder_reached = False
                tick(len(walk.stack.layers))
                continue
            gflow = GradFlow(state.add_grad([(1.0, g) for _, g in sent]))
            if walk.memory_tape is not None:
                memory_norm = cast(nn.Module, walk.stack.memory_norm)  # it has a tape
                gflow = GradFlow(Walker(state, walk.context).backward(memory_norm, gflow, walk.memory_tape).value)
        sent = []
        for layer, keep in zip(reversed(walk.stack.layers), reversed(walk.saved), strict=True):
            if state.keeps_tapes:
                tape = cast("Tape[Forward]", keep)
            else:  # re-walk the layer's forward from its input; the attention outputs are the state's
                _, tape = _walk_layer(Walker(state, walk.context), layer, cast("Flow[Forward]", keep))
            walker = Walker(state, layer_context(walk.context, layer.index, backward=state.fresh_backward_draws),
                            sites, grad_rows=out.rows)
            try:
                gflow = walker.backward(layer, gflow, tape)
            except ValueError as err:
                raise _at_layer(layer.index, err) from None
            sent += [(layer.index, g) for g in walker.memory]
            tick(1)
        out.rows[walk.stack.input_site] = state.pool_grad(gflow.value)
        if sent:
            out.memory = sorted(sent, key=lambda item: item[0])
    return out


def gram_forward_sweep(model: Transformer, inputs: torch.Tensor, segment_ids: torch.Tensor | None = None,
                       padding_mask: torch.Tensor | None = None, attention_heads: int = DEFAULT_GRAM_HEADS,
                       attention_seed: int = 0, progress: Callable[[int], None] | None = None,
                       pooled: bool = True) -> ForwardWalk[torch.Tensor, torch.Tensor]:
    """The token-resolved forward sweep of ``model`` (a :class:`~sigprop.model.Transformer` whose token mixers all
    have a Gram rule) on a batch's token ids (B, L) or a patch model's images (B, C, H, W): each layer's input flow
    in ``stacks[0].saved``, the last layer's output Gram in ``output``, the rows pooled as the measurement pools
    (``pooled=False``: the Gram matrices themselves). ``padding_mask`` (B, L), True at real tokens, keeps padding out
    of every softmax and of the pooling; ``attention_heads`` heads per sequence are drawn for each attention layer
    from ``attention_seed``. :func:`backward_sweep` continues it from a gradient Gram matrix. ``NotImplementedError``
    for a model with a token mixer that has no Gram rule (:func:`~sigprop.theory.resolved.resolved_supported`)."""
    reason = resolved_supported(model)
    if reason is not None:
        raise NotImplementedError(f"token-resolved theory: {reason}")
    mask = None if padding_mask is None else torch.as_tensor(padding_mask, dtype=torch.bool)
    state = GramState(key_mask=mask, pooled=pooled)
    x0 = input_gram(model, inputs, segment_ids)
    context = {"L": x0.shape[-1], "attention_heads": int(attention_heads), "attention_seed": int(attention_seed)}
    return forward_sweep(model, state, [x0], context, progress)
