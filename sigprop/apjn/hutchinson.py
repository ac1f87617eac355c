"""Measured averaged partial Jacobian norms (APJN) of a sigprop Transformer, or of any model's stack of blocks
(:func:`as_block_stack`): Hutchinson estimates and the exact
reference (Alekseev 2026, Eqs. 5–7, App. A "Hutchinson's method"; Hoffman et al. 2019; Doshi et al. 2023).

Blocks. Block b is the b-th :class:`~sigprop.model.layer.TransformerLayer` (an attention residual followed by an MLP
residual, Alekseev Eq. 1 with L = 2B layers); h^b ∈ R^{n×d} is the input of block b, so h^0 is the embedding output
and h^B the last block's output before the final norm. The block-level APJN (Eqs. 6, 7) is

    𝒥^{b',b} = ‖J^{b',b}‖²_F / (n d),   J^{b',b} = ∂h^{b'}/∂h^b  (an (nd) × (nd) matrix),

for one weight draw; the paper's 𝒥 is its mean over initialisations (:func:`measure_apjn`). With ``output=
"final_norm"`` the output is the final norm's output instead of h^B, 𝒥^{out,b} = Q̂^B 𝒥^{B,b} in the theory
(App. F, Eq. 91).

Hutchinson's estimator. For a probe v with E[v vᵀ] = I (standard Gaussian entries, or Rademacher ±1),
E‖vᵀJ‖² = tr(J Jᵀ) = ‖J‖²_F, so X = ‖vᵀJ‖²/(nd) is an unbiased sample of 𝒥, and the mean of P independent probes
has standard error s/√P (s the sample standard deviation of X). For Gaussian v, X = Σ_i σ_i² z_i²/(nd) with σ_i
the singular values of J, so Var X = 2 Σσ_i⁴/(nd)² exactly (Rademacher probes have the smaller variance
2(Σσ_i⁴ − Σ_k M_kk²)/(nd)², M = J Jᵀ).

* Backward (𝒥^{B,b} for every b at once): one forward pass from h^start keeps h^start, …, h^stop as graph nodes,
  and one vector–Jacobian product of the probe v at the output returns vᵀ J^{stop,b} = ∂⟨v, h^stop⟩/∂h^b for every
  b together (one backward sweep through the chain rule: vᵀJ^{stop,b} = (vᵀJ^{stop,b+1}) J^{b+1,b}).
* Forward (𝒥^{b,start} for every b at once): a forward-mode Jacobian–vector product (``torch.func.jvp``) of a
  Gaussian tangent u at h^start carries J^{b,start} u to every later block in one pass; E‖J u‖² = ‖J‖²_F.
* Probes are batched: the one token configuration (n, d) is repeated along a leading batch dimension of ``chunk``
  probes, every row carrying its own probe (the model maps rows independently), so P probes cost ⌈P/chunk⌉ batched
  passes.

The model runs in eval mode (no dropout) with its parameters' ``requires_grad`` switched off during a measurement
(restored afterwards), so no weight gradient is built.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

__all__ = ["as_block_stack", "OUTPUTS", "DISTRIBUTIONS", "APJNEstimate", "APJNMeasurement", "run_blocks", "vjp_norms",
           "jvp_norms", "backward_apjn", "forward_apjn", "apjn_pair", "exact_apjn", "exact_backward_apjn",
           "exact_forward_apjn", "measure_apjn"]

#: Where the output of the network is taken: h^B (the last block's output, Eq. 6) or the final norm's output (App. F).
OUTPUTS = ("block", "final_norm")
#: Probe distributions (both have E[v vᵀ] = I).
DISTRIBUTIONS = ("gaussian", "rademacher")


@dataclass(frozen=True)
class APJNEstimate:
    """Hutchinson estimates for one model and one input: ``blocks`` (the b of 𝒥^{b_out,b} for backward, of
    𝒥^{b,b_in} for forward), ``mean`` and ``se`` (standard error over probes, s/√P) per block, and ``samples``
    (P, len(blocks)), the per-probe values ‖vᵀJ‖²/(nd) (backward) or ‖J u‖²/(nd) (forward)."""

    kind: str
    blocks: np.ndarray
    mean: np.ndarray
    se: np.ndarray
    samples: np.ndarray
    reference: int
    output: str

    @property
    def probes(self) -> int:
        return int(self.samples.shape[0])

    def at(self, block: int) -> tuple[float, float]:
        """(estimate, standard error) at ``block``."""
        idx = np.flatnonzero(self.blocks == block)
        if idx.size == 0:
            raise ValueError(f"block {block} was not measured (blocks: {self.blocks.tolist()})")
        return float(self.mean[idx[0]]), float(self.se[idx[0]])


@dataclass(frozen=True)
class APJNMeasurement:
    """APJNs averaged over weight initialisations (Alekseev Eq. 6's 𝔼_θ): one model per seed, each measured by
    Hutchinson's method. ``mean`` is the mean of the per-seed estimates ``per_seed_mean`` (seeds × blocks); ``se``
    is the standard error of that mean from the spread of the per-seed estimates (std/√S, which includes the probe
    noise of each), or the probe standard error when only one seed is given. ``build_seconds`` and ``seconds`` are
    the wall times per seed of building the model and of measuring it."""

    kind: str
    blocks: np.ndarray
    mean: np.ndarray
    se: np.ndarray
    per_seed_mean: np.ndarray
    per_seed_se: np.ndarray
    seeds: tuple
    probes: int
    reference: int
    output: str
    build_seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    seconds: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def at(self, block: int) -> tuple[float, float]:
        """(estimate, standard error) at ``block``."""
        idx = np.flatnonzero(self.blocks == block)
        if idx.size == 0:
            raise ValueError(f"block {block} was not measured (blocks: {self.blocks.tolist()})")
        return float(self.mean[idx[0]]), float(self.se[idx[0]])

    def to_dict(self) -> dict:
        return {"kind": self.kind, "blocks": self.blocks.tolist(), "mean": self.mean.tolist(), "se": self.se.tolist(),
                "per_seed_mean": self.per_seed_mean.tolist(), "per_seed_se": self.per_seed_se.tolist(),
                "seeds": list(self.seeds), "probes": self.probes, "reference": self.reference, "output": self.output,
                "build_seconds": self.build_seconds.tolist(), "seconds": self.seconds.tolist()}


# ----------------------------------------------------------------------------------------------------------------
# running blocks
# ----------------------------------------------------------------------------------------------------------------

class _FirstOutput(nn.Module):
    """A block whose forward returns a tuple (e.g. a Hugging Face layer: (hidden_states, ...)) reduced to its first
    element, the hidden states."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x):
        out = self.block(x)
        return out[0] if isinstance(out, tuple) else out


def as_block_stack(blocks) -> nn.ModuleList:
    """Any model's blocks as a stack the APJN functions accept: ``blocks`` is a sequence of modules, each mapping
    hidden states (..., n, d) to (..., n, d) (e.g. ``my_model.encoder.layer`` of a Hugging Face BERT, or a list of
    your own blocks); a block returning a tuple contributes its first element. Use the result in place of a sigprop
    Transformer: ``backward_apjn(as_block_stack(model.blocks), h0)``. The blocks' own train/eval mode is set by
    the measurement (eval: no dropout)."""
    mods = list(blocks)
    if not mods or not all(isinstance(m, nn.Module) for m in mods):
        raise TypeError("blocks must be a non-empty sequence of torch.nn.Module")
    return nn.ModuleList(_FirstOutput(m) for m in mods)


def _blocks(model: nn.Module) -> list[nn.Module]:
    if isinstance(model, nn.ModuleList):  # a user's stack of blocks (as_block_stack)
        if len(model) == 0:
            raise ValueError("the block stack is empty")
        return list(model)
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "layers"):
        raise TypeError(f"model must be a sigprop Transformer or a block stack from as_block_stack(...) "
                        f"(got {type(model).__name__})")
    if config.arch == "encoder_decoder":
        raise ValueError("APJN measurement supports arch='encoder' or 'decoder' (one stack of blocks); got "
                         "'encoder_decoder'")
    return list(model.layers)


