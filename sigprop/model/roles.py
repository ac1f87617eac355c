"""Which init-plan role every parameter of a :class:`~sigprop.model.transformer.Transformer` plays, decided by
module type and position in the tree (never by a name pattern), and the sampling of each from the plan."""

from __future__ import annotations

import torch
from torch import nn

from ..components.attention import MultiHeadAttention
from ..components.derf import Derf
from ..components.dyt import DyT
from ..components.embedding import Embedding
from ..components.layernorm import LayerNorm
from ..components.linear import Linear
from ..components.patch import PatchEmbedding
from ..components.residual import Residual
from ..components.rmsnorm import RMSNorm
from ..components.shaped_attention import ShapedAttention
from ..components.shaped_relu import ShapedReLU, shaped_relu_slopes

__all__ = ["initialise_from_plan", "LINEAR_ROLES"]

#: Role of a Linear by its name inside a block.
LINEAR_ROLES = {"proj": "o", "fc1": "w1", "fc2": "w2"}


class _Sampler:
    def __init__(self, generator, sample: bool = True):
        self.generator, self.sample = generator, sample
        self.done: set[int] = set()

    def normal(self, p: torch.Tensor, std: float):
        if self.sample:
            p.normal_(0.0, std, generator=self.generator)
        self.done.add(id(p))

    def fill(self, p: torch.Tensor, value: float):
        p.fill_(value)
        self.done.add(id(p))


def _init_norm(m: nn.Module | None, s: _Sampler, config, position: str) -> None:
    """Norm affine at 1/0; DyT/Derf α at the config's value for the norm's ``position`` (attn/cross/ffn/final)."""
    if m is None:
        return
    if isinstance(m, (LayerNorm, RMSNorm)):
        if m.weight is not None:
            s.fill(m.weight, 1.0)
        if getattr(m, "bias", None) is not None:
            s.fill(m.bias, 0.0)
    elif isinstance(m, (DyT, Derf)):
        s.fill(m.alpha, config.alpha_at(position))
        s.fill(m.gamma, 1.0)
        s.fill(m.beta, 0.0)
        if isinstance(m, Derf):
            s.fill(m.shift, 0.0)
    else:
        raise TypeError(f"no initialisation rule for norm {type(m).__name__}")


def _init_embedding(emb: nn.Module, plan, s: _Sampler) -> None:
    if isinstance(emb, Embedding):
        emb.token_std = plan.std("token")
        s.normal(emb.token.weight, emb.token_std)
        if emb.position is not None:
            emb.position_std = plan.std("position")
            s.normal(emb.position.weight, emb.position_std)
        if emb.segment is not None:
            emb.segment_std = plan.std("segment")
            s.normal(emb.segment.weight, emb.segment_std)
    elif isinstance(emb, PatchEmbedding):
        emb.patch_std, emb.position_std = plan.std("patch"), plan.std("position")
        s.normal(emb.proj.weight, emb.patch_std)
        s.fill(emb.proj.bias, 0.0)
        s.normal(emb.position.weight, emb.position_std)
    else:
        raise TypeError(f"no initialisation rule for embedding {type(emb).__name__}")


def _init_shaped_attention(m: ShapedAttention, layer: int, plan, s: _Sampler) -> None:
    """W_Q, W_K, W_V from the plan (σ_q, σ_k, σ_v are float attributes that the rules read); γ₁, γ₂ back to their
    initial values (Noci et al. App. D initialises them at 1; a parameter in "learn" mode, a buffer otherwise)."""
    for role, w in (("q", m.w_q), ("k", m.w_k), ("v", m.w_v)):
        std = plan.std(role, layer)
        setattr(m, f"sigma_{role}", std)
        s.normal(w, std)
    s.fill(m.gamma1, m.gamma_init[0])  # buffers too: the model is materialised from the meta device uninitialised
    s.fill(m.gamma2, m.gamma_init[1])


def _init_shaped_relu(m: ShapedReLU, s: _Sampler) -> None:
    """s± back to 1 + c±/√n (Noci et al. Eq. 4); s₋ is a parameter in "learn" mode (App. D). Both are set here
    because the model is materialised from the meta device with uninitialised buffers."""
    s_plus, _ = shaped_relu_slopes(m.n, m.c_plus, m.c_minus)
    s.fill(m.s_plus, float(s_plus))
    s.fill(m.s_minus, m.s_minus_init)


def _init_branch(branch: nn.Module, layer: int, plan, s: _Sampler, config, position: str) -> None:
    for name, m in branch.named_children():
        if isinstance(m, MultiHeadAttention):
            for role, w, sigma in (("q", m.w_q, m.sigma_q), ("k", m.w_k, m.sigma_k), ("v", m.w_v, m.sigma_v)):
                std = plan.std(role, layer)
                sigma.fill_(std)
                s.normal(w, std)
        elif isinstance(m, ShapedAttention):
            _init_shaped_attention(m, layer, plan, s)
        elif isinstance(m, ShapedReLU):
            _init_shaped_relu(m, s)
        elif isinstance(m, Linear):
            if name not in LINEAR_ROLES:
                raise TypeError(f"no init role for linear layer {name!r} in {type(branch).__name__}")
            m.weight_std = plan.std(LINEAR_ROLES[name], layer)
            s.normal(m.weight, m.weight_std)
            if m.bias is not None:
                m.bias_std = 0.0
                s.fill(m.bias, 0.0)
        elif any(True for _ in m.parameters()):
            _init_norm(m, s, config, position)


def initialise_from_plan(model: nn.Module, plan, generator: torch.Generator | None = None,
                         sample: bool = True) -> set[int]:
    """Sample ``model``'s parameters from ``plan`` and set the declared values the rules read; returns the ids of
    the parameters it initialised (the caller checks that none is missing). ``sample=False`` sets constants and
    declared values only, leaving random matrices unsampled (for the theory, which never reads them)."""
    c = model.config
    s = _Sampler(generator, sample)
    with torch.no_grad():
        _init_embedding(model.embed, plan, s)
        for layer in model.all_layers():
            for name, child in layer.named_children():
                if isinstance(child, Residual):
                    lam, beta = plan.scales(name, layer.index)
                    child.lam.fill_(lam)
                    s.fill(child.beta, beta)
                    _init_branch(child.branch, layer.index, plan, s, c, name)
                else:  # a post-norm "<site>_norm"
                    _init_norm(child, s, c, name.removesuffix("_norm"))
        _init_norm(model.final_norm, s, c, "final")
        _init_norm(getattr(model, "enc_norm", None), s, c, "final")
        if id(model.head.weight) not in s.done:
            s.normal(model.head.weight, plan.std("head"))
        model.head_scale.fill_(plan.head_scale)
    return s.done
