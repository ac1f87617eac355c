"""FP8 direct casting of a trained run (Kedia et al., "DeepScaleLM", Table 12): a model whose activations keep unit
variance through depth can be evaluated with its linear layers' weights and inputs cast to FP8 *without any scaling
factor*, because the values already sit in the formats' well-resolved range.

The cast. For a format with largest finite value M (``torch.finfo(dtype).max``: 448 for E4M3, 57344 for E5M2),

    q(x) = float32( fp8( clamp(x, −M, M) ) ),

round to nearest even into the FP8 grid. Values beyond ±M **saturate** to ±M (the clamp: torch's own cast of an
out-of-range value gives NaN for ``float8_e4m3fn`` or ±inf for ``float8_e5m2``, depending on version); values of at most
half the smallest subnormal (2⁻¹⁰ for E4M3, 2⁻¹⁷ for E5M2) **underflow** to 0. No per-tensor scale is computed or
applied: that is what "direct" means, and it is exact for every value the format represents (q(x) = x there).

What is cast (:func:`fp8_direct_cast`): every linear layer, i.e. every ``torch.nn.Linear`` (sigprop's
:class:`~sigprop.components.linear.Linear` and the head, the patch projection), every attention module's
projection matrices ``w_q``, ``w_k``, ``w_v`` and every gated unit's ``w_gate``, ``w_up`` (SwiGLU, GeGLU), gets
q(weight) and q(input) (a forward pre-hook casts the input
activations: the attention input, and the encoder memory a cross-attention reads); every embedding table
(``torch.nn.Embedding``: token, position, segment) gets q(table). Biases, norm gains, residual scales and everything
computed inside a layer (the attention scores, softmax, the residual sums, the norms, the loss) stay float32: the
matmuls see FP8 operands, as an FP8 GEMM with a float32 accumulator would. On hardware without FP8 matmuls (a CPU,
pre-Hopper GPUs) this simulates the rounding only, not the speed or the memory.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from ..model.batch import Batch

__all__ = ["FP8_FORMATS", "check_fp8_format", "fp8_round", "CastStats", "fp8_direct_cast", "evaluate_run"]

#: The FP8 formats by name: E4M3 (the "fn" variant: no infinities, max 448) and E5M2 (max 57344).
FP8_FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}

#: The parameters of a module that are linear projections of its input (x @ w), cast like a Linear's weight: an
#: attention module's queries, keys and values, a gated unit's (SwiGLU / GeGLU) gate and up projections.
_PROJECTIONS = (("w_q", "w_k", "w_v"), ("w_gate", "w_up"))


def check_fp8_format(fmt) -> str | None:
    """``fmt`` checked: "e4m3", "e5m2" or None (no FP8); ``ValueError`` with a one-line message otherwise."""
    if fmt is None or (isinstance(fmt, str) and fmt in FP8_FORMATS):
        return fmt
    raise ValueError(f"fp8 must be one of {', '.join(FP8_FORMATS)} (got {fmt!r})")


def fp8_round(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """``x`` rounded to the FP8 format ``fmt`` ("e4m3" / "e5m2") and back to its own dtype, without scaling:
    clamp to ±``torch.finfo(fp8).max`` (saturation, so no NaN or inf comes from a large finite value or an
    infinity), cast (round to nearest even; underflow to 0 at or below half the smallest subnormal), cast back.
    Exact for values the format represents; NaN stays NaN."""
    dtype = FP8_FORMATS[check_fp8_format(fmt)]
    top = torch.finfo(dtype).max
    return x.clamp(-top, top).to(dtype).to(x.dtype)


@dataclass
class CastStats:
    """What the casts of :func:`fp8_direct_cast` met: for the activations (every input cast in a forward pass) and
    for the weights (each cast once), the number of values, of values beyond the format's max (saturated), of
    nonzero values and of nonzero values that became 0 (underflow), and the largest magnitude seen."""

    fmt: str
    activations: dict = field(default_factory=lambda: {"values": 0, "overflow": 0, "nonzero": 0, "underflow": 0,
                                                        "max_abs": 0.0})
    weights: dict = field(default_factory=lambda: {"values": 0, "overflow": 0, "nonzero": 0, "underflow": 0,
                                                   "max_abs": 0.0})

    def count(self, x: torch.Tensor, q: torch.Tensor, into: dict) -> None:
        """Add the cast ``x`` → ``q`` to ``into`` (one of the two tallies)."""
        top = torch.finfo(FP8_FORMATS[self.fmt]).max
        if not x.numel():
            return
        with torch.no_grad():
            a = x.detach().abs()
            # q is 0 exactly where x is 0 or underflowed (NaN stays NaN), so underflow = nnz(x) − nnz(q)
            over, nonzero, kept = torch.stack([torch.count_nonzero(a > top), torch.count_nonzero(x),
                                               torch.count_nonzero(q)]).tolist()
            into["values"] += x.numel()
            into["overflow"] += over
            into["nonzero"] += nonzero
            into["underflow"] += nonzero - kept
            into["max_abs"] = max(into["max_abs"], float(a.max()))

    @staticmethod
    def fractions(tally: dict) -> tuple[float, float]:
        """(overflow fraction of all values, underflow fraction of the nonzero values) of a tally."""
        over = tally["overflow"] / tally["values"] if tally["values"] else 0.0
        under = tally["underflow"] / tally["nonzero"] if tally["nonzero"] else 0.0
        return over, under


def _cast_tensors(value, fmt: str, stats: CastStats):
    """``value`` with every floating tensor in it (a tensor, or a list / tuple of them) cast; other values as is."""
    if isinstance(value, torch.Tensor):
        if not value.is_floating_point():
            return value
        q = fp8_round(value, fmt)
        stats.count(value, q, stats.activations)
        return q
    if isinstance(value, list | tuple):
        return type(value)(_cast_tensors(v, fmt, stats) for v in value)
    return value


def _linear_weights(model: nn.Module) -> tuple[list[nn.Module], list[nn.Parameter]]:
    """The modules whose inputs are cast (linear layers, attention modules and gated units: :data:`_PROJECTIONS`) and
    the parameters cast (their weights, the embedding tables), each once (a tied head shares the token table)."""
    modules, params, seen = [], [], set()

    def add(p):
        if p is not None and id(p) not in seen:
            seen.add(id(p))
            params.append(p)

    for m in model.modules():
        if isinstance(m, nn.Linear):
            modules.append(m)
            add(m.weight)
        elif isinstance(m, nn.Embedding):
            add(m.weight)
        else:
            direct = dict(m.named_parameters(recurse=False))
            for names in _PROJECTIONS:
                if all(name in direct for name in names):
                    modules.append(m)
                    for name in names:
                        add(direct[name])
                    break
    return modules, params


@contextlib.contextmanager
def fp8_direct_cast(model: nn.Module, fmt: str):
    """Within the block, ``model`` computes with FP8 direct casting in format ``fmt`` (module docstring: linear
    layers' and attention projections' weights and inputs, embedding tables; no scaling, saturation at the format's
    max). Yields a :class:`CastStats` that the forward passes inside the block fill. On exit, however the block ends,
    the hooks are removed and every weight is restored bit for bit (the originals are kept as copies meanwhile)."""
    fmt = check_fp8_format(fmt)
    if fmt is None:
        raise ValueError("fp8_direct_cast needs a format: e4m3 or e5m2")
    stats = CastStats(fmt)
    modules, params = _linear_weights(model)
    originals = [p.detach().clone() for p in params]
    handles = []

    def pre_hook(module, args, kwargs):
        return _cast_tensors(args, fmt, stats), {k: _cast_tensors(v, fmt, stats) for k, v in kwargs.items()}

    try:
        with torch.no_grad():
            for p in params:
                q = fp8_round(p.detach(), fmt)
                stats.count(p.detach(), q, stats.weights)
                p.copy_(q)
        for m in modules:
            handles.append(m.register_forward_pre_hook(pre_hook, with_kwargs=True))
        yield stats
    finally:
        for h in handles:
            h.remove()
        with torch.no_grad():
            for p, original in zip(params, originals, strict=True):
                p.copy_(original)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _validation(model, batches: list[Batch], device: torch.device, is_images: bool) -> dict:
    """:func:`sigprop.train.evaluation.evaluate` in float32, a value that is not finite as None."""
    from .evaluation import evaluate

    return {k: _finite(v) for k, v in evaluate(model, batches, device, is_images).items()}


def evaluate_run(run_dir, fp8: str | None, device="cpu", batches: int | None = None) -> dict:
    """The validation loss of the run in ``run_dir`` at its newest checkpoint, in float32 and (``fp8`` "e4m3" or
    "e5m2") with FP8 direct casting (Kedia et al. Table 12; module docstring for the maths).

    The model is rebuilt as :func:`~sigprop.train.resume` rebuilds it: the run's configs from ``run.json``, the
    newest checkpoint checked (SHA-256, model config, every tensor's name and shape, the data it was trained on)
    and loaded into a fresh model, evaluated in eval mode (no dropout) in float32 on ``device`` (default cpu)
    over the run's fixed validation batches: ``batches`` of them (default the run's ``eval_batches``; the whole
    held-out set for images) of the run's ``batch_size``, the same batches the trainer validated on, so the float32
    loss is the run's logged validation loss at that step (for a run trained in float32). The FP8 pass casts the
    same model's weights in place and restores them bit for bit afterwards (:func:`fp8_direct_cast`).

    Assumptions: direct casting uses no scaling factor, so it suits a model whose weights and activations stay
    within the format's range with few values below its resolution (DeepScaleLM's unit-variance activations);
    values beyond the range saturate and are counted. On hardware without FP8 matmuls this simulates the rounding
    only.

    Returns a JSON-ready dict: ``run_dir``, ``checkpoint`` (its file name), ``step``, ``device``, ``batches``,
    ``batch_size``, ``fp32`` ({"val_loss", "val_ppl"} or {"val_loss", "val_acc"}; None for a non-finite value) and,
    with ``fp8``, ``format``, ``fp8_max``, ``fp8_<format>`` (the same keys), ``delta`` (FP8 loss − float32 loss),
    ``activation_overflow_fraction`` (of the activation values cast, those beyond the max, saturated),
    ``underflow_fraction`` (of the nonzero activation values, those that became 0), the same two for the weights
    (``weight_overflow_fraction``, ``weight_underflow_fraction``) and the largest magnitudes met
    (``activation_max_abs``, ``weight_max_abs``). ``ValueError`` (one line) on a folder that is no run, a run
    without a checkpoint, a bad format, device or ``batches``; ``CheckpointError`` on a damaged or foreign
    checkpoint.
    """
    from ..core.devices import check_device
    from ..model.transformer import seeded_model
    from .checkpoint import restore_model
    from .data import make_data
    from .run_dir import newest_checkpoint

    fmt = check_fp8_format(fp8)
    if batches is not None and (isinstance(batches, bool) or not isinstance(batches, int) or batches < 1):
        raise ValueError(f"batches must be an integer >= 1 (got {batches!r})")
    run_dir = Path(run_dir)
    model_config, train_config, path = newest_checkpoint(run_dir, "evaluate")
    dev = check_device(device if device is not None else "cpu")
    model = seeded_model(model_config, train_config.seed, masks=False)
    data = make_data(model_config, train_config)
    ck = restore_model(path, model, model_config, data.meta())
    model.to(dev).eval()
    n = train_config.eval_batches if batches is None else batches
    val = data.val_batches(n, train_config.batch_size)
    out = {"run_dir": str(run_dir), "checkpoint": path.name, "step": ck.step, "device": str(dev), "batches": len(val),
           "batch_size": train_config.batch_size, "fp32": _validation(model, val, dev, data.is_images)}
    if fmt is None:
        return out
    with fp8_direct_cast(model, fmt) as stats:
        low = _validation(model, val, dev, data.is_images)
    a_over, a_under = CastStats.fractions(stats.activations)
    w_over, w_under = CastStats.fractions(stats.weights)
    base, cast = out["fp32"]["val_loss"], low["val_loss"]
    out.update({"format": fmt, "fp8_max": torch.finfo(FP8_FORMATS[fmt]).max, f"fp8_{fmt}": low,
                "delta": cast - base if base is not None and cast is not None else None,
                "activation_overflow_fraction": a_over, "underflow_fraction": a_under,
                "weight_overflow_fraction": w_over, "weight_underflow_fraction": w_under,
                "activation_max_abs": _finite(stats.activations["max_abs"]),
                "weight_max_abs": _finite(stats.weights["max_abs"])})
    return out