def _check_range(model, start, stop) -> tuple[int, int]:
    n_blocks = len(_blocks(model))
    stop = n_blocks if stop is None else stop
    for name, v in (("start", start), ("stop", stop)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"{name} must be an integer block index (got {v!r})")
    if not 0 <= start <= stop <= n_blocks:
        raise ValueError(f"need 0 <= start <= stop <= {n_blocks} (the number of blocks); got start={start}, "
                         f"stop={stop}")
    return int(start), int(stop)


def _check_output(model, output: str, stop: int) -> None:
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {', '.join(OUTPUTS)} (got {output!r})")
    if output == "final_norm":
        if getattr(model, "final_norm", None) is None:
            raise ValueError("output='final_norm' needs a model with a final norm (config.has_final_norm)")
        if stop != len(_blocks(model)):
            raise ValueError(f"output='final_norm' follows the last block: stop must be {len(_blocks(model))} "
                             f"(got {stop})")


@contextlib.contextmanager
def _measuring(model: nn.Module):
    """Eval mode and frozen parameters for the duration (both restored: every submodule's own mode too)."""
    from ..measurement.preserved import preserved_state

    flags = [(p, p.requires_grad) for p in model.parameters()]
    with preserved_state(model):
        model.eval()
        for p, _ in flags:
            p.requires_grad_(False)
        try:
            yield
        finally:
            for p, flag in flags:
                p.requires_grad_(flag)


