"""Which init-plan role every parameter of a :class:`~sigprop.model.transformer.Transformer` plays, decided by
module type and position in the tree (never by a name pattern): one traversal (:func:`weight_roles`) behind the
sampling of a model from a plan (:func:`initialise_from_plan`) and the reading of a plan off a model's weights
(:func:`read_plan`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import nn

from ..components.attention import MultiHeadAttention
from ..components.derf import Derf
from ..components.dyt import DyT
from ..components.embedding import Embedding
from ..components.glu import GLU
from ..components.layernorm import LayerNorm
from ..components.linear import Linear
from ..components.parallel import Parallel
from ..components.patch import PatchEmbedding
from ..components.residual import Residual
from ..components.rmsnorm import RMSNorm
from ..components.shaped_attention import ShapedAttention
from ..components.shaped_relu import ShapedReLU, shaped_relu_slopes
from ..components.value_skipinit import ValueSkipInitAttention
from .layer import SITES

if TYPE_CHECKING:
    from ..components.head_transform import HeadTransform
    from .config import TransformerConfig
    from .init import InitPlan
    from .transformer import Transformer

__all__ = ["initialise_from_plan", "read_weights", "weight_roles", "WeightRole", "LINEAR_ROLES"]

#: Role of a Linear by its name inside a block.
LINEAR_ROLES = {"proj": "o", "fc1": "w1", "fc2": "w2"}


class _Sampler:
    def __init__(self, generator: torch.Generator | None, sample: bool = True) -> None:
        self.generator, self.sample = generator, sample
        self.done: set[int] = set()

    def normal(self, p: torch.Tensor, std: float) -> None:
        if self.sample:
            p.normal_(0.0, std, generator=self.generator)
        self.done.add(id(p))

    def fill(self, p: torch.Tensor, value: float) -> None:
        p.fill_(value)
        self.done.add(id(p))


def _init_norm(m: nn.Module | None, s: _Sampler, config: TransformerConfig, position: str) -> None:
    """Norm affine at 1/0; DyT/Derf α at the config's value for the norm's ``position`` (attn/cross/ffn/final)."""
    if m is None:
        return
    if isinstance(m, (LayerNorm, RMSNorm)):
        if m.weight is not None:
            s.fill(m.weight, 1.0)
        if getattr(m, "bias", None) is not None:
            s.fill(cast(torch.Tensor, m.bias), 0.0)
    elif isinstance(m, (DyT, Derf)):
        s.fill(m.alpha, config.alpha_at(position))
        s.fill(m.gamma, 1.0)
        s.fill(m.beta, 0.0)
        if isinstance(m, Derf):
            s.fill(m.shift, 0.0)
    else:
        raise TypeError(f"no initialisation rule for norm {type(m).__name__}")


def _init_shaped_relu(m: ShapedReLU, s: _Sampler) -> None:
    """s± back to 1 + c±/√n (Noci et al. Eq. 4); s₋ is a parameter in "learn" mode (App. D). Both are set here
    because the model is materialised from the meta device with uninitialised buffers."""
    s_plus, _ = shaped_relu_slopes(m.n, m.c_plus, m.c_minus)
    s.fill(m.s_plus, float(s_plus))
    s.fill(m.s_minus, m.s_minus_init)


@dataclass(frozen=True)
class WeightRole:
    """A random weight matrix or table of the model: its plan ``role``, its ``layer`` (None for the embeddings and
    the head), the ``weight`` drawn N(0, std²), and ``declare(std)``, which sets the value its moment rules read."""

    role: str
    layer: int | None
    weight: torch.Tensor
    declare: Callable[[float], object]


def _set(obj: object, name: str) -> Callable[[float], object]:
    return lambda std: setattr(obj, name, std)


def _fill(buffer: torch.Tensor) -> Callable[[float], object]:
    return lambda std: buffer.fill_(std)


def _embedding_roles(emb: nn.Module) -> list[WeightRole]:
    if isinstance(emb, Embedding):
        out = [WeightRole("token", None, emb.token.weight, _set(emb, "token_std"))]
        if emb.position is not None:
            out.append(WeightRole("position", None, emb.position.weight, _set(emb, "position_std")))
        if emb.segment is not None:
            out.append(WeightRole("segment", None, emb.segment.weight, _set(emb, "segment_std")))
        return out
    if isinstance(emb, PatchEmbedding):
        out = [WeightRole("patch", None, emb.proj.weight, _set(emb, "patch_std")),
               WeightRole("position", None, emb.position.weight, _set(emb, "position_std"))]
        if emb.cls is not None:
            out.append(WeightRole("cls", None, emb.cls, _set(emb, "cls_std")))
        return out
    raise TypeError(f"no initialisation rule for embedding {type(emb).__name__}")


def _branch_roles(branch: nn.Module, layer: int) -> list[WeightRole]:
    if isinstance(branch, Parallel):  # a parallel block: the attention branch's roles, then the FFN's
        return [r for child in branch.children() for r in _branch_roles(child, layer)]
    out = []
    for name, m in branch.named_children():
        if isinstance(m, MultiHeadAttention):
            out += [WeightRole(role, layer, w, _fill(sigma))
                    for role, w, sigma in (("q", m.w_q, m.sigma_q), ("k", m.w_k, m.sigma_k), ("v", m.w_v, m.sigma_v))]
        elif isinstance(m, ShapedAttention):
            out += [WeightRole(role, layer, w, _set(m, f"sigma_{role}"))
                    for role, w in (("q", m.w_q), ("k", m.w_k), ("v", m.w_v))]
        elif isinstance(m, GLU):  # a gated FFN's gate and up projections
            out += [WeightRole("w1", layer, m.w_gate, _set(m, "gate_std")),
                    WeightRole("w3", layer, m.w_up, _set(m, "up_std"))]
        elif isinstance(m, Linear):
            if name not in LINEAR_ROLES:
                raise TypeError(f"no init role for linear layer {name!r} in {type(branch).__name__}")
            out.append(WeightRole(LINEAR_ROLES[name], layer, m.weight, _set(m, "weight_std")))
    return out


def weight_roles(model: Transformer) -> list[WeightRole]:
    """Every random weight of a :class:`~sigprop.model.transformer.Transformer` with its plan role, in the order
    they are drawn: the embeddings, each layer's attention (Q, K, V) and linear layers (O, W1, W2) branch by
    branch, and an untied head."""
    out = _embedding_roles(model.embed)
    for layer in model.all_layers():
        for child in layer.children():
            if isinstance(child, Residual):
                out += _branch_roles(child.branch, layer.index)
    transform = getattr(model, "head_transform", None)
    if transform is not None:  # BERT's masked-LM head transform
        out.append(WeightRole("transform", None, transform.dense.weight, _set(transform.dense, "weight_std")))
    if not any(model.head.weight is r.weight for r in out):
        out.append(WeightRole("head", None, model.head.weight, lambda std: None))
    return out


def _init_rest_of_branch(branch: nn.Module, s: _Sampler, config: TransformerConfig, position: str) -> None:
    """A branch's parameters other than its random matrices: shaped attention's γ, shaped ReLU's slopes, zero
    biases, the norm's affine parameters and α (of each branch of a parallel block)."""
    if isinstance(branch, Parallel):
        for name, child in branch.named_children():  # "attn", "ffn": each norm's own position
            _init_rest_of_branch(child, s, config, name)
        return
    for m in branch.children():
        if isinstance(m, ShapedAttention):
            s.fill(m.gamma1, m.gamma_init[0])  # buffers too: the model is materialised uninitialised
            s.fill(m.gamma2, m.gamma_init[1])
        elif isinstance(m, ShapedReLU):
            _init_shaped_relu(m, s)
        elif isinstance(m, ValueSkipInitAttention):  # α = 1, β = 0 (He et al. 2023)
            s.fill(m.vs_alpha, 1.0)
            s.fill(m.vs_beta, 0.0)
        elif isinstance(m, Linear):
            if m.bias is not None:
                m.bias_std = 0.0
                s.fill(m.bias, 0.0)
        elif isinstance(m, MultiHeadAttention):  # QK-norm's gains at 1
            for gain in (m.q_gain, m.k_gain):
                if gain is not None:
                    s.fill(gain, 1.0)
        elif not isinstance(m, GLU) and any(True for _ in m.parameters()):
            _init_norm(m, s, config, position)


