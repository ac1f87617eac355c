"""What the dynamic pointwise norms share, y = γ·φ(αx + s) + β with φ = tanh (DyT, Zhu et al. 2025) or erf (Derf,
Chen et al. 2025): the approximations their rules offer, the rules' argument checks, the affine map's moments
around an elementwise rule's Gaussian expectations of φ, and the modules' parameters read as rule values
(Alekseev 2026, Eqs. 10, 13, 40: the affine map and the backward pass through it).

Each rule (:mod:`~sigprop.components.dyt`, :mod:`~sigprop.components.derf`) computes E[φ], Var φ and the
correlations of φ(h) and φ'(h) for its φ; this module turns them into the output's moments and the input gradient's.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import check_range, clip_corr

__all__ = ["APPROXES", "check_nonzero", "check_rule", "assemble_forward", "assemble_backward", "parameter_tensor",
           "rule_value"]

#: The approximations the Derf and DyT rules offer (see the rule docstrings).
APPROXES = ("exact", "alekseev")


def check_nonzero(value: Stat, name: str) -> Stat:
    """``value`` finite and nonzero (``ValueError`` naming ``name`` otherwise).

    Args:
        value: a number or an array of them.
        name: what the error calls it.

    Returns:
        ``value``, checked.

    Example:
        >>> check_nonzero(0.5, "alpha")
        0.5
    """
    v = check_range(value, name)
    if np.any(np.asarray(v) == 0.0):
        raise ValueError(f"{name} must be a nonzero finite number (got 0.0)")
    return v


def check_rule(approx: str, alpha: Stat, gamma: Stat) -> tuple[Stat, Stat]:
    """The arguments every DyT / Derf rule takes, checked: a known ``approx``, α ≠ 0 and γ ≠ 0.

    Args:
        approx: one of :data:`APPROXES`.
        alpha: the scale α inside φ.
        gamma: the affine gain γ.

    Returns:
        (α, γ), checked.

    Example:
        >>> check_rule("exact", 0.5, 1.0)
        (0.5, 1.0)
    """
    if approx not in APPROXES:
        raise ValueError(f"approx must be one of {APPROXES} (got {approx!r})")
    return check_nonzero(alpha, "alpha"), check_nonzero(gamma, "gamma")


def assemble_forward(mean_phi: Stat, var_phi: Stat, corr_tok: Stat, corr_hid: Stat, gamma: Stat,
                     beta: Stat) -> Moments:
    """y = γ φ + β: mean γE[φ] + β, variance γ² Var φ, correlations unchanged by the affine map.

    Args:
        mean_phi: E[φ(h)].
        var_phi: Var φ(h).
        corr_tok: the correlation of φ between two tokens.
        corr_hid: the correlation of φ between two hidden units of one token.
        gamma: the affine gain γ.
        beta: the affine bias β.

    Returns:
        The output's :class:`~sigprop.core.moments.Moments`.

    Example:
        >>> assemble_forward(0.0, 0.25, 0.5, 0.0, 2.0, 0.1).var
        1.0
    """
    return Moments(mean=gamma * mean_phi + beta, var=gamma**2 * var_phi, corr=clip_corr(corr_tok),
                   corr_hidden=clip_corr(corr_hid))


def assemble_backward(g: GradMoments, dphi2: Stat, dratio: Stat, alpha: Stat, gamma: Stat) -> GradMoments:
    """g_in = γ α φ'(h) g: σ²_gin = γ²α²σ²_g E[φ'²], r_gin = r_g E[φ'φ']/E[φ'²] (g zero-mean, independent of x).

    Args:
        g: the output gradient's moments.
        dphi2: E[φ'(h)²].
        dratio: E[φ'(h1)φ'(h2)]/E[φ'(h)²] between two tokens.
        alpha: the scale α inside φ.
        gamma: the affine gain γ.

    Returns:
        The input gradient's :class:`~sigprop.core.moments.GradMoments`.

    Example:
        >>> assemble_backward(GradMoments(var=1.0, corr=0.5), 0.5, 0.8, 2.0, 1.0).var
        2.0
    """
    return GradMoments(var=gamma**2 * alpha**2 * g.var * dphi2, corr=clip_corr(g.corr * dratio))


def parameter_tensor(value: float | np.ndarray | torch.Tensor | None, default_shape: tuple[int, ...],
                     fill: float) -> torch.Tensor:
    """A module parameter's initial tensor: ``value`` as a floating tensor (a copy), or ``fill`` in
    ``default_shape`` where ``value`` is None.

    Args:
        value: the given initial value, or None.
        default_shape: the shape of the default.
        fill: the default's value.

    Returns:
        A detached floating tensor.

    Example:
        >>> parameter_tensor(None, (2,), 1.0)
        tensor([1., 1.])
    """
    if value is None:
        return torch.full(default_shape, float(fill))
    t = torch.as_tensor(value)
    return (t if t.is_floating_point() else t.double()).detach().clone()


def rule_value(t: torch.Tensor, name: str) -> Stat:
    """A parameter tensor as the value a moment rule takes: channels must share one value (the last dimension, if
    longer than 1, is the channel dimension); remaining dimensions index configurations and are flattened.

    Args:
        t: the parameter.
        name: what the error calls it.

    Returns:
        A float, or a flat array of one value per configuration.

    Example:
        >>> rule_value(torch.full((4,), 0.5), "gamma")
        0.5
    """
    a = t.detach().to("cpu", torch.float64).numpy()
    if a.ndim >= 1 and a.shape[-1] > 1:
        if not np.all(a == a[..., :1]):
            raise ValueError(f"{name} differs across channels; the moment rules assume one shared value "
                             "(every element has the same mean and variance)")
        a = a[..., 0]
    return float(a) if a.size == 1 else a.reshape(-1)