def _forward_ad_attention():
    """Scaled-dot-product attention by its math backend, which supports forward-mode AD and has vmap batching rules
    (the fused CPU/GPU kernels that ``scaled_dot_product_attention`` picks for batched inputs have neither)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    stack = contextlib.ExitStack()
    stack.enter_context(sdpa_kernel(SDPBackend.MATH))
    # torch's forward-mode set-up scripts a helper and warns that torch.jit.script is deprecated: not our concern
    stack.enter_context(warnings.catch_warnings())
    warnings.filterwarnings("ignore", message=".*torch.jit.script.*", category=DeprecationWarning)
    return stack


def _trajectory(model, x: torch.Tensor, start: int, stop: int, output: str) -> list[torch.Tensor]:
    """[h^start, …, h^stop] (+ the final norm's output when ``output="final_norm"``)."""
    layers = _blocks(model)
    hs = [x]
    for layer in layers[start:stop]:
        x = layer(x)
        hs.append(x)
    if output == "final_norm":
        hs.append(model.final_norm(x))
    return hs


def _model_tensor(model) -> torch.Tensor:
    p = next(iter(model.parameters()), None)
    if p is None:
        raise ValueError("the model has no parameters to take the device and dtype from")
    return p


def _tokens(model, h: torch.Tensor) -> torch.Tensor:
    if not isinstance(h, torch.Tensor) or h.dim() != 2:
        raise ValueError(f"h must be one token configuration, a tensor of shape (n, d); got "
                         f"{tuple(h.shape) if isinstance(h, torch.Tensor) else type(h).__name__}")
    config = getattr(model, "config", None)
    d = config.d_model if config is not None else h.shape[-1]
    if h.shape[-1] != d:
        raise ValueError(f"h has width {h.shape[-1]}, the model has d_model = {d}")
    if h.shape[0] < 1:
        raise ValueError("h needs at least one token")
    ref = _model_tensor(model)
    return h.detach().to(device=ref.device, dtype=ref.dtype)


def run_blocks(model: nn.Module, h: torch.Tensor, start: int = 0, stop: int | None = None,
               output: str = "block") -> torch.Tensor:
    """h^stop from h^start = ``h`` (shape (..., n, d)): blocks start, …, stop − 1 of a sigprop Transformer in eval
    mode (no dropout), without the embedding; with ``output="final_norm"`` (stop = B only) the final norm's output.
    Gradients flow to ``h`` (and to the parameters) as usual; the model's train/eval mode is restored."""
    start, stop = _check_range(model, start, stop)
    _check_output(model, output, stop)
    was_training = model.training
    model.eval()
    try:
        return _trajectory(model, h, start, stop, output)[-1]
    finally:
        model.train(was_training)


# ----------------------------------------------------------------------------------------------------------------
# probes
# ----------------------------------------------------------------------------------------------------------------

def _check_probes(probes, chunk, distribution) -> tuple[int, int]:
    if isinstance(probes, bool) or not isinstance(probes, (int, np.integer)) or probes < 2:
        raise ValueError(f"probes must be an integer >= 2 (a standard error needs two) (got {probes!r})")
    chunk = probes if chunk is None else chunk
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"chunk must be an integer >= 1 (got {chunk!r})")
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {', '.join(DISTRIBUTIONS)} (got {distribution!r})")
    return int(probes), int(min(chunk, probes))


