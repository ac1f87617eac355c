"""The FFN block: norm → Linear(d, d_ff) → activation → Linear(d_ff, d) → dropout (Kedia et al. App. B.2).

Its moment rules are the composition of its children's rules (:class:`~sigprop.components.sequential.Sequential`);
the paper's simplified closed form (Table 2) is kept as :func:`ffn_block_table2` for comparison.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from ..core.moments import GradMoments, Moments, Stat
from ..core.validate import check_range, clip_corr
from .dropout import Dropout
from .factory import GATED_ACTIVATIONS, make_activation, make_norm
from .linear import Linear
from .sequential import Sequential

__all__ = ["FFNBlock", "ffn_block_table2"]


class FFNBlock(Sequential):
    """norm → fc1 (d → d_ff) → act → fc2 (d_ff → d) → drop. ``norm="none"`` gives the bare block of Table 2.

    Weight standard deviations default to Xavier-normal; the rules read the declared values. A gated activation
    (``"swiglu"``, ``"geglu"``: Llama-style) makes fc1 a :class:`~sigprop.components.glu.GLU`, φ(x W_gate) ⊙ (x W_up),
    with ``w1_std`` for both its matrices, and no separate activation.
    ``activation_kwargs`` go to :func:`~sigprop.components.factory.make_activation` (e.g. ``{"n": d}`` and the
    slopes' constants for ``activation="shaped_relu"``, Noci et al. Eq. 4).
    """

    def __init__(self, d: int, d_ff: int | None = None, activation: str = "relu", p: float = 0.0,
                 norm: str = "layernorm", w1_std: float | None = None, w2_std: float | None = None,
                 norm_kwargs: dict | None = None, activation_kwargs: dict | None = None) -> None:
        check_range(d, "d", lo=1.0, allowed="integers >= 1")
        width = 4 * d if d_ff is None else check_range(d_ff, "d_ff", lo=1.0, allowed="integers >= 1")
        d, d_ff = int(d), int(width)
        layers = OrderedDict()
        norm_module = make_norm(norm, d, **(norm_kwargs or {}))
        if norm_module is not None:
            layers["norm"] = norm_module
        if activation in GATED_ACTIVATIONS:
            from .glu import GLU

            layers["fc1"] = GLU(d, d_ff, gate=activation, gate_std=w1_std, up_std=w1_std)
        else:
            layers["fc1"] = Linear(d, d_ff, weight_std=w1_std)
            layers["act"] = make_activation(activation, **(activation_kwargs or {}))
        layers["fc2"] = Linear(d_ff, d, weight_std=w2_std)
        layers["drop"] = Dropout(p)
        super().__init__(layers)


def ffn_block_table2(m: Moments, g: GradMoments, d: Stat, w1_var: Stat, w2_var: Stat, p: Stat = 0.0) -> tuple[Moments,
                     GradMoments]:
    """Kedia et al. Table 2 (App. B.2), the bare ReLU FFN block with d_ff = 4d and a zero-mean input:

    σ²_out = 2d²σ²_w1σ²_w2σ²_in/(1−p),  r_out = (1−p)(1/π + r/2 + (1/2 − 1/π)r²)  (a quadratic fit of the
    exact ReLU → Linear composition, exact at r = 0 and r = 1),
    σ²_gin = 2d²σ²_w1σ²_w2σ²_g/(1−p),  r_gin = (1−p)(1/2 + asin(r)/π) r_g.
    """
    p = check_range(p, "dropout p", lo=0.0, hi=1.0, hi_open=True)
    gain = 2.0 * np.asarray(d, dtype=np.float64) ** 2 * w1_var * w2_var / (1.0 - p)
    r = m.corr
    fwd = Moments(mean=0.0 * m.var, var=gain * m.var,
                  corr=clip_corr((1.0 - p) * (1.0 / math.pi + r / 2.0 + (0.5 - 1.0 / math.pi) * r**2)))
    bwd = GradMoments(var=gain * g.var, corr=clip_corr((1.0 - p) * (0.5 + np.arcsin(r) / math.pi) * g.corr))
    return fwd, bwd
