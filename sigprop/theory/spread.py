"""The seed-to-seed spread of one model's log-variances: how far a single weight draw's profile departs from the
expectation :func:`sigprop.predict` gives, at finite width, layer by layer.

What is predicted, per layer row l of a model of N layers:

* ``fwd_var_log_sd``: the standard deviation over weight draws of log σ²_x(l), the stream's variance after layer l,
  given the embedding's output (0 at the input row);
* ``grad_var_log_sd``: the standard deviation of log σ²_g(l)/σ²_g(N − 1), the gradient's variance relative to the
  top layer's (0 at the top; the top's own randomness is the loss's).

Model (a linear-noise approximation, van Kampen's system-size expansion with 1/width as the small parameter).
The state whose fluctuations are carried is what each layer's expected gains read: forward, the stream's
log-variance and token correlation, u_k = (ε_k, ρ_k) with ε_k = log σ²_x(k) − E log σ²_x(k) and ρ_k = r_x(k) −
E r_x(k); backward, the gradient's token correlation at layer k's output, v_k = r_g(k) − E r_g(k). With log φ_k
(forward) and log γ_k (backward) the log gains of layer k as in :mod:`sigprop.theory.layer_noise`, to first order
in the fluctuations

    u_k          = M_k u_{k−1} + ξ_k,                          u_{−1} = 0 (given the embedding),
    v_{k−1}      = P_k v_k + q_k · u_{k−1} + ω_k,               v_{N−1} = 0 (given the loss),
    δ log γ_k    = b_k · u_{k−1} + β_k v_k + η^g_k,

where ζ_k = (ξ_k, η^g_k, ω_k), the fresh noise layer k's own weights add at a fixed input (covariance from
:class:`~sigprop.theory.layer_noise.LayerNoiseSampler`), is independent between layers (each layer's weights are
drawn independently), and M_k, P_k, q_k, b_k, β_k are the linear response of the *expected* layer map to its input
state, taken from the component rules themselves (central differences of the walker over one layer,
:func:`response`). Every quantity is then linear in the ζ_j: the gradient's log-ratio at row l,
S_l = Σ_{k>l} δ log γ_k = Σ_j c_{lj} · ζ_j, has variance Σ_j c_{lj}ᵀ Cov(ζ_j) c_{lj} (:func:`accumulate_state`).

Post-LN ends each layer in a norm: its output variance is fixed, and without the correlations the gradient's spread
would be the sum of its layers' fresh noise, the product of independent random factors whose log tends to a
Gaussian (Hanin & Nica 2019; Li, Nica & Roy 2021: variance ∝ depth/width). Pre-LN's stream variance is a sum over
layers, each branch's share falling like 1/k; its fluctuation enters every later layer's gain (the norm divides by
σ_x). The token correlations are what make one seed's layers move together: a seed whose stream ends up more
correlated than the expectation has every later layer's gain shifted the same way (attention averages over tokens),
and a gradient more correlated than expected passes through each attention layer with a larger gain. Carrying them
is what brings DeepScaleLM's and Pre-LN's predicted spread to the measured one (docs/results/spread.md).

Assumptions, each a source of error stated where it acts:

1. first order: the fluctuations are small per layer (their variance is O(1/width)); their sum over depth need
   not be;
2. the fresh noise of a layer is sampled with Gaussian rows of the *expected* moments and one correlation for every
   token pair (:mod:`~sigprop.theory.layer_noise`); the realised Gram matrices' departures from one correlation per
   pair (which tokens carry the gradient, how strongly), beyond the pooled correlation carried here, are left out;
3. the embedding's and the loss's own fluctuations are not carried (the forward spread is given the embedding's
   output, the gradient's relative to the top layer's);
4. the noise is sampled at a few anchor layers (:func:`anchor_layers`: dense near both ends, where the moments
   change fastest), refined where two neighbouring anchors' fresh variances differ by more than a factor
   :data:`REFINE_RATIO` (:func:`next_anchor`: in a Pre-LN stack it falls tenfold over the first few layers), and
   interpolated linearly in the layer index between them; the responses likewise, on a denser set
   (:data:`RESPONSE_ANCHORS`: every layer of a model of up to 40);
5. the gradient correlation's channel is carried only where the profile's backward state is the exchangeable one
   (:func:`predict_spread`'s ``gradient_correlation``).

Cost: the Monte Carlo runs ``inputs × draws_per_input`` forward and backward passes of one layer per distinct anchor
key (:class:`~sigprop.theory.layer_noise.NoiseKey`), the responses six walks of one layer per response anchor.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ..components.draws import layer_context
from ..core.moments import GradMoments, Moments
from ..core.profile import Profile, Row
from ..model.config import TransformerConfig
from ..model.transformer import Transformer
from ..walk.exchangeable import EXCHANGEABLE
from ..walk.protocol import rules_of
from ..walk.walker import Flow, GradFlow, Walker
from .layer_noise import DEFAULT_DRAWS, DEFAULT_INPUTS, LayerNoiseSampler

__all__ = ["SpreadColumns", "NoiseSampling", "predict_spread", "spread_steps", "accumulate", "accumulate_state",
           "state_spread", "anchor_layers", "response", "gradient_ratio_interval", "seed_mean_band", "profile_bands",
           "check_spread", "SPREAD_OF", "DEFAULT_ANCHORS", "REFINE_RATIO", "RESPONSE_ANCHORS", "RESPONSE_STEP",
           "CORR_RESPONSE_STEP", "BAND_LEVEL", "BAND_DRAWS", "BAND_NODES"]

#: Anchor layers at which the noise is sampled (at most; a shallower model: every layer).
DEFAULT_ANCHORS = 10
#: Neighbouring noise anchors whose fresh variances (the covariance's trace) differ by more than this factor have the
#: layer halfway between them sampled too (:func:`next_anchor`), up to :attr:`NoiseSampling.most_anchors`.
REFINE_RATIO = 1.5
#: Anchor layers at which the responses are taken (at most): cheaper than the noise, and needed denser, since a
#: correlation's response changes fast over the first layers (the input's correlation is near 0).
RESPONSE_ANCHORS = 40
#: The step in log-variance of the central difference of :func:`response`.
RESPONSE_STEP = 0.05
#: The step in token correlation of the central difference of :func:`response`.
CORR_RESPONSE_STEP = 0.02
#: The statistic each predicted spread column is the log-sd of.
SPREAD_OF = {"fwd_var": "fwd_var_log_sd", "grad_var": "grad_var_log_sd"}
#: The probability of the band :func:`seed_mean_band` draws around a K-seed mean (as "within 2 SE" judges a normal).
BAND_LEVEL = 0.95
#: Monte Carlo draws of a K-seed mean per band (:func:`seed_mean_band`).
BAND_DRAWS = 8192
#: Values of s at which :func:`seed_mean_band` draws its Monte Carlo, the log-quantiles interpolated linearly between
#: them (every distinct s when there are no more).
BAND_NODES = 32


@dataclass(frozen=True)
class SpreadColumns:
    """Per "layer" row l (0 … N−1) and the input row (−1): the predicted standard deviations of the log forward
    variance (``fwd``) and of the log gradient ratio to the top (``grad``), as {layer: value}; ``meta``: how they
    were computed, and the predicted standard deviations of the stream's and the gradient's token correlations
    (``fwd_corr_sd``, ``grad_corr_sd``: lists over the rows −1 … N−1)."""

    fwd: dict[int, float]
    grad: dict[int, float]
    meta: dict[str, Any]

    def apply(self, profile: Profile) -> Profile:
        """``profile`` with the columns set on its "layer" and "input" rows (other sites keep NaN) and
        ``meta["spread"]``."""
        rows = []
        for r in profile.rows:
            if r.site in ("layer", "input") and r.layer in self.fwd:
                r = Row(r.layer, r.site, r.fwd_mean, r.fwd_var, r.fwd_corr, r.grad_var, r.grad_corr,
                        fwd_var_log_sd=self.fwd[r.layer], grad_var_log_sd=self.grad.get(r.layer, math.nan))
            rows.append(r)
        return Profile(profile.kind, profile.config, tuple(rows), {**profile.meta, "spread": self.meta})


def anchor_layers(n_layers: int, anchors: int = DEFAULT_ANCHORS) -> list[int]:
    """Layers at which the noise is sampled: Chebyshev–Lobatto nodes over 0 … n_layers − 1 (both ends included,
    dense near them), every layer when there are no more than ``anchors``.

    Example:
        >>> anchor_layers(4), anchor_layers(192, 5)
        ([0, 1, 2, 3], [0, 28, 95, 163, 191])
    """
    if n_layers <= anchors:
        return list(range(n_layers))
    nodes = (n_layers - 1) * (1 - np.cos(np.pi * np.arange(anchors) / (anchors - 1))) / 2
    return sorted({int(round(v)) for v in nodes})


def next_anchor(fresh: dict[int, float], ratio: float = REFINE_RATIO) -> int | None:
    """The layer to sample next: halfway across the gap between neighbouring anchors whose fresh variances differ by
    the largest factor, if it exceeds ``ratio`` and the gap has a layer inside; else None. A straight line between
    anchors far apart overstates a steeply falling (convex) noise: sampling where it changes most bounds that.

    Args:
        fresh: {anchor layer: its fresh variance (the trace of its noise covariance)}.
        ratio: the factor above which a gap is split (:data:`REFINE_RATIO`).

    Returns:
        The layer, or None when every gap is narrow enough or has no layer inside.

    Example:
        >>> next_anchor({0: 1.0, 6: 0.05, 22: 0.03}), next_anchor({0: 1.0, 1: 0.05, 22: 0.04})
        (3, None)
    """
    layers = sorted(fresh)
    best, split = ratio, None
    for a, b in zip(layers, layers[1:], strict=False):
        high, low = max(fresh[a], fresh[b]), min(fresh[a], fresh[b])
        factor = math.inf if low <= 0 < high else (high / low if high > 0 else 1.0)
        if b - a > 1 and factor > best:
            best, split = factor, (a + b) // 2
    return split


def refined_anchors(at: list[int], sample: Callable[[int], np.ndarray], most_anchors: int,
                    ratio: float = REFINE_RATIO) -> dict[int, np.ndarray]:
    """The noise at the anchors ``at`` and at the layers :func:`next_anchor` adds, up to ``most_anchors`` in all.

    Args:
        at: the first anchors (:func:`anchor_layers`).
        sample: a layer's 4 × 4 fresh covariance.
        most_anchors: the anchors at most (:attr:`NoiseSampling.most_anchors`).
        ratio: the factor above which a gap is split (:data:`REFINE_RATIO`).

    Returns:
        {anchor layer: its covariance}, the sampled layers only.

    Example:
        >>> import numpy as np
        >>> sorted(refined_anchors([0, 6, 22], lambda k: np.eye(4) / (k + 1) ** 2, 5))
        [0, 1, 3, 6, 22]
    """
    fresh = {k: sample(k) for k in at}
    while len(fresh) < most_anchors:
        k = next_anchor({k: float(np.trace(c)) for k, c in fresh.items()}, ratio)
        if k is None:
            break
        fresh[k] = sample(k)
    return fresh


def response(model: Transformer, layer: int, m: Moments, g: GradMoments, context: dict[str, Any],
             step: float = RESPONSE_STEP, corr_step: float = CORR_RESPONSE_STEP) -> np.ndarray:
    """The linear response of ``layer`` of ``model``: the 4 × 3 matrix of derivatives of its expected
    (log σ²_x(out), r_x(out), log γ, r_g(in)) (rows: the output's log-variance and token correlation, the log
    gradient gain log σ²_g(in)/σ²_g(out), the input gradient's token correlation) with respect to
    (log σ²_x(in), r_x(in), r_g(out)) (columns: the input's log-variance and token correlation, the output gradient's
    token correlation), by central differences through the component rules (the exchangeable state): ``step`` in
    log-variance, ``corr_step`` in a correlation (kept inside the states that exist: [0, 1) forward, and backward
    above three quarters of −1/(L − 1), the least correlation L exchangeable tokens can share; a quarter step below
    1; the difference then taken over the span that remains).

    Args:
        model: the theory's model.
        layer: the layer's index.
        m: its input's moments.
        g: its output gradient's moments.
        context: the sweep's rule context.
        step: the half-step in log-variance.
        corr_step: the half-step in a token correlation.

    Returns:
        The (4, 3) float64 matrix J of the module docstring's responses: M = J[:2, :2], b = J[2, :2], β = J[2, 2],
        q = J[3, :2], P = J[3, 2].

    Example:
        >>> import sigprop
        >>> from sigprop.theory.predict import theory_model
        >>> config = sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8,
        ...                                    norm_position="post")
        >>> J = response(theory_model(config), 1, sigprop.Moments(var=1.0, corr=0.3),
        ...              sigprop.GradMoments(var=1.0, corr=0.2), {"L": 8, "attention_seed": 0})
        >>> J.shape, bool(abs(J[0, 0]) < 1e-6)  # Post-LN: the layer ends in a norm, its output variance is fixed
        ((4, 3), True)
    """
    module = model.layers[layer]
    source = rules_of(list(model.layers[layer - 1].children())[-1]) if layer > 0 else None
    walker = Walker(EXCHANGEABLE, layer_context(context, layer))
    g_var = float(np.asarray(g.var))

    def walk(var: float, corr: float, grad_corr: float) -> np.ndarray:
        state = Moments(mean=m.mean, var=var, corr=corr, corr_hidden=m.corr_hidden)
        flow, tape = walker.forward(module, Flow(state, source))
        back = walker.backward(module, GradFlow(GradMoments(var=g_var, corr=grad_corr)), tape)
        gain = float(np.asarray(back.value.var * back.scale)) / g_var
        return np.array([math.log(float(np.asarray(flow.value.var))), float(np.asarray(flow.value.corr)),
                         math.log(gain), float(np.asarray(back.value.corr))])

    var, corr, grad_corr = float(np.asarray(m.var)), float(np.asarray(m.corr)), float(np.asarray(g.corr))
    out = np.empty((4, 3))
    out[:, 0] = (walk(var * math.exp(step), corr, grad_corr)
                 - walk(var * math.exp(-step), corr, grad_corr)) / (2 * step)
    edge = corr_step / 4  # a correlation of exactly ±1 is a degenerate state some rules cannot take
    low, high = max(corr - corr_step, 0.0), min(corr + corr_step, 1.0 - edge)
    out[:, 1] = (walk(var, high, grad_corr) - walk(var, low, grad_corr)) / (high - low)
    length = int(context.get("L", 0))  # L exchangeable tokens cannot all be more anti-correlated than −1/(L − 1)
    floor = -1.0 / (length - 1) if length > 1 else -1.0
    low, high = max(grad_corr - corr_step, 0.75 * floor), min(grad_corr + corr_step, 1.0 - edge)
    out[:, 2] = (walk(var, corr, high) - walk(var, corr, low)) / (high - low)
    return out


def _state_coefficients(J: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(U, V): U[k + 1] (2, N, 4) the coefficients of u_k on every layer's fresh noise ζ_j (U[0] = 0: u_{−1}),
    V[k + 1] (N, 4) those of v_k (V[N] = 0: v_{N−1}), from the responses J (N, 4, 3) (module docstring)."""
    n = J.shape[0]
    unit = np.eye(4)
    U = np.zeros((n + 1, 2, n, 4))
    for k in range(n):
        U[k + 1] = np.einsum("ab,bjq->ajq", J[k, :2, :2], U[k])
        U[k + 1, :, k] += unit[:2]
    V = np.zeros((n + 1, n, 4))
    for k in range(n - 1, -1, -1):  # v_{k-1} = J[k, 3, 2] v_k + J[k, 3, :2] · u_{k-1} + ω_k
        V[k] = J[k, 3, 2] * V[k + 1] + np.einsum("a,ajq->jq", J[k, 3, :2], U[k])
        V[k, k] += unit[3]
    return U, V