def _draw(shape, like: torch.Tensor, generator, distribution) -> torch.Tensor:
    """Probes drawn on the CPU from ``generator`` (reproducible across devices), then moved to ``like``'s device."""
    if distribution == "gaussian":
        v = torch.randn(shape, generator=generator, dtype=torch.float64)
    else:
        v = torch.randint(0, 2, shape, generator=generator).to(torch.float64) * 2.0 - 1.0
    return v.to(device=like.device, dtype=like.dtype)


def _summary(kind, blocks, samples: np.ndarray, reference, output) -> APJNEstimate:
    p = samples.shape[0]
    return APJNEstimate(kind=kind, blocks=np.asarray(blocks, dtype=np.int64), mean=samples.mean(axis=0),
                        se=samples.std(axis=0, ddof=1) / math.sqrt(p), samples=samples, reference=int(reference),
                        output=output)


def _select(blocks, lo, hi, name) -> list[int]:
    if blocks is None:
        return list(range(lo, hi + 1))
    out = [int(b) for b in blocks]
    bad = [b for b in out if not lo <= b <= hi]
    if bad or not out:
        raise ValueError(f"{name} must be a non-empty list of block indices in [{lo}, {hi}] (got {list(blocks)})")
    return out


# ----------------------------------------------------------------------------------------------------------------
# Hutchinson estimators
# ----------------------------------------------------------------------------------------------------------------

def vjp_norms(model: nn.Module, h: torch.Tensor, v: torch.Tensor, start: int = 0, stop: int | None = None,
              blocks: Sequence[int] | None = None, output: str = "block") -> np.ndarray:
    """‖v_kᵀ J^{stop,b}‖²/(nd) for given probes ``v`` (k, n, d) at the output and every b in ``blocks`` (default
    start, …, stop): the k rows of h^start = ``h`` (n, d) go through blocks start, …, stop − 1 as one batch whose
    hidden states h^start, …, h^stop stay graph nodes, and ONE vector–Jacobian product (``torch.autograd.grad`` of
    the output with cotangent v, with respect to all those nodes) gives vᵀJ^{stop,b} for every b. ``output=
    "final_norm"`` puts the final norm after block stop = B (App. F). Returns a (k, len(blocks)) float64 array."""
    start, stop, chosen, x0, v = _prepare(model, h, v, "v", start, stop, blocks, output)
    k, n, d = v.shape
    with _measuring(model):
        x = x0.expand(k, n, d).clone().requires_grad_(True)
        with torch.enable_grad():
            hs = _trajectory(model, x, start, stop, output)
            grads = torch.autograd.grad(hs[-1], [hs[b - start] for b in chosen], grad_outputs=v)
    return _squared_norms(grads)


def jvp_norms(model: nn.Module, h: torch.Tensor, u: torch.Tensor, start: int = 0, stop: int | None = None,
              blocks: Sequence[int] | None = None) -> np.ndarray:
    """‖J^{b,start} u_k‖²/(nd) for given tangents ``u`` (k, n, d) at h^start = ``h`` (n, d) and every b in
    ``blocks`` (default start, …, stop), by one forward-mode Jacobian–vector product (``torch.func.jvp``) through
    blocks start, …, stop − 1 that carries J^{b,start} u to every block. Returns a (k, len(blocks)) float64 array."""
    start, stop, chosen, x0, u = _prepare(model, h, u, "u", start, stop, blocks, "block")
    k, n, d = u.shape

    def trajectory(x):
        hs = _trajectory(model, x, start, stop, "block")
        return tuple(hs[b - start] for b in chosen)

    with _measuring(model), _forward_ad_attention():
        _, tangents = torch.func.jvp(trajectory, (x0.expand(k, n, d).clone(),), (u,))
    return _squared_norms(tangents)


