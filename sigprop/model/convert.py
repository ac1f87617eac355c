"""Replace every normalisation of a model in place: LayerNorm ↔ RMSNorm ↔ DyT ↔ Derf (Alekseev 2026, App. A: "we
replace all of these LayerNorm layers, including the final one, with the Derf nonlinearity parameterized by α",
following Zhu et al. 2025 and Chen et al. 2025)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from ..components.derf import Derf
from ..components.dyt import DyT
from ..components.factory import make_norm
from ..components.rmsnorm import RMSNorm
from .transformer import Transformer

if TYPE_CHECKING:
    from ..components.layernorm import LayerNorm

__all__ = ["replace_norms", "CONVERTIBLE_NORMS"]

#: The norms :func:`replace_norms` can put in.
CONVERTIBLE_NORMS = ("layernorm", "rmsnorm", "dyt", "derf")

_ELEMENTWISE = ("dyt", "derf")


def _is_norm(m: nn.Module) -> bool:
    torch_rms = getattr(nn, "RMSNorm", None)
    kinds = (nn.LayerNorm, RMSNorm, DyT, Derf) + ((torch_rms,) if torch_rms is not None else ())
    return isinstance(m, kinds)


def _width(m: nn.Module, where: str) -> int:
    """The normalised width d of a norm module (its affine parameters' length)."""
    if isinstance(m, (DyT, Derf)):
        if m.gamma.dim() != 1:
            raise ValueError(f"{where}: a {type(m).__name__} with gamma of shape {tuple(m.gamma.shape)} has no "
                             f"per-channel width to build a replacement from")
        return int(m.gamma.shape[0])
    shape = tuple(cast("LayerNorm | RMSNorm", m).normalized_shape)
    if len(shape) != 1:
        raise ValueError(f"{where}: only norms over the last dimension can be replaced (normalized_shape = {shape})")
    return int(shape[0])


def _reference(m: nn.Module) -> torch.Tensor | None:
    for t in list(m.parameters()) + list(m.buffers()):
        return t
    return None


def _eps_of(m: nn.Module, default: float) -> float:
    eps = getattr(m, "eps", None)
    ok = isinstance(eps, (int, float)) and not isinstance(eps, bool) and math.isfinite(eps)  # DyT/Derf carry NaN
    return float(cast(float, eps)) if ok else default


def _check_alpha(name: str, v: float | None) -> None:
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0 (got {v!r})")


def _build(norm: str, d: int, old: nn.Module, alpha: float | None, eps: float | None) -> nn.Module:
    kw = {"alpha": alpha} if norm in _ELEMENTWISE else {"eps": eps}
    new = cast(nn.Module, make_norm(norm, d, **kw))  # a norm name, never "none"
    if norm in _ELEMENTWISE:
        # DyT/Derf have no ε. torch's TransformerEncoderLayer reads norm1.eps / norm2.eps to choose a fused fast path
        # (eval mode, no grad) that would apply LayerNorm with norm.weight/bias: NaN ≠ NaN keeps that path off
        new.eps = float("nan")  # type: ignore[assignment]  # a float attribute, not a tensor or a module
    ref = _reference(old)
    if ref is not None:
        new = new.to(device=ref.device, dtype=ref.dtype if ref.is_floating_point() else None)
    return new.train(old.training)


def replace_norms(module: nn.Module, norm: str = "derf", alpha: float | None = None, alpha_attn: float | None = None,
                  alpha_ffn: float | None = None, alpha_final: float | None = None, eps: float | None = None) -> int:
    """Replace every normalisation layer of ``module`` in place by ``norm`` ("derf", "dyt", "layernorm",
    "rmsnorm") and return how many were replaced. Device, dtype and train/eval mode of each replaced layer are kept;
    the new one starts at its initialisation (γ = 1, β = 0, shift 0, α as below; LayerNorm/RMSNorm weight 1, bias 0).

    * A sigprop :class:`~sigprop.model.transformer.Transformer`: every norm the model has (pre- or post-norms of
      attention, cross-attention and FFN sub-layers, the encoder-output norm and the final norm) is found by
      :meth:`Transformer.norms`, with its position. DyT/Derf α at a position is ``alpha_attn`` / ``alpha_ffn`` /
      ``alpha_final`` if given, else ``alpha``, else the model config's α at that position; the model's config is
      updated (``norm``, the α fields, ``norm_eps``) so that it describes the converted model and its init plan
      re-initialises it the same way.
    * Any other model: every ``torch.nn.LayerNorm`` (sigprop's LayerNorm is one), ``torch.nn.RMSNorm`` and sigprop
      RMSNorm / DyT / Derf over the last dimension, wherever it sits (the final norm included), gets the single
      ``alpha`` (None: 0.5, Zhu et al.'s default); position-specific α needs a sigprop Transformer.

    ``eps`` (LayerNorm/RMSNorm targets only; None: a sigprop Transformer's ``config.norm_eps``, else the replaced
    layer's own eps, or 1e-5 if it has none). Raises ValueError for an unknown ``norm``, α given for a
    LayerNorm/RMSNorm target or α ≤ 0, and if the model has no norm to replace.
    """
    if norm not in CONVERTIBLE_NORMS:
        raise ValueError(f"norm must be one of {', '.join(CONVERTIBLE_NORMS)} (got {norm!r})")
    alphas = {"alpha": alpha, "alpha_attn": alpha_attn, "alpha_ffn": alpha_ffn, "alpha_final": alpha_final}
    for name, v in alphas.items():
        _check_alpha(name, v)
    given = [k for k, v in alphas.items() if v is not None]
    if norm not in _ELEMENTWISE and given:
        raise ValueError(f"{', '.join(given)} apply to norm='dyt' or 'derf' only (got norm={norm!r})")
    if eps is not None and (norm in _ELEMENTWISE or isinstance(eps, bool) or not isinstance(eps, (int, float))
                            or not math.isfinite(eps) or eps < 0):
        raise ValueError(f"eps must be a finite number >= 0 and applies to norm='layernorm' or 'rmsnorm' only "
                         f"(got eps={eps!r}, norm={norm!r})")
    if isinstance(module, Transformer):
        return _replace_in_transformer(module, norm, alpha, alpha_attn, alpha_ffn, alpha_final, eps)
    position_specific = [k for k in ("alpha_attn", "alpha_ffn", "alpha_final") if alphas[k] is not None]
    if position_specific:
        raise ValueError(f"{', '.join(position_specific)} need a sigprop Transformer (whose norm positions are "
                         f"known); for {type(module).__name__} pass a single alpha=")
    found = [(parent_name, parent, name, child) for parent_name, parent in module.named_modules()
             for name, child in parent.named_children() if _is_norm(child)]
    if not found:
        raise ValueError(f"no normalisation layer (torch.nn.LayerNorm / RMSNorm, sigprop RMSNorm / DyT / Derf) found "
                         f"in {type(module).__name__}")
    new_modules = []
    for parent_name, _, name, child in found:
        where = f"{parent_name}.{name}" if parent_name else name
        new_modules.append(_build(norm, _width(child, where), child, 0.5 if alpha is None else alpha,
                                  _eps_of(child, 1e-5) if eps is None else eps))
    for (_, parent, name, _), new in zip(found, new_modules, strict=True):
        setattr(parent, name, new)
    return len(found)


def _replace_in_transformer(model: Transformer, norm: str, alpha: float | None, alpha_attn: float | None,
                            alpha_ffn: float | None, alpha_final: float | None, eps: float | None) -> int:
    c = model.config
    found = model.norms()
    if not found:
        raise ValueError(f"the model has no normalisation layer to replace (norm_position={c.norm_position!r}, "
                         f"final_norm={c.final_norm!r})")
    changes: dict[str, Any] = {"norm": norm}
    if norm in _ELEMENTWISE:
        changes["norm_alpha"] = c.norm_alpha if alpha is None else float(alpha)
        for field, v in (("norm_alpha_attn", alpha_attn), ("norm_alpha_ffn", alpha_ffn),
                         ("norm_alpha_final", alpha_final)):
            changes[field] = float(v) if v is not None else (None if alpha is not None else getattr(c, field))
    elif eps is not None:
        changes["norm_eps"] = float(eps)
    new_config = c.replace(**changes)
    new_modules = [_build(norm, _width(m, f"{name} of layer {index}"), m, new_config.alpha_at(pos),
                          new_config.norm_eps if eps is None else eps)
                   for index, pos, _, name, m in found]
    for (_, _, parent, name, _), new in zip(found, new_modules, strict=True):
        setattr(parent, name, new)
    model.config = new_config
    return len(found)