def initialise_from_plan(model: Transformer, plan: InitPlan, generator: torch.Generator | None = None,
                         sample: bool = True) -> set[int]:
    """Sample ``model``'s parameters from ``plan`` and set the declared values the rules read; returns the ids of
    the parameters it initialised (the caller checks that none is missing). ``sample=False`` sets constants and
    declared values only, leaving random matrices unsampled (for the theory, which never reads them)."""
    c = model.config
    s = _Sampler(generator, sample)
    with torch.no_grad():
        for r in weight_roles(model):
            std = plan.std(r.role, r.layer)
            r.declare(std)
            s.normal(r.weight, std)
        if isinstance(model.embed, PatchEmbedding):
            s.fill(model.embed.proj.bias, 0.0)
        for layer in model.all_layers():
            for name, child in layer.named_children():
                if isinstance(child, Residual):
                    lam, beta = plan.scales(name, layer.index)
                    child.lam.fill_(lam)
                    s.fill(child.beta, beta)
                    _init_rest_of_branch(child.branch, s, c, name)
                else:  # a post-norm "<site>_norm"
                    _init_norm(child, s, c, name.removesuffix("_norm"))
        _init_norm(model.final_norm, s, c, "final")
        if getattr(model, "head_transform", None) is not None:  # zero bias, LayerNorm at 1 / 0
            head_transform = cast("HeadTransform", model.head_transform)
            s.fill(cast(torch.Tensor, head_transform.dense.bias), 0.0)  # a zero bias of its own
            _init_norm(head_transform.norm, s, c, "final")
        _init_norm(getattr(model, "enc_norm", None), s, c, "final")
        model.head_scale.fill_(plan.head_scale)
    return s.done