def _variances(coefficients: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """Var of Σ_j c_j · ζ_j with independent ζ_j of covariance ``noise`` (N, q, q), for coefficients (..., N, q)."""
    return np.einsum("...jq,jqr,...jr->...", coefficients, noise, coefficients)


def _interpolated(at: list[int], table: np.ndarray, n: int) -> np.ndarray:
    """(n, columns): each column of ``table`` (one row per anchor layer ``at``) interpolated linearly over 0 … n − 1."""
    return np.stack([np.interp(np.arange(n), at, table[:, q]) for q in range(table.shape[1])], -1)


def state_spread(noise: np.ndarray, J: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The variances of the token correlations' fluctuations the spread carries: of ρ_l (the stream's, after layer
    l) and of v_l (the gradient's, at layer l's output), for l = −1 … N−1 (index 0: the input row).

    Args:
        noise: (N, 4, 4), as :func:`accumulate_state`.
        J: (N, 4, 3), as :func:`accumulate_state`.

    Returns:
        (Var ρ, Var v), each of length N + 1.

    Example:
        >>> import numpy as np
        >>> noise = np.zeros((3, 4, 4)); noise[:, 1, 1] = 0.01
        >>> J = np.zeros((3, 4, 3)); J[:, 1, 1] = 1.0  # the stream's correlation persists
        >>> np.round(state_spread(noise, J)[0], 12).tolist()
        [0.0, 0.01, 0.02, 0.03]
    """
    U, V = _state_coefficients(J)
    return _variances(U[:, 1], noise), _variances(V, noise)


def accumulate_state(noise: np.ndarray, J: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The variances of ε_l and of S_l (module docstring) for l = −1 … N−1, from the layers' fresh noise and
    linear responses: the forward state u_k = (ε_k, ρ_k) walked up from u_{−1} = 0, the backward state v_k (the
    fluctuation of the gradient's token correlation at layer k's output) walked down from v_{N−1} = 0, both linear in
    every layer's fresh noise ζ_j; S_l's variance is that of its coefficients on the ζ_j, independent between layers.

    Args:
        noise: (N, 4, 4), layer k's fresh covariance of ζ_k = (log φ_k, r_x(k), log γ_k, r_g(in of k)) at a fixed
            input (:class:`~sigprop.theory.layer_noise.LayerNoise`).
        J: (N, 4, 3), layer k's responses (:func:`response`).

    Returns:
        (Var ε, Var S), each of length N + 1, index 0 being the input row.

    Example:
        >>> import numpy as np
        >>> noise = np.zeros((3, 4, 4)); noise[:, 1, 1] = 0.01; noise[:, 2, 2] = 0.1
        >>> J = np.zeros((3, 4, 3)); J[:, 0, 0] = J[:, 1, 1] = 1.0; J[:, 2, 1] = 1.0  # the gain reads ρ
        >>> fwd, grad = accumulate_state(noise, J)
        >>> np.round(grad, 12).tolist()  # S_{-1} = Σ η^g + ρ_0 + ρ_1 = Σ η^g + 2 ξ_0 + ξ_1: 0.3 + 0.04 + 0.01
        [0.35, 0.25, 0.12, 0.0]
    """
    n, q = noise.shape[0], noise.shape[1]
    unit = np.eye(q)
    U, V = _state_coefficients(J)
    fwd = _variances(U[:, 0], noise)
    grad = np.zeros(n + 1)
    c = np.zeros((n, q))  # S_l's coefficients, summed from the top down
    for l in range(n - 1, -1, -1):  # δ log γ_l = J[l, 2, :2] · u_{l-1} + J[l, 2, 2] v_l + η^g_l
        c = c + np.einsum("a,ajq->jq", J[l, 2, :2], U[l]) + J[l, 2, 2] * V[l + 1]
        c[l] += unit[2]
        grad[l] = float(_variances(c, noise))
    return fwd, grad


def accumulate(vf: np.ndarray, vg: np.ndarray, cov: np.ndarray, A: np.ndarray,
               B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`accumulate_state` with the variance alone as the state: the per-layer fresh noise (``vf``, ``vg``,
    ``cov``: Var log φ, Var log γ and their covariance) and responses (``A`` = ∂ log σ²_x(out)/∂ log σ²_x(in),
    ``B`` = ∂ log γ/∂ log σ²_x(in)), arrays over the N layers; no correlation fluctuates. Returns (Var ε, Var S),
    each of length N + 1, index 0 being the input row.

    Example:
        >>> import numpy as np
        >>> zero, one = np.zeros(3), np.ones(3)
        >>> fwd, grad = accumulate(zero, 0.1 * one, zero, zero, zero)  # independent gradient factors only
        >>> np.round(grad, 12).tolist()  # S_l sums the layers above l: 3, 2, 1, 0 of them
        [0.3, 0.2, 0.1, 0.0]
    """
    vf, vg, cov, A, B = (np.asarray(v, dtype=np.float64) for v in (vf, vg, cov, A, B))
    noise = np.zeros((len(vf), 4, 4))
    noise[:, 0, 0], noise[:, 2, 2], noise[:, 0, 2], noise[:, 2, 0] = vf, vg, cov, cov
    J = np.zeros((len(vf), 4, 3))
    J[:, 0, 0], J[:, 2, 0] = A, B
    return accumulate_state(noise, J)


def check_spread(config: TransformerConfig) -> None:
    """``ValueError`` for a model whose spread is not predicted (an encoder–decoder: one stack only), raised before
    any sweep.

    Args:
        config: the model's :class:`~sigprop.model.config.TransformerConfig`.

    Raises:
        ValueError: an encoder–decoder.

    Example:
        >>> import sigprop
        >>> check_spread(sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8))
    """
    if config.arch == "encoder_decoder":
        raise ValueError("the seed-to-seed spread (--spread) is predicted for one stack (an encoder or a decoder), "
                         "not an encoder-decoder")


def spread_steps(n_layers: int, anchors: int = DEFAULT_ANCHORS, most_anchors: int = 2 * DEFAULT_ANCHORS) -> int:
    """The progress steps of :func:`predict_spread` for ``n_layers`` layers: one per noise anchor's Monte Carlo
    (the refinement's too, at most ``most_anchors`` in all), one per response anchor's responses
    (:data:`RESPONSE_ANCHORS`).

    Args:
        n_layers: N, the stack's layers.
        anchors: the noise anchors before refinement (:attr:`NoiseSampling.anchors`).
        most_anchors: the noise anchors after it, at most (:attr:`NoiseSampling.most_anchors`).

    Returns:
        The steps :func:`predict_spread` reports to its ``progress`` in all.

    Example:
        >>> spread_steps(4), spread_steps(192)
        (8, 58)
    """
    noise = min(n_layers, max(len(anchor_layers(n_layers, anchors)), most_anchors))
    return noise + len(anchor_layers(n_layers, RESPONSE_ANCHORS))


@dataclass(frozen=True)
class NoiseSampling:
    """How the layers' fresh noise is sampled (:class:`~sigprop.theory.layer_noise.LayerNoiseSampler`): at most
    ``anchors`` anchor layers (:func:`anchor_layers`), then more where the noise changes fast (:func:`next_anchor`)
    up to ``most_anchors`` in all (``most_anchors=anchors``: no refinement), ``inputs`` input batches per anchor,
    ``draws_per_input`` weight draws per input batch, every draw derived from ``seed``."""

    anchors: int = DEFAULT_ANCHORS
    most_anchors: int = 2 * DEFAULT_ANCHORS
    inputs: int = DEFAULT_INPUTS
    draws_per_input: int = DEFAULT_DRAWS
    seed: int = 0


def predict_spread(model: Transformer, profile: Profile, context: dict[str, Any], sequences: int, length: int,
                   sampling: NoiseSampling = NoiseSampling(), progress: Callable[[int], None] | None = None,
                   gradient_correlation: bool = True) -> SpreadColumns:
    """The seed-to-seed spread of ``profile`` (the predicted profile of the theory's ``model``, walked under the
    sweep's ``context``) on a batch of ``sequences`` × ``length`` tokens (module docstring).

    Args:
        model: the theory's model (:func:`~sigprop.theory.predict.theory_model`); its plan gives the layers' draws.
        profile: its predicted profile: each layer's input moments and output gradient moments are read from it.
        context: the sweep's rule context (``L``, ``attention_heads``, ``attention_seed``).
        sequences: B, sequences in the batch.
        length: L, tokens per sequence.
        sampling: how the layers' fresh noise is sampled (:class:`NoiseSampling`).
        progress: called with 1 after each anchor layer's Monte Carlo and after each response anchor's responses,
            and at the end with the refinement's unused steps (:func:`spread_steps` in all).
        gradient_correlation: carry the fluctuation of the gradient's token correlation (v_k). The responses are the
            exchangeable rules': where the profile's backward sweep is token-resolved (a decoder's gradient, whose
            positions are not exchangeable), its gains do not follow the pooled correlation, and the channel is left
            out (v_k ≡ 0; ``meta["gradient_correlation"]`` says so).

    Returns:
        The :class:`SpreadColumns`.

    Raises:
        ValueError: an encoder–decoder (one stack only).

    Example:
        >>> import sigprop
        >>> from sigprop.theory.predict import theory_model
        >>> config = sigprop.TransformerConfig(n_layers=3, d_model=16, n_heads=2, vocab_size=64, seq_len=8,
        ...                                    norm_position="post")
        >>> columns = predict_spread(theory_model(config), sigprop.predict(config),
        ...                          {"L": 8, "attention_seed": 0}, 1, 8, NoiseSampling(inputs=2, draws_per_input=3))
        >>> columns.grad[2], columns.grad[0] > columns.grad[1] > 0  # relative to the top; grows down the stack
        (0.0, True)
    """
    config = model.config
    n = config.n_layers
    rows = profile.lookup()
    sampler = LayerNoiseSampler(config, model.plan, sequences, length, sampling.inputs, sampling.draws_per_input,
                                sampling.seed)
    at = anchor_layers(n, sampling.anchors)
    gradients = all(math.isfinite(rows[(k, "layer")].grad_var) and rows[(k, "layer")].grad_var > 0
                    for k in range(n))

    def moments_at(k: int) -> tuple[Moments, GradMoments]:
        below = rows[(k - 1, "layer" if k > 0 else "input")]
        m = Moments(mean=below.fwd_mean, var=below.fwd_var, corr=float(np.clip(below.fwd_corr, 0.0, 1.0)))
        out = rows[(k, "layer")]
        g = (GradMoments(var=out.grad_var, corr=float(np.clip(out.grad_corr, -1.0, 1.0))) if gradients
             else GradMoments(var=1.0, corr=0.0))
        return m, g

    def sampled(k: int) -> np.ndarray:  # the 4 × 4 fresh covariance at layer k
        covariance = sampler.noise(k, *moments_at(k)).covariance
        if progress is not None:
            progress(1)
        return covariance

    fresh = refined_anchors(at, sampled, sampling.most_anchors)
    at = sorted(fresh)
    at_response = anchor_layers(n, RESPONSE_ANCHORS)
    if progress is not None:  # the refinement's unused steps
        progress(spread_steps(n, sampling.anchors, sampling.most_anchors) - len(at_response) - len(at))
    noise = _interpolated(at, np.stack([fresh[k].ravel() for k in at]), n).reshape(n, 4, 4)
    responses = np.empty((len(at_response), 12))
    for i, k in enumerate(at_response):
        responses[i] = response(model, k, *moments_at(k), context).ravel()
        if progress is not None:
            progress(1)
    J = _interpolated(at_response, responses, n).reshape(n, 4, 3)
    if not gradient_correlation:  # v_k ≡ 0: no fresh noise, no response feeds it or reads it
        noise[:, 3, :] = noise[:, :, 3] = 0.0
        J[:, 3, :] = J[:, 2, 2] = 0.0
    fwd, grad = accumulate_state(noise, J)
    fwd_corr, grad_corr = state_spread(noise, J)
    layers = range(-1, n)
    meta = {"method": "linear noise: each layer's fresh fluctuation of its log gains and of the token correlations of "
                      "its output and of the gradient it passes down (Monte Carlo of one layer on Gaussian rows of its "
                      "expected moments), accumulated with the rules' linear response (sigprop.theory.spread)",
            "anchor_layers": at, "response_anchors": len(at_response), "keys_sampled": sampler.samples,
            "draws_per_key": sampling.inputs * sampling.draws_per_input,
            "fwd_corr_sd": [round(float(math.sqrt(max(v, 0.0))), 6) for v in fwd_corr],
            "grad_corr_sd": [round(float(math.sqrt(max(v, 0.0))), 6) for v in grad_corr] if gradients else [],
            "gradient_correlation": ("carried" if gradient_correlation else
                                     "not carried (the profile's backward state is token-resolved)"),
            "batch": [int(sequences), int(length)]}
    return SpreadColumns({l: float(math.sqrt(max(v, 0.0))) for l, v in zip(layers, fwd, strict=True)},
                         ({l: float(math.sqrt(max(v, 0.0))) for l, v in zip(layers, grad, strict=True)}
                          if gradients else {}),
                         meta)


def gradient_ratio_interval(profile: Profile, layer: int = 0, level: float = 0.9) -> tuple[float, float]:
    """The central ``level`` interval of one model's gradient ratio σ²_g(layer)/σ²_g(top), from a prediction with
    spread: log-normal (the log of a product of many independent layer gains, module docstring) with the predicted
    sd s = ``grad_var_log_sd`` and the mean-log that makes its expectation the predicted ratio R,
    log R − s²/2.

    Args:
        profile: a predicted profile with spread (:func:`sigprop.predict` with ``spread=True``).
        layer: the layer row whose ratio to the top is asked (default: the first layer).
        level: the interval's probability, in (0, 1).

    Returns:
        (low, high): R e^{−s²/2 ∓ z s}, z the standard normal's (1 + level)/2 quantile.

    Raises:
        ValueError: a profile without spread, a layer it has no row for, or a level outside (0, 1).

    Example:
        >>> from sigprop.core.profile import Profile, Row
        >>> rows = (Row(0, "layer", grad_var=4.0, grad_var_log_sd=0.5), Row(1, "layer", grad_var=1.0,
        ...                                                                  grad_var_log_sd=0.0))
        >>> low, high = gradient_ratio_interval(Profile("predicted", {}, rows))
        >>> round(low, 3), round(high, 3)  # 4 e^{-0.125 ∓ 1.645·0.5}
        (1.551, 8.034)
    """
    from statistics import NormalDist

    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1) (got {level!r})")
    if not profile.has_spread:
        raise ValueError("the profile has no predicted spread: predict with spread=True")
    rows = {r.layer: r for r in profile.site("layer")}
    if layer not in rows:
        raise ValueError(f"the profile has no layer row {layer} (layers {min(rows)}-{max(rows)})")
    top = rows[max(rows)]
    ratio, sd = rows[layer].grad_var / top.grad_var, rows[layer].grad_var_log_sd
    if not (math.isfinite(ratio) and ratio > 0 and math.isfinite(sd)):
        raise ValueError(f"layer {layer}: no gradient ratio or spread to bound (gradients=False, or a zero gradient)")
    z = NormalDist().inv_cdf((1.0 + level) / 2.0)
    centre = math.log(ratio) - sd * sd / 2.0
    return math.exp(centre - z * sd), math.exp(centre + z * sd)


def seed_mean_band(expected: ArrayLike, log_sd: ArrayLike, seeds: int, level: float = BAND_LEVEL,
                   draws: int = BAND_DRAWS) -> tuple[np.ndarray, np.ndarray]:
    """The central ``level`` interval of the mean over ``seeds`` independent models of a statistic whose expectation
    is ``expected`` and whose log has the seed-to-seed standard deviation ``log_sd`` (per row, arrays broadcast).

    One model's value is taken log-normal, the law of a product of many independent layer gains (module docstring):
    X = E·exp(s Z − s²/2), Z standard normal, so that E X = E. The mean of K such values has no closed form (the
    Fenton–Wilkinson moment match is poor in the lower tail once s ≳ 1, where deep Post-LN gradients sit), so its
    quantiles are taken from ``draws`` Monte Carlo means of K values, at each distinct s or, with more than
    :data:`BAND_NODES` of them, on that many evenly spaced values of s with the log-quantiles interpolated linearly
    between. The standard normals are one fixed stream (seed 0) shared by every row: the band is a deterministic
    function of (E, s, K). A row with s = 0 gets [E, E]; a NaN s gives NaN bounds.

    Args:
        expected: the predicted expectation(s) E (> 0).
        log_sd: the predicted sd(s) s ≥ 0 of log X (``fwd_var_log_sd`` / ``grad_var_log_sd``).
        seeds: K ≥ 1, the models averaged (1: one model's own interval).
        level: the band's probability, in (0, 1).
        draws: Monte Carlo means per row.

    Returns:
        (low, high), arrays of the broadcast shape of ``expected`` and ``log_sd``.

    Raises:
        ValueError: ``seeds`` < 1, ``level`` outside (0, 1) or ``draws`` < 100.

    Example:
        >>> low, high = seed_mean_band([1.0, 1.0], [0.0, 0.5], seeds=1, level=0.9)
        >>> low.round(2).tolist(), high.round(2).tolist()  # one model: e^{-s²/2 ∓ 1.645·s} = 0.387, 2.005
        ([1.0, 0.39], [1.0, 2.01])
    """
    if isinstance(seeds, bool) or int(seeds) != seeds or seeds < 1:
        raise ValueError(f"seeds must be an integer >= 1 (got {seeds!r})")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1) (got {level!r})")
    if draws < 100:
        raise ValueError(f"draws must be >= 100 (got {draws!r})")
    e, s = np.broadcast_arrays(np.asarray(expected, dtype=np.float64), np.asarray(log_sd, dtype=np.float64))
    usable = np.isfinite(e) & np.isfinite(s) & (s >= 0.0)
    low, high = np.full(e.shape, np.nan), np.full(e.shape, np.nan)
    if not usable.any():
        return low, high
    z = np.random.default_rng(0).standard_normal((draws, int(seeds)))
    quantiles = ((1.0 - level) / 2.0, (1.0 + level) / 2.0)
    values = np.unique(s[usable])
    nodes = values if values.size <= BAND_NODES else np.linspace(0.0, float(values.max()), BAND_NODES)
    log_q = np.zeros((nodes.size, 2))  # log of the quantiles of the mean relative to E, at each node's s
    for i, si in enumerate(nodes):
        if si > 0.0:
            log_q[i] = np.log(np.quantile(np.exp(si * z - si * si / 2.0).mean(axis=1), quantiles))
    su = s[usable]
    low[usable] = e[usable] * np.exp(np.interp(su, nodes, log_q[:, 0]))
    high[usable] = e[usable] * np.exp(np.interp(su, nodes, log_q[:, 1]))
    return low, high


def profile_bands(profile: Profile, seeds: int, level: float = BAND_LEVEL) -> dict[str, dict[tuple[int, str], tuple]]:
    """The predicted band of a ``seeds``-model mean of each statistic with a spread (:data:`SPREAD_OF`), for every
    row of ``profile`` that has one: {quantity: {(layer, site): (low, high)}} (:func:`seed_mean_band`).

    The gradient's spread is that of its ratio to the top layer's; the band treats the top's own value as the
    prediction's (with ``grad_boundary="measured"`` the measured seed mean, whose seed-to-seed spread is the loss's and
    is left out).

    Args:
        profile: a predicted profile with spread (:func:`sigprop.predict` with ``spread=True``).
        seeds: K, the models a measurement averages.
        level: the band's probability.

    Returns:
        {quantity: {(layer, site): (low, high)}}; empty for a profile without spread.

    Example:
        >>> from sigprop.core.profile import Profile, Row
        >>> rows = (Row(0, "layer", grad_var=4.0, fwd_var=1.0, grad_var_log_sd=0.5, fwd_var_log_sd=0.0),)
        >>> bands = profile_bands(Profile("predicted", {}, rows), seeds=16)
        >>> [round(v, 2) for v in bands["grad_var"][(0, "layer")]], bands["fwd_var"][(0, "layer")]
        ([3.07, 5.14], (1.0, 1.0))
    """
    out: dict[str, dict[tuple[int, str], tuple]] = {}
    for quantity, column in SPREAD_OF.items():
        rows = [r for r in profile.rows if math.isfinite(getattr(r, column))]
        if not rows:
            continue
        low, high = seed_mean_band([getattr(r, quantity) for r in rows], [getattr(r, column) for r in rows], seeds,
                                   level)
        out[quantity] = {(r.layer, r.site): (float(a), float(b)) for r, a, b in zip(rows, low, high, strict=True)}
    return out
