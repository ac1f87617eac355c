"""Kedia et al. Table 3 as data: the worst-case growth with depth N of the forward variance, the backward gradient
variance and the "sensitivity" of a whole transformer, per method and LayerNorm position (proofs in App. E).

The strings are Table 3's entries. Superscripts, lost in the plain-text extractions of the paper
(arXiv copy: "O(c±N )", "O(N−1)", "O(N−0.5)", "O(logN)"), are written with a caret: "O(c^±N)", "O(N^-1)",
"O(N^-0.5)", and "O(log N)" with its space restored. The arXiv and ICML copies agree on every entry (the ICML copy
lists DSLM first; the row order here is the arXiv one). "β" in the LayerScale row is the initial value of
LayerScale's residual scale. "-" marks entries the paper leaves empty (DeepNet is Post-LN only).

Sensitivity (Sec. 4.6, after Davis et al. 2021) is the median over layers of N·β² (the variance of the relative
output change under small parameter perturbations); for β² = k/N^α it is k N^{1−α} (:func:`sensitivity`), and the
gradient fall bound is O(e^{k N^{1−α}}) (App. G, :func:`gradient_fall_order`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..core.validate import check_range

__all__ = [
    "GROWTH_TABLE",
    "METHODS",
    "COLUMNS",
    "growth_law",
    "render_growth_table",
    "sensitivity",
    "gradient_fall_order",
]

#: Table 3's columns, in the paper's order: (LayerNorm position, quantity).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("post_ln", "backward"),
    ("post_ln", "sensitivity"),
    ("pre_ln", "forward"),
    ("pre_ln", "backward"),
    ("pre_ln", "sensitivity"),
)

#: Table 3's rows (arXiv order), by the names the paper prints (DSLM is "DSLM (Ours)").
METHODS: tuple[str, ...] = ("Vanilla", "DSInit", "LayerScale", "DeepNet", "DSLM")

#: Kedia et al. Table 3: method → {(norm position, quantity): growth order as printed}.
GROWTH_TABLE: dict[str, dict[tuple[str, str], str]] = {
    method: dict(zip(COLUMNS, row, strict=True))
    for method, row in {
        "Vanilla": ("O(c^±N)", "O(N)", "O(N)", "O(N)", "O(log N)"),
        "DSInit": ("O(1)", "O(N^-1)", "O(1)", "O(1)", "O(N^-1)"),
        "LayerScale": ("O(1)", "O(βN)", "O(1)", "O(1)", "O(βN)"),
        "DeepNet": ("O(1)", "O(N^-0.5)", "-", "-", "-"),
        "DSLM": ("O(1)", "O(1)", "1", "O(1)", "O(1)"),
    }.items()
}

_NORM_ALIASES = {"post_ln": "post_ln", "post-ln": "post_ln", "postln": "post_ln",
                 "pre_ln": "pre_ln", "pre-ln": "pre_ln", "preln": "pre_ln"}
_QUANTITIES = ("forward", "backward", "sensitivity")
_HEADERS = {"post_ln": "Post-LN", "pre_ln": "Pre-LN"}


def _check_N(N):
    return np.asarray(check_range(N, "N", lo=1.0), dtype=np.float64)


def growth_law(method: str, norm_position: str, quantity: str, *, c=None, beta=None) -> Callable:
    """The order function f(N) of one Table 3 entry (Kedia et al. Table 3; proofs App. E).

    ``method`` ∈ :data:`METHODS` ("DSLM (Ours)" is accepted for "DSLM"), ``norm_position`` ∈ {"post_ln", "pre_ln"}
    (also "Post-LN"/"Pre-LN"), ``quantity`` ∈ {"forward", "backward", "sensitivity"}. Returns a function of the depth
    N (scalar or array, N ≥ 1) giving the growth up to a constant:

    "O(N)" → N, "O(log N)" → ln N, "O(1)" and "1" → 1, "O(N^-1)" → 1/N, "O(N^-0.5)" → N^-0.5,
    "O(βN)" → βN (needs ``beta``, LayerScale's initial residual scale), "O(c^±N)" → c^N (needs ``c`` > 0; c < 1
    vanishing, c > 1 exploding gradient — :func:`sigprop.laws.postln.postln_gradient_factor` is that c).

    Raises ``ValueError`` for unknown names, for entries the paper leaves empty ("-", DeepNet Pre-LN) or does not
    list (Post-LN forward: always 1 by App. E.2.1, but not a Table 3 column), and for a missing ``c``/``beta``.
    """
    method_key = "DSLM" if method == "DSLM (Ours)" else method
    if method_key not in GROWTH_TABLE:
        raise ValueError(f"method must be one of {METHODS} (got {method!r})")
    norm_key = _NORM_ALIASES.get(str(norm_position).lower())
    if norm_key is None:
        raise ValueError(f"norm_position must be one of ('post_ln', 'pre_ln') (got {norm_position!r})")
    if quantity not in _QUANTITIES:
        raise ValueError(f"quantity must be one of {_QUANTITIES} (got {quantity!r})")
    if (norm_key, quantity) not in COLUMNS:
        raise ValueError(f"Table 3 has no column ({norm_key!r}, {quantity!r}); its columns are {COLUMNS}")
    entry = GROWTH_TABLE[method_key][(norm_key, quantity)]
    if entry == "-":
        raise ValueError(f"Table 3 leaves ({method_key}, {norm_key}, {quantity}) empty ('-')")
    if entry in ("O(1)", "1"):
        return lambda N: np.ones_like(_check_N(N))[()]
    if entry == "O(N)":
        return lambda N: _check_N(N)[()]
    if entry == "O(log N)":
        return lambda N: np.log(_check_N(N))[()]
    if entry == "O(N^-1)":
        return lambda N: (1.0 / _check_N(N))[()]
    if entry == "O(N^-0.5)":
        return lambda N: (_check_N(N) ** -0.5)[()]
    if entry == "O(βN)":
        if beta is None:
            raise ValueError(f"{method_key} {norm_key} {quantity} is O(βN): pass beta (LayerScale's initial scale)")
        b = check_range(beta, "beta", lo=0.0, lo_open=True, allowed="(0, inf)")
        return lambda N: (b * _check_N(N))[()]
    if entry == "O(c^±N)":
        if c is None:
            raise ValueError(f"{method_key} {norm_key} {quantity} is O(c^±N): pass c (the per-layer factor C5)")
        cc = check_range(c, "c", lo=0.0, lo_open=True, allowed="(0, inf)")
        return lambda N: (cc ** _check_N(N))[()]
    raise AssertionError(f"unhandled Table 3 entry {entry!r}")  # pragma: no cover


def render_growth_table() -> str:
    """Table 3 as a GitHub-markdown table (rows in the arXiv order, DSLM as "DSLM (Ours)")."""
    headers = ["Method"] + [f"{_HEADERS[n]} {q}" for n, q in COLUMNS]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for method in METHODS:
        name = "DSLM (Ours)" if method == "DSLM" else method
        lines.append("| " + " | ".join([name] + [GROWTH_TABLE[method][col] for col in COLUMNS]) + " |")
    return "\n".join(lines) + "\n"


def sensitivity(n_layers, k=2.0, alpha=1.0):
    """Median sensitivity N·β² = k N^{1−α} of a model with β² = k/N^α and σ²_skip = 1 (Kedia et al. Sec. 4.6).

    α = 1 (DSLM) gives the depth-independent k; α = 2 (DSInit) O(N^-1); α = 1.5 (DeepNet) O(N^-0.5). Broadcasts.
    """
    N = _check_N(n_layers)
    k = check_range(k, "k", lo=0.0, lo_open=True, allowed="(0, inf)")
    alpha = check_range(alpha, "alpha", lo=0.0)
    return (k * N ** (1.0 - np.asarray(alpha)))[()]


def gradient_fall_order(n_layers, k=2.0, alpha=1.0):
    """Order e^{k N^{1−α}} of the worst gradient fall for β² = k/N^α (Kedia et al. App. G, Sec. 4.6), from
    (1 + k/N^α)^N ≈ e^{k N^{1−α}}: depth-independent (e^k) for α = 1. Broadcasts."""
    return np.exp(sensitivity(n_layers, k=k, alpha=alpha))[()]
