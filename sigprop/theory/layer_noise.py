"""One layer's finite-width fluctuation, by Monte Carlo: how much a fresh draw of one transformer layer's weights
moves the log of its forward and backward gains on a batch, at the model's width and the layer's input moments.

A model's expectation (:func:`sigprop.predict`) averages over weight draws; one model is one draw. Layer k maps the
stream's variance σ²_x(k−1) to σ²_x(k) and the gradient's σ²_g(k) to σ²_g(k−1); the logs of these two gains,

    log φ_k = log σ²_x(k)/σ²_x(k−1),      log γ_k = log σ²_g(k−1)/σ²_g(k)

(variances over the batch's tokens and features, as the measurement pools them), are random through the layer's
weights (and dropout masks), and so are the token correlations of the layer's output, r_x(k), and of the gradient it
passes down, r_g (as the measurement defines them: :func:`sigprop.core.stats.moment_sums`). This module estimates,
for one layer, the covariance of (log φ_k, r_x(k), log γ_k, r_g) over its weights *at a fixed input*: the fresh
noise each layer adds, which :mod:`sigprop.theory.spread` accumulates along depth.

Method: ``inputs`` batches X of Gaussian rows with the layer's input moments (mean μ, variance σ², correlation r,
:func:`gaussian_rows`) and output gradients G with the gradient's (σ²_g, r_g). The exchangeable state's r is a
correlation within a sequence; what two tokens of *different* sequences share it does not say. Forward, the rows'
shared part is taken to be the whole batch's: a token's correlation with others comes from the embeddings it shares
with them (token and position rows) and from attention averaging them, and tokens of two sequences share these as
much as two tokens of one (a Post-LN stack on a real batch measures about the same correlation within and across
sequences: docs/results/spread.md). Backward, each sequence's shared part is its own: attention spreads a labelled
token's gradient within its sequence only, so across sequences the gradients are uncorrelated in expectation. For
each, ``draws_per_input`` fresh draws of the layer's weights (from the plan's standard deviations for that layer)
and dropout masks, one forward and one backward of the real layer each. The covariance *within* each input, pooled
over the inputs (the law of total covariance: E_X Cov_W[· | X]), is what is returned: the spread of the inputs
themselves is the lower layers' (through the variance and the correlation, :mod:`sigprop.theory.spread` carries it
by linear response) and is not counted twice. The sample covariance of n draws in g groups has n − g degrees of
freedom; its relative standard error is about √(2/(n − g)).

What it leaves out, by construction: the batch's rows are Gaussian with *expected* moments, one correlation for
every token pair. A real model's rows at depth carry their own realised Gram matrices (which tokens carry the
gradient, how strongly; two sequences' gradients, uncorrelated in expectation, turned towards the same directions
by the weights they both went back through), whose departures from the expectation the layer's gain also feels (a
four-point effect; bench/postln_gain_spread.py measures it for Post-LN).

Draws run in float64 (the theory's precision) under a forked random state: the caller's global generator is
untouched, and a key (:class:`NoiseKey`) gives the same numbers every time. :class:`LayerNoiseSampler` caches the
result per key (block, width, batch shape, rounded moments), within one prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from ..core.moments import GradMoments, Moments
from ..core.stats import moment_sums
from ..model.config import TransformerConfig
from ..model.init import InitPlan
from ..model.roles import weight_roles
from ..model.transformer import Transformer

__all__ = ["LayerNoise", "NoiseKey", "LayerNoiseSampler", "gaussian_rows", "DEFAULT_INPUTS", "DEFAULT_DRAWS",
           "NOISE_OF"]

#: Input batches per layer, and weight draws per input batch.
DEFAULT_INPUTS = 4
DEFAULT_DRAWS = 12
#: The grid the input moments are rounded to before sampling (the cache's key): log-variance, correlation.
LOG_VAR_STEP = 0.05
CORR_STEP = 0.02
#: What each row and column of :attr:`LayerNoise.covariance` is the fluctuation of.
NOISE_OF = ("log forward gain", "output token correlation", "log backward gain", "input gradient's token correlation")


@dataclass(frozen=True)
class LayerNoise:
    """The fresh fluctuation of one layer within a fixed input (module docstring): ``covariance``, the 4 × 4
    covariance of (log φ, r_x(out), log γ, r_g(in)), the log forward gain, the output's token correlation, the log
    backward gain and the input gradient's token correlation, in that order (:data:`NOISE_OF`); ``dof``: the degrees
    of freedom of the estimate."""

    covariance: np.ndarray
    dof: int

    @property
    def fwd(self) -> float:
        """Var[log φ]."""
        return float(self.covariance[0, 0])

    @property
    def grad(self) -> float:
        """Var[log γ]."""
        return float(self.covariance[2, 2])

    @property
    def cov(self) -> float:
        """Cov[log φ, log γ]."""
        return float(self.covariance[0, 2])


@dataclass(frozen=True)
class NoiseKey:
    """What one layer's noise depends on: the layer (its index into the plan), the rounded input moments (mean,
    log-variance, correlation) and the rounded gradient correlation (the gains are scale-free in the gradient)."""

    layer: int
    mean: float
    log_var: float
    corr: float
    grad_corr: float

    @classmethod
    def of(cls, layer: int, m: Moments, g: GradMoments) -> NoiseKey:
        """The key of layer ``layer`` with input moments ``m`` and output gradient moments ``g``, on the grid."""
        def snap(v: float, step: float) -> float:
            return round(round(float(v) / step) * step, 10)

        return cls(int(layer), snap(float(np.asarray(m.mean)), CORR_STEP),
                   snap(math.log(float(np.asarray(m.var))), LOG_VAR_STEP),
                   snap(float(np.clip(np.asarray(m.corr), 0.0, 1.0)), CORR_STEP),
                   snap(float(np.clip(np.asarray(g.corr), 0.0, 1.0)), CORR_STEP))


def gaussian_rows(mean: float, var: float, corr: float, sequences: int, length: int, width: int,
                  generator: torch.Generator, across: bool = False) -> torch.Tensor:
    """A (sequences, length, width) float64 batch of Gaussian rows: x_bt = μ + σ(√r c_b + √(1 − r) e_bt) with c_b,
    e_bt i.i.d. N(0, I): mean μ, variance σ², correlation r between two tokens of a sequence (r < 0 taken as 0),
    none across sequences; ``across``: one shared c for the whole batch, r between any two of its tokens.

    Example:
        >>> import torch
        >>> x = gaussian_rows(0.0, 2.0, 1.0, 3, 5, 8, torch.Generator().manual_seed(0))
        >>> x.shape, bool((x[:, :1] == x).all())  # r = 1: every token of a sequence is the same row
        (torch.Size([3, 5, 8]), True)
    """
    r = min(max(float(corr), 0.0), 1.0)
    shared = torch.randn(1 if across else sequences, 1, width, generator=generator, dtype=torch.float64)
    own = torch.randn(sequences, length, width, generator=generator, dtype=torch.float64)
    return mean + math.sqrt(var) * (math.sqrt(r) * shared + math.sqrt(1.0 - r) * own)


def _centred_var(t: torch.Tensor) -> torch.Tensor:
    return (t - t.mean()).pow(2).mean()


def _one_layer_plan(plan: InitPlan, layer: int) -> InitPlan:
    """``plan`` cut down to its layer ``layer``, as the plan of a one-layer model."""
    def cut(v: Any) -> Any:
        return np.asarray(v, dtype=np.float64)[layer:layer + 1] if np.ndim(v) else v

    return replace(plan, stds={k: cut(v) for k, v in plan.stds.items()},
                   lam={k: cut(v) for k, v in plan.lam.items()}, beta={k: cut(v) for k, v in plan.beta.items()})


@dataclass
class LayerNoiseSampler:
    """The Monte Carlo of one layer (module docstring) for the layers of one model, cached per :class:`NoiseKey`.

    Args:
        config: the model's configuration (one stack: an encoder or a decoder).
        plan: the plan whose per-layer standard deviations and residual scales the layers are drawn from.
        sequences: B, the batch's sequences.
        length: L, tokens per sequence.
        inputs: input batches per key.
        draws_per_input: weight draws per input batch.
        seed: the seed every key's draws derive from.

    Example:
        >>> import sigprop
        >>> from sigprop.theory.layer_noise import LayerNoiseSampler
        >>> config = sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8,
        ...                                    norm_position="post")
        >>> sampler = LayerNoiseSampler(config, sigprop.plan_for(config), sequences=2, length=8, inputs=2,
        ...                             draws_per_input=4)
        >>> noise = sampler.noise(1, sigprop.Moments(var=1.0, corr=0.3), sigprop.GradMoments(var=1.0, corr=0.2))
        >>> noise.fwd < 1e-4, noise.grad > 0, noise.dof  # Post-LN: the layer ends in a norm, its variance ~fixed
        (True, True, 6)
    """

    config: TransformerConfig
    plan: InitPlan
    sequences: int
    length: int
    inputs: int = DEFAULT_INPUTS
    draws_per_input: int = DEFAULT_DRAWS
    seed: int = 0
    _cache: dict[NoiseKey, LayerNoise] = field(default_factory=dict, init=False, repr=False)
    _model: Transformer | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.config.arch == "encoder_decoder":
            raise ValueError("the seed-to-seed spread is predicted for one stack (an encoder or a decoder), not an "
                             "encoder-decoder")
        if self.inputs < 1 or self.draws_per_input < 2:
            raise ValueError("LayerNoiseSampler needs inputs >= 1 and draws_per_input >= 2")

    @property
    def samples(self) -> int:
        """Keys sampled so far (the cache's size)."""
        return len(self._cache)

    def noise(self, layer: int, m: Moments, g: GradMoments) -> LayerNoise:
        """The fresh fluctuation of layer ``layer`` (its plan's weights) with input moments ``m`` and output gradient
        moments ``g``, on the key's grid (:class:`NoiseKey`), sampled once per key."""
        key = NoiseKey.of(layer, m, g)
        if key not in self._cache:
            self._cache[key] = self._sample(key)
        return self._cache[key]

    def _layer_model(self, layer: int) -> Transformer:
        """A one-layer float64 model whose residual scales and declared standard deviations are layer ``layer``'s
        of the plan (its embeddings are built once and never used)."""
        one = _one_layer_plan(self.plan, layer)
        if self._model is None:
            # the plan is given: the scheme's name only matters to the config's checks (DSLM's β² = k/N needs N > k)
            config = self.config.replace(n_layers=1, init="xavier")
            self._model = Transformer(config, plan=one, generator=torch.Generator().manual_seed(0)).double()
        else:
            one.apply(self._model, torch.Generator().manual_seed(0))
        self._model.train()
        return self._model

    def _sample(self, key: NoiseKey) -> LayerNoise:
        model = self._layer_model(key.layer)
        block = model.layers[0]
        roles = [(r.weight, self.plan.std(r.role, key.layer)) for r in weight_roles(model) if r.layer == 0]
        d, B, L = self.config.d_model, self.sequences, self.length
        logs = np.empty((self.inputs, self.draws_per_input, 4))
        seed = hash((self.seed, key)) % (2**31)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # dropout masks
            gen = torch.Generator().manual_seed(seed)
            for i in range(self.inputs):
                x0 = gaussian_rows(key.mean, math.exp(key.log_var), key.corr, B, L, d, gen, across=True)
                g = gaussian_rows(0.0, 1.0, key.grad_corr, B, L, d, gen)
                vx, vg = _centred_var(x0), _centred_var(g)
                for j in range(self.draws_per_input):
                    with torch.no_grad():
                        for weight, std in roles:
                            weight.normal_(0.0, std, generator=gen)
                    x = x0.clone().requires_grad_(True)
                    y = block(x)
                    (gx,) = torch.autograd.grad(y, x, g)
                    logs[i, j] = (math.log(float(_centred_var(y.detach()) / vx)), float(moment_sums(y.detach()).corr()),
                                  math.log(float(_centred_var(gx) / vg)), float(moment_sums(gx).corr()))
        within = logs - logs.mean(axis=1, keepdims=True)
        dof = self.inputs * (self.draws_per_input - 1)
        c = np.einsum("ijk,ijl->kl", within, within) / dof
        return LayerNoise(covariance=c, dof=dof)
