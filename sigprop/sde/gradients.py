"""Noci et al. (2023) Fig. 2: gradient norms of the value and query weights per layer at initialisation, for shaped
attention, Pre-LN and Post-LN Transformers on a causal next-token task on code.

Three sigprop decoders of the same size are built from :class:`~sigprop.model.config.TransformerConfig`:

* ``shaped``: ``attention="shaped"`` (Eq. 9, γ1 = γ2 = 1, τ = τ0√(n·n_k)), ``activation="shaped_relu"`` (Eq. 4),
  no norm, ``init="shaped"`` (λ² + γ² = 1 with the config's γ, 1/√8 as in Fig. 1);
* ``pre-LN`` and ``post-LN``: standard softmax attention, ReLU, Xavier initialisation (the paper's "standard Pre-LN"
  and "original Post-LN block").

Each is initialised with ``seeds`` weight draws; on one batch of real code (the Python standard library's source,
tokenised locally) the next-token loss is back-propagated and ‖∂L/∂W_V‖_F, ‖∂L/∂W_Q‖_F are read per layer. The
paper's finding: the shaped model's gradients are stable over depth for both; Pre-LN's and Post-LN's vanish towards
the first layers, Post-LN's only for the queries. No dropout (the statement is about initialisation).
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..model.batches import token_batch
from ..model.config import TransformerConfig
from ..model.transformer import Transformer, seeded_model
from .result import ExperimentResult, stage

__all__ = ["ARCHS", "gradient_config", "weight_gradient_norms", "figure2"]

#: the three architectures of Fig. 2 as TransformerConfig overrides
ARCHS = {
    "shaped": dict(attention="shaped", activation="shaped_relu", norm="none", norm_position="none", init="shaped"),
    "pre-LN": dict(norm_position="pre", init="xavier"),
    "post-LN": dict(norm_position="post", init="xavier"),
}
#: the weights whose gradient norms are read, by their parameter name in the attention module
WEIGHTS = ("w_v", "w_q")


def gradient_config(arch: str, width: int, depth: int, heads: int, seq_len: int, vocab_size: int = 8192,
                    tau0: float = 1.0, gamma: float = 1 / math.sqrt(8)) -> TransformerConfig:
    """The decoder of ``arch`` ("shaped", "pre-LN" or "post-LN") at the given size, dropout 0."""
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {', '.join(ARCHS)} (got {arch!r})")
    extra = dict(shaped_tau0=tau0, shaped_gamma=gamma) if arch == "shaped" else {}
    return TransformerConfig(arch="decoder", n_layers=depth, d_model=width, n_heads=heads, dropout=0.0,
                             attn_dropout=0.0, seq_len=seq_len, max_len=seq_len, vocab_size=vocab_size,
                             **ARCHS[arch], **extra)


def weight_gradient_norms(model: Transformer, batch: dict) -> dict[str, np.ndarray]:
    """{"w_v": …, "w_q": …}: the Frobenius norm of the loss gradient of each layer's attention value and query
    weights (one array over the layers), from one forward and backward pass of ``model.loss(batch)``."""
    model.zero_grad(set_to_none=True)
    model.loss(batch).backward()
    out = {}
    for name in WEIGHTS:
        norms = []
        for layer in model.layers:
            w = getattr(layer.attn.branch.attn, name)
            norms.append(float(w.grad.double().norm()) if w.grad is not None else 0.0)
        out[name] = np.array(norms)
    model.zero_grad(set_to_none=True)
    return out


def figure2(width: int = 200, depth: int = 150, heads: int = 1, seq_len: int = 128, batch_size: int = 4,
            seeds: int = 4, tau0: float = 1.0, gamma: float = 1 / math.sqrt(8), seed: int = 0, data=None,
            progress=None):
    """Fig. 2 (module docstring). Width n = 200 and depth 150 follow Fig. 1's caption; one head (n_k = n) and
    sequences of 128 tokens are our choice (not stated in the paper). Returns an
    :class:`~sigprop.sde.result.ExperimentResult` (figure 2) with, per architecture and weight, the per-layer
    geometric mean over seeds of the gradient norm and its log-scale standard error, and as checks the ratio of the
    first layer's to the last layer's norm."""
    for name, v, lo in (("width", width, 2), ("depth", depth, 1), ("heads", heads, 1), ("seq_len", seq_len, 2),
                        ("batch_size", batch_size, 1), ("seeds", seeds, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo} (got {v!r})")
    t0 = time.perf_counter()
    curves, checks = {}, {}
    total = len(ARCHS) * seeds
    for i, arch in enumerate(ARCHS):
        config = gradient_config(arch, width, depth, heads, seq_len, tau0=tau0, gamma=gamma)
        batch = token_batch(config, batch_size=batch_size, data=data, seed=seed)
        logs = {w: [] for w in WEIGHTS}
        for s in range(seeds):
            stage(progress, f"{arch} seed {s}", i * seeds + s, total)
            model = seeded_model(config, seed + s, masks=False)
            for w, norms in weight_gradient_norms(model, batch).items():
                logs[w].append(np.log(np.maximum(norms, 1e-300)))
            del model
        curves[arch] = {}
        for w in WEIGHTS:
            x = np.array(logs[w])
            se = x.std(axis=0, ddof=1) / math.sqrt(seeds) if seeds > 1 else np.full(depth, np.nan)
            curves[arch][w] = {"geo_mean": np.exp(x.mean(axis=0)).tolist(), "log_se": se.tolist()}
            checks[f"{arch} {w} first/last"] = float(np.exp(x.mean(axis=0)[0] - x.mean(axis=0)[-1]))
    stage(progress, "done", total, total)
    setup = {"width": width, "depth": depth, "heads": heads, "seq_len": seq_len, "batch_size": batch_size,
             "seeds": seeds, "tau0": tau0, "gamma": gamma, "seed": seed, "task": "next-token, Python stdlib code"}
    return ExperimentResult(figure=2, setup=setup, data={"curves": curves, "layers": list(range(depth))},
                            checks=checks, seconds=time.perf_counter() - t0)