def _prepare(model, h, probes, name, start, stop, blocks, output):
    """Checked (start, stop, chosen blocks, h^start as a model tensor, probes of shape (k, n, d))."""
    start, stop = _check_range(model, start, stop)
    _check_output(model, output, stop)
    chosen = _select(blocks, start, stop, "blocks")
    x0 = _tokens(model, h)
    return start, stop, chosen, x0, _probes_like(probes, x0, name)


def _squared_norms(tensors) -> np.ndarray:
    """(k, len(tensors)) float64: ‖t_k‖²/(nd) of each (k, n, d) tensor."""
    n, d = tensors[0].shape[-2:]
    return torch.stack([t.double().pow(2).sum(dim=(-2, -1)) for t in tensors], dim=-1).cpu().numpy() / (n * d)


def _probes_like(v, x0, name) -> torch.Tensor:
    if not isinstance(v, torch.Tensor) or v.dim() != 3 or tuple(v.shape[1:]) != tuple(x0.shape):
        raise ValueError(f"{name} must be a tensor of probes of shape (k, n, d) = (k, {x0.shape[0]}, {x0.shape[1]}); "
                         f"got {tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__}")
    return v.detach().to(device=x0.device, dtype=x0.dtype)


def backward_apjn(model: nn.Module, h: torch.Tensor, probes: int = 10, generator: torch.Generator | None = None,
                  output: str = "block", start: int = 0, stop: int | None = None,
                  blocks: Sequence[int] | None = None, chunk: int | None = None,
                  distribution: str = "gaussian") -> APJNEstimate:
    """Backward APJN 𝒥^{stop,b} = ‖∂h^stop/∂h^b‖²_F/(nd) for every b in ``blocks`` (default start, …, stop;
    stop = None: the last block B) by Hutchinson's method with ``probes`` probes at the output (Alekseev Eq. 6,
    App. A; module docstring). ``h`` is h^start, one token configuration (n, d). One vector–Jacobian product per
    probe gives all blocks (:func:`vjp_norms`); probes go through the blocks in batches of ``chunk`` (default: all
    at once). ``output="final_norm"`` measures 𝒥^{out,b} through the final norm (App. F; stop must be B). At
    b = stop with ``output="block"`` (J = I) the samples are ‖v‖²/(nd): mean 1, exactly 1 for Rademacher probes.
    Returns an :class:`APJNEstimate` (standard error over probes)."""
    start, stop = _check_range(model, start, stop)
    _check_output(model, output, stop)
    probes, chunk = _check_probes(probes, chunk, distribution)
    chosen = _select(blocks, start, stop, "blocks")
    x0 = _tokens(model, h)
    out = [vjp_norms(model, x0, _draw((min(chunk, probes - first),) + tuple(x0.shape), x0, generator, distribution),
                     start, stop, chosen, output)
           for first in range(0, probes, chunk)]
    return _summary("backward", chosen, np.concatenate(out, axis=0), stop, output)


def forward_apjn(model: nn.Module, h: torch.Tensor, probes: int = 10, generator: torch.Generator | None = None,
                 start: int = 0, stop: int | None = None, blocks: Sequence[int] | None = None,
                 chunk: int | None = None, distribution: str = "gaussian") -> APJNEstimate:
    """Forward APJN 𝒥^{b,start} = ‖∂h^b/∂h^start‖²_F/(nd) for every b in ``blocks`` (default start, …, stop) by
    forward-mode Hutchinson (:func:`jvp_norms`): a tangent u at h^start (``h``, shape (n, d)) is carried to every
    block by one Jacobian–vector product, and ‖J^{b,start} u‖²/(nd) is averaged over ``probes`` tangents (Alekseev
    Eq. 6; the paper's forward APJN is start = 0, App. G's shifted reference b₀ = 8 is start = 8). At b = start
    (J = I) the samples are ‖u‖²/(nd), mean 1. Attention runs on its math backend (forward-mode AD). Returns an
    :class:`APJNEstimate`."""
    start, stop = _check_range(model, start, stop)
    probes, chunk = _check_probes(probes, chunk, distribution)
    chosen = _select(blocks, start, stop, "blocks")
    x0 = _tokens(model, h)
    out = [jvp_norms(model, x0, _draw((min(chunk, probes - first),) + tuple(x0.shape), x0, generator, distribution),
                     start, stop, chosen)
           for first in range(0, probes, chunk)]
    return _summary("forward", chosen, np.concatenate(out, axis=0), start, "block")