def role_stds(weights: Iterable[tuple[str, int | None, torch.Tensor]], n_layers: int) -> dict[str, Any]:
    """Each role's standard deviation read from weights, as :class:`~sigprop.model.init.InitPlan`'s ``stds``: the
    root mean square of all the weights of a role (and layer), pooled (zero-mean weights assumed); one value per
    layer for a block role (NaN where a layer has none), one for the others; ``head`` is the ``token`` table's
    when no head weight is given (a tied head).

    Args:
        weights: (role, layer or None, tensor) triples.
        n_layers: the model's layers.

    Returns:
        role → float, or role → array of ``n_layers``.
    """
    sums: dict = {}
    with torch.no_grad():
        for role, layer, weight in weights:
            w = weight.detach().double()
            total, count = sums.get((role, layer), (0.0, 0))
            sums[(role, layer)] = (total + float((w * w).sum()), count + w.numel())
    stds: dict = {}
    for (role, layer), (total, count) in sums.items():
        std = (total / count) ** 0.5
        if layer is None:
            stds[role] = std
        else:
            stds.setdefault(role, np.full(n_layers, np.nan))[layer] = std
    if "head" not in stds and "token" in stds:  # a tied head is the token table
        stds["head"] = stds["token"]
    return stds


def read_weights(model: Transformer, approximations: list[str] | None = None) -> dict[str, Any]:
    """The plan a model's weights show, as :class:`~sigprop.model.init.InitPlan`'s fields (``stds``, ``lam``,
    ``beta``, ``learnable_beta``, ``head_scale``; :meth:`InitPlan.from_model
    <sigprop.model.init.InitPlan.from_model>`): each role's standard deviation is the root mean square of its
    weights, layer by layer (zero-mean weights assumed; a decoder layer's self- and cross-attention share their
    roles' values in a plan, so their weights are pooled); λ and β come from each residual's buffers, the head scale
    from its buffer. ``ValueError`` where the theory's assumptions about the other parameters do not hold: weights
    on the meta device (nothing to read), a non-zero bias, a norm's affine parameters away from their initial
    values. With ``approximations`` (a list), those last two are appended to it as sentences instead (trained
    weights, read as an approximation)."""
    n = model.config.total_layers

    def broken(message: str) -> None:
        if approximations is None:
            raise ValueError(message)
        if message not in approximations:
            approximations.append(message)

    roles = weight_roles(model)
    if any(r.weight.is_meta for r in roles):
        raise ValueError("the model's weights are on the meta device, so there is nothing to read: pass its plan "
                         "(predict(model, plan=model.plan))")
    stds = role_stds(((r.role, r.layer, r.weight) for r in roles), n)
    with torch.no_grad():
        biased = [name for name, m in model.named_modules()
                  if isinstance(m, nn.Linear) and m.bias is not None and bool(m.bias.detach().abs().max() > 0)]
        if biased:
            broken(f"{biased[0]}.bias is not zero" + (f" (and {len(biased) - 1} other biases)" if len(biased) > 1
                                                       else "") + ": the theory assumes zero biases at initialisation")
        for *_, norm in model.norms():
            for attr, value in (("weight", 1.0), ("bias", 0.0), ("gamma", 1.0), ("beta", 0.0), ("shift", 0.0)):
                p = getattr(norm, attr, None)
                if isinstance(p, torch.Tensor) and not bool(torch.all(p.detach() == value)):
                    broken(f"a {type(norm).__name__}'s {attr} is not {value:g}: the theory assumes norms at their "
                           "initial affine parameters")
    lam = {site: np.ones(n) for site in SITES}
    beta = {site: np.ones(n) for site in SITES}
    learnable = False
    for layer in model.all_layers():
        for name, child in layer.named_children():
            if isinstance(child, Residual):
                lam[name][layer.index], beta[name][layer.index] = (float(v) for v in child.scales())
                learnable = learnable or isinstance(child.beta, nn.Parameter)
    return {"stds": stds, "lam": lam, "beta": beta, "learnable_beta": learnable,
            "head_scale": float(model.head_scale)}