def apjn_pair(model: nn.Module, h: torch.Tensor, b: int, b_out: int | None = None, probes: int = 10,
              generator: torch.Generator | None = None, output: str = "block", mode: str = "backward",
              chunk: int | None = None, distribution: str = "gaussian", h_is_input: bool = True) -> tuple[float, float]:
    """(estimate, standard error) of 𝒥^{b_out,b} (b ≤ b_out; b_out = None: the last block B) for one model.
    ``h`` is h^0 (the first block's input) when ``h_is_input`` (h^b is then computed without a graph), else h^b
    itself. ``mode`` = "backward" (probes at h^{b_out}, vector–Jacobian product) or "forward" (tangents at h^b,
    Jacobian–vector product; ``output="block"`` only); both estimate the same ‖J‖²_F/(nd)."""
    n_blocks = len(_blocks(model))
    b_out = n_blocks if b_out is None else b_out
    start, stop = _check_range(model, b, b_out)
    if mode not in ("backward", "forward"):
        raise ValueError(f"mode must be 'backward' or 'forward' (got {mode!r})")
    x = _tokens(model, h)
    if h_is_input and start > 0:
        with torch.no_grad(), _measuring(model):
            x = _trajectory(model, x, 0, start, "block")[-1]
    if mode == "backward":
        est = backward_apjn(model, x, probes, generator, output, start, stop, [start], chunk, distribution)
    else:
        if output != "block":
            raise ValueError("mode='forward' measures output='block' only")
        est = forward_apjn(model, x, probes, generator, start, stop, [stop], chunk, distribution)
    return float(est.mean[0]), float(est.se[0])


# ----------------------------------------------------------------------------------------------------------------
# exact reference
# ----------------------------------------------------------------------------------------------------------------

def exact_apjn(model: nn.Module, h: torch.Tensor, b: int, b_out: int | None = None, output: str = "block",
               h_is_input: bool = True, method: str = "jacrev") -> float:
    """The exact 𝒥^{b_out,b} = ‖J^{b_out,b}‖²_F/(nd) from the full Jacobian (``torch.func.jacrev`` or ``jacfwd``;
    (nd)² entries: small models only), the reference for the Hutchinson estimators. ``h`` is h^0 when
    ``h_is_input``, else h^b. Use float64 models for a reference to round-off."""
    return float(_exact_jacobian(model, h, b, b_out, output, h_is_input, method).double().pow(2).sum()
                 / h.shape[-2] / h.shape[-1])


def _exact_jacobian(model, h, b, b_out, output, h_is_input, method) -> torch.Tensor:
    n_blocks = len(_blocks(model))
    b_out = n_blocks if b_out is None else b_out
    start, stop = _check_range(model, b, b_out)
    _check_output(model, output, stop)
    if method not in ("jacrev", "jacfwd"):
        raise ValueError(f"method must be 'jacrev' or 'jacfwd' (got {method!r})")
    x = _tokens(model, h)
    with _measuring(model):
        if h_is_input and start > 0:
            with torch.no_grad():
                x = _trajectory(model, x, 0, start, "block")[-1]
        jac = getattr(torch.func, method)(lambda z: _trajectory(model, z, start, stop, output)[-1])
        with _forward_ad_attention():  # the math attention kernel: forward-mode AD and vmap batching rules
            return jac(x).detach()


def exact_backward_apjn(model: nn.Module, h: torch.Tensor, output: str = "block") -> np.ndarray:
    """[𝒥^{B,b} for b = 0, …, B] exactly (one full Jacobian per b; small models only). ``h`` is h^0."""
    n_blocks = len(_blocks(model))
    x = _tokens(model, h)
    with torch.no_grad(), _measuring(model):
        hs = _trajectory(model, x, 0, n_blocks, "block")
    return np.array([exact_apjn(model, hs[b], b, n_blocks, output, h_is_input=False) for b in range(n_blocks + 1)])


def exact_forward_apjn(model: nn.Module, h: torch.Tensor) -> np.ndarray:
    """[𝒥^{b,0} for b = 0, …, B] exactly (small models only). ``h`` is h^0."""
    n_blocks = len(_blocks(model))
    return np.array([exact_apjn(model, h, 0, b) for b in range(n_blocks + 1)])


# ----------------------------------------------------------------------------------------------------------------
# averaging over initialisations
# ----------------------------------------------------------------------------------------------------------------

def measure_apjn(config, h: torch.Tensor | Callable[[nn.Module], torch.Tensor], seeds: Sequence[int] = (0,),
                 probes: int = 10, kind: str = "backward", output: str = "block", blocks: Sequence[int] | None = None,
                 reference: int | None = None, chunk: int | None = None, dtype: torch.dtype = torch.float32,
                 device=None, distribution: str = "gaussian") -> APJNMeasurement:
    """APJNs of the model of ``config`` averaged over weight initialisations, 𝔼_θ of Alekseev Eq. 6 (App. A: the
    paper averages Hutchinson estimates with 10 probes over 4–8 initialisations).

    For each seed a :class:`~sigprop.model.transformer.Transformer` is built from the config's init plan with
    ``torch.Generator().manual_seed(seed)`` (probes from a second generator seeded with seed + 2**31), in ``dtype``
    on ``device``, and measured on ``h``: a tensor h^0 of shape (n, d) shared by every seed (e.g. an equiangular
    configuration, :mod:`sigprop.apjn.inputs`), or a callable ``model -> h^0`` (e.g. images through that model's
    own patch embedding). ``kind="backward"``: 𝒥^{reference,b} (reference None = B) for b in ``blocks``;
    ``kind="forward"``: 𝒥^{b,reference} (reference None = 0). Returns an :class:`APJNMeasurement`: per-seed
    estimates and probe SEs, their mean, and the SE of the mean from the spread over seeds.

    Memory: a backward batch keeps every block's activations for ``chunk`` probes (default: all); measured peak
    resident memory 1.3 GB for 64 blocks, d = 256, n = 64, 10 probes in float32 (lower ``chunk`` to save memory).
    """
    from ..model.transformer import seeded_model

    if kind not in ("backward", "forward"):
        raise ValueError(f"kind must be 'backward' or 'forward' (got {kind!r})")
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    if kind == "forward" and output != "block":
        raise ValueError("kind='forward' measures output='block' only")
    means, ses, build_s, run_s = [], [], [], []
    chosen = None
    for seed in seeds:
        t0 = time.perf_counter()
        # drawn on the CPU from the seed (a CPU generator cannot fill a GPU tensor), then moved: the same models on
        # every device
        model = seeded_model(config, seed, device, dtype, masks=False)
        t1 = time.perf_counter()
        h0 = h(model) if callable(h) else h
        gen = torch.Generator().manual_seed(seed + 2**31)
        if kind == "backward":
            est = backward_apjn(model, h0, probes, gen, output, 0, reference, blocks, chunk, distribution)
        else:
            start = 0 if reference is None else reference
            if start > 0:
                with torch.no_grad(), _measuring(model):
                    h0 = _trajectory(model, _tokens(model, h0), 0, start, "block")[-1]
            est = forward_apjn(model, h0, probes, gen, start, None, blocks, chunk, distribution)
        t2 = time.perf_counter()
        means.append(est.mean)
        ses.append(est.se)
        build_s.append(t1 - t0)
        run_s.append(t2 - t1)
        chosen, ref = est.blocks, est.reference
        del model
    per_mean, per_se = np.stack(means), np.stack(ses)
    s = len(seeds)
    se = per_mean.std(axis=0, ddof=1) / math.sqrt(s) if s > 1 else per_se[0]
    return APJNMeasurement(kind=kind, blocks=chosen, mean=per_mean.mean(axis=0), se=se, per_seed_mean=per_mean,
                           per_seed_se=per_se, seeds=seeds, probes=int(probes), reference=ref, output=output,
                           build_seconds=np.array(build_s), seconds=np.array(run_s))
