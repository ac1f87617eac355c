"""Measurement engine: the forward and gradient statistics of a real model at every site, recorded with hooks.

A *site* (:mod:`sigprop.core.moments`) is a tensor x of shape (batch, tokens, hidden) inside the model: the
embedding output (layer −1, site ``"input"``), a transformer layer's output (``"layer"``) or a branch's output before
its residual scale and add (``"attn"``, ``"ffn"``, ``"cross"``). A model exposes them through the *site protocol*:
``model.sites()`` returns an ordered list of ``(layer, site, module)`` and the site's tensor is that module's forward
output. Any other model (a Hugging Face model of any family, a user's own module) has its sites found from its stack
of blocks, the first block's input read by a pre-hook (:mod:`sigprop.measurement.discover`), and its batch and loss
read through its adapter (:mod:`sigprop.measurement.adapters`). At every site we record the statistics of
:mod:`sigprop.core.stats`, restricted to the real (non-padding) tokens:

* mean  μ = Σ m_bt x_btj / n,                       n = D Σ_b T_b      (T_b = real tokens of sequence b),
* var   σ² = Σ m_bt (x_btj − μ)² / n,
* corr  r = [Σ_{b,j} Σ_{t≠s real} (x_btj − μ)(x_bsj − μ) / n_pairs] / σ²,   n_pairs = D Σ_b T_b (T_b − 1),

and the same var and corr of g = ∂Loss/∂x, exactly as autograd delivers it (no rescaling; the gradient of a
mean-reduced loss carries the 1/(number of loss terms) factor). Token pairs are formed only among the real tokens
of one sequence; statistics pool all batch elements, hidden units, forward passes, batches and model seeds (the
estimator is a ratio of pooled sums, not a mean of per-batch ratios). These are the per-layer quantities that
Kedia et al. Sec. 2.3 (Figures 1–3, a 192-layer model) propagate and Sec. 2.4 / App. D verify by simulation.

Everything is computed on the fly from additive sums (no activation is stored). For a centre c (the mean of one
sequence, subtracted in the tensor's dtype so that float sums see no cancellation) and y = m·(x − c), m the
padding mask, the hooks keep, per pass, in float64:

    n, s1 = Σ y, s2 = Σ y², token_pairs = Σ_{b,j} [(Σ_t y_btj)² − Σ_t y_btj²] = Σ_{b,j} Σ_{t≠s} y_bt y_bs,
    n_pairs, w1 = Σ_b (T_b − 1) Σ_{t,j} y_btj.

``w1`` makes the sums of passes with different centres (and padding) poolable exactly: moving the centre to c'
(δ = c − c', y' = y + δ on real tokens) gives s1' = s1 + nδ, s2' = s2 + 2δ s1 + nδ², token_pairs' = token_pairs +
2δ w1 + n_pairs δ² and w1' = w1 + δ n_pairs (because Σ_{t≠s} y_t = (T_b − 1) Σ_t y_t). Pooled sums are centred on
the pooled mean (s1 = 0: needed with padding, where Σ_{t≠s} y_t / n_pairs ≠ s1/n) and handed to
:class:`sigprop.core.stats.MomentSums`, whose ``mean``/``var``/``corr`` define the numbers.

Cost: per site and direction one subtraction, one token-sum and one square-sum over the tensor (plus a mask
multiply when there is padding) and the mean of one sequence: five operations (:func:`_raw_sums`). The float64
bookkeeping (promotion, token pairs, counts) is deferred and done for thousands of records at once
(:func:`_finish`), since on small tensors a hook's cost is the fixed cost per operation. No host synchronisation
inside hooks (sums stay device tensors until :meth:`Recorder.profile`), so GPU work stays asynchronous.
``bench/bench_measure.py`` reports the overhead as a ratio to a plain forward + backward.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, cast

import torch
from torch import nn

from ..core.profile import Profile, Row
from ..core.stats import MomentSums
from ..model.batch import Batch
from .adapters import adapt
from .discover import InputOf

if TYPE_CHECKING:
    pass

__all__ = [
    "NO_GRADIENT_MEASURED",
    "TokenSums",
    "SiteSums",
    "masked_sums",
    "pool_sums",
    "merge_sums",
    "profile_from_sums",
    "Recorder",
    "measure",
]

#: ``meta["grad_source"]`` of a measurement whose loss did not require grad (frozen weights, inference mode): its
#: gradient statistics are NaN because none was computed.
NO_GRADIENT_MEASURED = "not computed (the loss does not require grad: frozen weights or inference mode)"

#: Layout of the packed float64 vector behind a :class:`TokenSums`.
FIELDS = ("center", "n", "s1", "s2", "token_pairs", "n_token_pairs", "w1")
_C, _N, _S1, _S2, _TP, _NTP, _W1 = range(len(FIELDS))


@dataclass(frozen=True)
class TokenSums:
    """Additive sums of one tensor's real tokens about a centre (see the module docstring), packed in ``data``.

    ``data`` is a float64 tensor of shape (7,) in the order of :data:`FIELDS`; it may live on any device. ``+``
    pools two sums (re-centring both on the pooled mean, exact in float64); :meth:`to_moment_sums` hands them to
    :class:`sigprop.core.stats.MomentSums`, which defines mean, var and corr.
    """

    data: torch.Tensor

    def __post_init__(self) -> None:
        if self.data.shape != (len(FIELDS),):
            raise ValueError(f"TokenSums.data must have shape ({len(FIELDS)},), got {tuple(self.data.shape)}")

    def __getattr__(self, name: str) -> torch.Tensor:
        if name in FIELDS:
            return self.data[FIELDS.index(name)]
        raise AttributeError(name)

    def __add__(self, other: TokenSums) -> TokenSums:
        if not isinstance(other, TokenSums):
            return NotImplemented
        return pool_sums([self, other])

    def to(self, device: torch.device | str | None) -> TokenSums:
        return TokenSums(self.data.to(device))

    def to_moment_sums(self) -> MomentSums:
        """As :class:`~sigprop.core.stats.MomentSums`, centred on the mean first (hidden-pair sums are not recorded)."""
        d = _pool_rows(self.data.detach().to("cpu", torch.float64)[None])
        return MomentSums(center=d[_C], n=float(d[_N]), s1=d[_S1], s2=d[_S2], token_pairs=d[_TP],
                          n_token_pairs=float(d[_NTP]), hidden_pairs=torch.zeros((), dtype=torch.float64),
                          n_hidden_pairs=math.nan)

    def statistics(self) -> tuple[float, float, float]:
        """(mean, var, corr) as floats; NaN without real tokens (corr: without two real tokens in a sequence)."""
        mean, var, corr = _statistics(self.data.detach().to("cpu")).tolist()
        return mean, var, corr

    def mean(self) -> float:
        return self.statistics()[0]

    def var(self) -> float:
        return self.statistics()[1]

    def corr(self) -> float:
        """Token-to-token correlation (NaN when no sequence has two real tokens)."""
        return self.statistics()[2]


class SiteSums(NamedTuple):
    """The sums of one site: forward tensor and gradient (``None`` where nothing was recorded)."""

    fwd: TokenSums | None
    grad: TokenSums | None


def _pool_groups(rows: torch.Tensor, groups: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Pool packed sums (k, 7) by group (k,) into (n_groups, 7), each centred on its pooled mean (module
    docstring's re-centring); a group without real tokens comes out NaN. Vectorised: a fixed number of ops.

    Also for single rows: :class:`~sigprop.core.stats.MomentSums` takes Σ_{t≠s} y_t / n_pairs to be the mean s1/n, true
    for equal lengths but not with padding, unless the sums are centred (s1 = 0, the mean then sits in the centre).
    """
    c, n, s1, s2, tp, ntp, w1 = rows.unbind(-1)

    def gsum(v: torch.Tensor) -> torch.Tensor:
        return torch.zeros(n_groups, dtype=v.dtype, device=v.device).index_add_(0, groups, v)

    n_tot = gsum(n)
    centre = gsum(c * n + s1) / n_tot
    d = c - centre[groups]
    return torch.stack([centre, n_tot, gsum(s1 + n * d), gsum(s2 + 2 * d * s1 + n * d * d),
                        gsum(tp + 2 * d * w1 + ntp * d * d), gsum(ntp), gsum(w1 + d * ntp)], -1)


def _pool_rows(rows: torch.Tensor) -> torch.Tensor:
    """Pool packed sums (k, 7) into one (7,) centred on the pooled mean."""
    return _pool_groups(rows, torch.zeros(rows.shape[0], dtype=torch.long, device=rows.device), 1)[0]


def pool_sums(sums: Iterable[TokenSums]) -> TokenSums:
    """Pool several :class:`TokenSums` (batches, passes, seeds) into one, centred on the pooled mean."""
    rows = [s.data for s in sums]
    if not rows:
        raise ValueError("pool_sums: need at least one TokenSums")
    dev = rows[0].device
    return TokenSums(_pool_rows(torch.stack([r.to(dev) for r in rows])))


class _Mask:
    """A padding mask (batch, tokens), True = real token, with the derived tensors cached per (device, dtype, hidden).

    Cached: sequence 0's mask divided by its number of real elements (for the centre), the padding as a bool
    (batch, tokens, 1) (True = padded), n = D Σ_b T_b and n_pairs = D Σ_b T_b (T_b − 1) in float64, and the
    (2, batch) matrix [1; T_b − 1] that turns per-sequence sums into (s1, w1) in one product. Computing them costs
    a few tiny ops once per mask, never a host sync.
    """

    def __init__(self, mask: torch.Tensor) -> None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() != 2:
            got = f"{mask.dtype} tensor of shape {tuple(mask.shape)}" if isinstance(mask, torch.Tensor) else type(mask)
            raise ValueError(f"mask must be a bool tensor of shape (batch, tokens), True = real token (got {got})")
        self.mask = mask.detach()
        self.shape = tuple(mask.shape)
        self._cache: dict = {}

    def get(self, device: torch.device | str | None, dtype: torch.dtype | None,
            d: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        key = (device, dtype, d)
        if key not in self._cache:
            m = self.mask.to(device)
            lengths = m.sum(1, dtype=torch.float64)  # T_b
            mf = m.to(dtype)
            n = lengths.sum() * d
            weights = torch.stack([torch.ones_like(lengths), lengths - 1])
            centre_weights = mf[0] / (lengths[0] * d).clamp(min=1).to(dtype)  # mean of sequence 0's real tokens
            self._cache[key] = (centre_weights, (~m).unsqueeze(-1), n, (lengths * (lengths - 1)).sum() * d, weights)
        return self._cache[key]


def _work_dtype(x: torch.Tensor) -> torch.Tensor:
    # float32 / float64 are reduced in their own dtype (as stats.moment_sums); half types would lose the sums, so
    # they are promoted to float32 (one extra pass).
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


#: Queued token-sum elements (Σ over records of batch × hidden) at which a Recorder finishes its queue: 16 MB of
#: float32, small beside the activations whose statistics they are (a record is 1/tokens of its tensor).
_FLUSH_ELEMENTS = 1 << 22


class _Raw(NamedTuple):
    """What a hook keeps of one tensor (module docstring): the centre c, the token sums Σ_t y (batch, hidden) and
    Σ y², still in the tensor's work dtype and on its device; :func:`_finish` turns a list of them into packed rows."""

    center: torch.Tensor
    col: torch.Tensor
    s2: torch.Tensor
    mask: _Mask | None
    tokens: int


def _raw_sums(x: torch.Tensor, mask: _Mask | None, scratch: dict | None = None) -> _Raw:
    """The part of x's sums (batch, tokens, hidden) that reads the whole tensor; no host synchronisation.

    The centre c is the mean of the first sequence's real tokens (0 if it has none), read from 1/B of the tensor:
    centring only has to bring c within O(σ) of the mean for the float sums to be free of cancellation, and the
    recorded sums are exact for any c (module docstring). Elementwise work and the reductions over the tensor stay
    in x's dtype (torch's reductions are pairwise: ~1e-7 relative in float32); no matmul touches x (TF32 would round
    the token sums). Five tensor operations (six with a mask), four of them over the whole tensor: everything else
    (promotion to float64, the token-pair sum, the counts) is batched over many records in :func:`_finish`, because
    on small tensors the fixed cost per operation, not the arithmetic, dominates a hook. ``scratch`` (a dict kept
    by the caller) holds two reusable tensor-sized buffers per (shape, dtype, device): on CPU this spares the
    allocator's page faults (GPU callers pass None: the caching allocator is cheap there, and a buffer shared between
    streams could race).
    """
    x = _work_dtype(x.detach())
    b, t, d = x.shape
    buf1 = buf2 = None
    if scratch is not None:
        key = (x.shape, x.dtype, x.device)
        if key not in scratch:
            scratch[key] = (torch.empty_like(x, memory_format=torch.contiguous_format),
                            torch.empty_like(x, memory_format=torch.contiguous_format))
        buf1, buf2 = scratch[key]
    if mask is None:
        c = x[0].mean()
        y = torch.sub(x, c, out=buf1)
    else:
        if mask.shape != (b, t):
            raise ValueError(f"mask has shape {mask.shape} but the site tensor has (batch, tokens) = {(b, t)}")
        centre_weights, padded = mask.get(x.device, x.dtype, d)[:2]
        # filled, not multiplied by the mask: a padded position's value may be anything, NaN included (a row whose
        # keys are all masked), and enters no sum
        c = torch.dot(x[0].sum(-1).masked_fill(padded[0, :, 0], 0.0), centre_weights)
        y = torch.sub(x, c, out=buf1).masked_fill_(padded, 0.0)  # m·(x − c)
    return _Raw(c, y.sum(1), torch.mul(y, y, out=buf2).sum(), mask, t)


def _finish(raws: list[_Raw]) -> torch.Tensor:
    """Packed float64 sums (k, 7) of k raw records, in their order, on the first record's device.

    Records are grouped by (shape, dtype, device, mask, tokens) and each group costs a fixed dozen operations on
    stacked tensors, whatever its size: s1 = Σ_b Σ_j col_bj, w1 = Σ_b (T_b − 1) Σ_j col_bj, token_pairs =
    Σ col² − s2 (all in float64), n and n_pairs from the mask (or from the shape without one).
    """
    f64 = torch.float64
    dev = raws[0].col.device
    groups: dict = {}
    for i, r in enumerate(raws):
        groups.setdefault((r.col.shape, r.col.dtype, r.col.device, id(r.mask), r.tokens), []).append(i)
    out = torch.empty(len(raws), len(FIELDS), dtype=f64, device=dev)
    for idx in groups.values():
        first = raws[idx[0]]
        col = torch.stack([raws[i].col for i in idx]).to(f64)  # (k, batch, hidden)
        s2 = torch.stack([raws[i].s2 for i in idx]).to(f64)
        center = torch.stack([raws[i].center for i in idx]).to(f64)
        k, b, d = col.shape
        per_seq = col.sum(2)  # (k, batch): Σ_{t,j} y per sequence
        if first.mask is None:
            t = first.tokens
            n = torch.full_like(s2, float(b * t * d))
            ntp = torch.full_like(s2, float(b * d * t * (t - 1)))
            s1 = per_seq.sum(1)
            w1 = (t - 1) * s1
        else:
            _, _, n_mask, ntp_mask, weights = first.mask.get(first.col.device, first.col.dtype, d)
            n, ntp = n_mask.expand(k), ntp_mask.expand(k)
            s1, w1 = (per_seq @ weights.T).unbind(-1)
        rows = torch.stack([center, n, s1, s2, col.square().sum((1, 2)) - s2, ntp, w1], -1)
        out[torch.tensor(idx, device=dev)] = rows.to(dev)
    return out


def _packed(x: torch.Tensor, mask: _Mask | None, scratch: dict | None = None) -> torch.Tensor:
    """The packed sums (7,) float64 of x (batch, tokens, hidden) over the real tokens: :func:`_raw_sums` then
    :func:`_finish` on the one record."""
    return _finish([_raw_sums(x, mask, scratch)])[0]


def masked_sums(x: torch.Tensor, mask: torch.Tensor | None = None) -> TokenSums:
    """The sums of x (batch, tokens, hidden) over its real tokens (``mask`` (batch, tokens) bool, True = real).

    The masked counterpart of :func:`sigprop.core.stats.moment_sums` (module docstring for the definitions): padded
    tokens enter no sum, and token pairs are formed only among the real tokens of one sequence. Without a mask the
    mean, var and corr equal those of ``moment_sums(x)`` (up to rounding).
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(f"x must be a tensor of shape (batch, tokens, hidden), got {getattr(x, 'shape', type(x))}")
    with torch.no_grad():
        return TokenSums(_packed(x, None if mask is None else _Mask(mask)))


def merge_sums(*dicts: Mapping[tuple[int, str], SiteSums]) -> dict[tuple[int, str], SiteSums]:
    """Pool several ``Recorder.sums`` dicts (batches, seeds) site by site; the key order of first appearance is kept."""
    out: dict = {}
    for dct in dicts:
        for key, ss in dct.items():
            if key not in out:
                out[key] = ss
                continue
            prev = out[key]
            out[key] = SiteSums(*(a if b is None else b if a is None else a + b
                                  for a, b in zip(prev, ss, strict=True)))
    return out


#: What a recorder reads its sites from: a model, or its (layer, site, module) list.
_SitesOrModel = nn.Module | Sequence[tuple[int, str, nn.Module | InputOf]]
#: A padding mask for every site, or one per (layer, site) key.
_MaskArg = torch.Tensor | Mapping[tuple[int, str], torch.Tensor | None] | None
Site = tuple[int, str]


def _finite(v: float) -> float:
    return v if math.isfinite(v) else math.nan


def _statistics(table: torch.Tensor) -> torch.Tensor:
    """(..., 7) packed sums → (..., 3) mean, var, corr through :class:`~sigprop.core.stats.MomentSums` (batched: its
    counts are tensors here), after centring each on its mean; NaN where there are no real tokens / token pairs."""
    flat = table.reshape(-1, len(FIELDS)).to(torch.float64)
    k = flat.shape[0]
    d = _pool_groups(flat, torch.arange(k, device=flat.device), k)
    ms = MomentSums(center=d[:, _C], n=d[:, _N], s1=d[:, _S1], s2=d[:, _S2], token_pairs=d[:, _TP],
                    n_token_pairs=d[:, _NTP], hidden_pairs=torch.zeros_like(d[:, _C]), n_hidden_pairs=math.nan)
    has = d[:, _N] > 0
    nan = torch.full_like(d[:, _C], math.nan)
    out = torch.stack([torch.where(has, ms.mean(), nan), torch.where(has, ms.var(), nan),
                       torch.where(has & (d[:, _NTP] > 0), ms.corr(), nan)], -1)
    return out.reshape(table.shape[:-1] + (3,))


def profile_from_sums(sums: Mapping[tuple[int, str], SiteSums], config: dict | None = None,
                      meta: dict | None = None) -> Profile:
    """A measured :class:`~sigprop.core.profile.Profile` from per-site sums: one row per (layer, site), NaN where
    nothing
    was recorded (e.g. no gradient reached the site). Vectorised over sites; one device-to-host copy."""
    keys = list(sums)
    nan_row = torch.full((len(FIELDS),), math.nan, dtype=torch.float64)
    packed = [nan_row if part is None else part.data.detach().to("cpu", torch.float64)
              for key in keys for part in sums[key]]
    stats = _statistics(torch.stack(packed).reshape(len(keys), 2, len(FIELDS))).tolist() if keys else []
    rows = []
    for (layer, site), ((mean, var, corr), (_, gvar, gcorr)) in zip(keys, stats, strict=True):
        rows.append(Row(int(layer), str(site), fwd_mean=_finite(mean), fwd_var=_finite(var), fwd_corr=_finite(corr),
                        grad_var=_finite(gvar), grad_corr=_finite(gcorr)))
    return Profile("measured", dict(config or {}), tuple(rows), dict(meta or {}))


def _resolve_sites(model_or_sites: _SitesOrModel) -> tuple[list[tuple[int, str, nn.Module | InputOf]],
                   nn.Module | None]:
    """The validated sites of a model (its ``sites()``, or found from its block stacks:
    :func:`~sigprop.measurement.adapters.adapt`) or of an explicit list of ``(layer, site, module)`` tuples."""
    if callable(getattr(model_or_sites, "sites", None)):
        model, sites = cast(nn.Module, model_or_sites), list(cast(Any, model_or_sites).sites())  # sigprop's
    elif isinstance(model_or_sites, nn.Module):
        model, sites = model_or_sites, adapt(model_or_sites).sites
    else:
        model, sites = None, list(model_or_sites)
    seen_mod, seen_key = set(), set()
    out = []
    for entry in sites:
        if not (isinstance(entry, tuple) and len(entry) == 3 and isinstance(entry[2], nn.Module | InputOf)):
            raise ValueError(f"sites must be (layer: int, site: str, module: nn.Module) tuples (got {entry!r})")
        layer, site, module = entry
        if isinstance(layer, bool) or not isinstance(layer, int) or layer < -1:
            raise ValueError(f"site layer must be an integer >= -1 (got {layer!r})")
        if not isinstance(site, str) or not site:
            raise ValueError(f"site name must be a non-empty string (got {site!r})")
        ident = (type(module), id(module.module if isinstance(module, InputOf) else module))
        if ident in seen_mod:
            raise ValueError(f"site ({layer}, {site!r}): a module may appear at most once in sites()")
        if (layer, site) in seen_key:
            raise ValueError(f"site ({layer}, {site!r}) appears twice in sites()")
        seen_mod.add(ident)
        seen_key.add((layer, site))
        out.append((layer, site, module))
    return out, model


def _model_config(model: nn.Module | None) -> dict[str, Any]:
    cfg = getattr(model, "config", None)
    if cfg is None:
        return {}
    if hasattr(cfg, "to_dict"):
        return dict(cfg.to_dict())
    return dict(cfg) if isinstance(cfg, Mapping) else {}


class Recorder:
    """Context manager that records the statistics of every site of a model on the fly.

    On ``__enter__`` every site module gets a forward hook; each call adds the sums of its output (under
    ``torch.no_grad``) and, when ``grads`` and the output requires grad, registers a tensor hook
    (``output.register_hook``) that adds the sums of ∂Loss/∂output when backward reaches it. The hooks leave the
    output unchanged and are removed on exit (also on an exception); on exit the tensor hooks of outputs whose
    backward has not run yet are removed too. sigprop's containers call their children through
    ``nn.Module.__call__``, so module hooks fire. What :func:`sigprop.measure` runs; use a recorder directly around
    your own ``loss.backward()``.

    Sums accumulate over any number of forward / backward passes; :meth:`set_mask` changes masks between forwards
    (the mask in force at a forward also applies to that forward's gradients); recorders (``+``, :meth:`merge`) and
    their :attr:`sums` dicts (:func:`merge_sums`) pool. A recorder may be entered again later (it keeps
    accumulating); :meth:`reset` clears it; :meth:`profile` gives the measured profile.

    Assumes: each site module's output is a (batch, tokens, hidden) tensor that is not modified in place later; a
    module called several times per forward (weight sharing) pools its calls; under activation checkpointing the
    recomputed forward would be recorded twice (not supported). Sums stay device tensors until :meth:`profile`.

    Args:
        model_or_sites: a model (sigprop's, through its ``sites()``; any other, a Hugging Face model or a user's
            own, through its stack of blocks: :mod:`sigprop.measurement.discover`) or the list of
            ``(layer, site, module)`` itself (a module wrapped in :class:`~sigprop.measurement.discover.InputOf` is
            read at its input).
        mask: bool (batch, tokens), True = real token, excluding padding at every site, or a mapping
            ``{(layer, site): mask}`` giving some sites their own (an encoder–decoder's decoder).
        grads: whether to record the gradients too.
        model: the model whose ``config`` :meth:`profile` records (default: ``model_or_sites`` when it is a model).
        collect_outputs: also keep, while entered, every site output whose gradient is recorded, for the caller to
            take the gradient with respect to them (:meth:`take_outputs`; :func:`measure`'s
            ``torch.autograd.grad``).

    Attributes:
        keys: the (layer, site) keys in recording order.
        n_passes: (forward, gradient) records of the site recorded most often.
        sums: pooled sums per (layer, site) (:class:`~sigprop.measurement.hooks.SiteSums`).

    Raises:
        ValueError: a model without a stack of blocks and no sites, or malformed ``(layer, site, module)`` tuples.
        RuntimeError: entering a recorder that is already active.

    Example:
        >>> import torch, sigprop
        >>> config = sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8)
        >>> model = sigprop.Transformer(config)
        >>> batch = sigprop.make_batch(config, torch.randint(5, 64, (2, 8)))
        >>> with sigprop.Recorder(model) as recorder:
        ...     model.loss(batch).backward()
        >>> recorder.n_passes
        (1, 1)
        >>> profile = recorder.profile()
        >>> profile.kind, len(profile.site("layer")), profile.site("layer")[0].grad_var > 0
        ('measured', 2, True)
    """

    def __init__(self, model_or_sites: _SitesOrModel, mask: _MaskArg = None, grads: bool = True, *,
                 model: nn.Module | None = None, collect_outputs: bool = False) -> None:
        self._sites, self._model = _resolve_sites(model_or_sites)
        if model is not None:
            self._model = model
        self._collect_outputs = bool(collect_outputs)
        self._grads = bool(grads)
        self._fwd: dict[tuple[int, str], list[torch.Tensor]] = {(l, s): [] for l, s, _ in self._sites}
        self._grad: dict[tuple[int, str], list[torch.Tensor]] = {(l, s): [] for l, s, _ in self._sites}
        self._mask: _Mask | None = None
        self._site_masks: dict[tuple[int, str], _Mask | None] = {}
        self._masked_any = False
        self._module_handles: list = []
        self._tensor_handles: list = []
        self._collect: list[torch.Tensor] | None = None
        self._scratch: dict = {}  # reusable CPU buffers of _raw_sums, freed on exit
        self._pending: list[tuple[list[torch.Tensor], _Raw]] = []  # hook records not yet finished (_defer)
        self._pending_elements = 0
        self._active = False
        if isinstance(mask, Mapping):
            for key, m in mask.items():
                self.set_mask(m, keys=[key])
        else:
            self.set_mask(mask)

    # -- hooks ------------------------------------------------------------------------------------------------
    def __enter__(self) -> Recorder:
        if self._active:
            raise RuntimeError("this Recorder is already active")
        self._active = True
        self._collect = [] if self._collect_outputs else None
        try:
            for layer, site, module in self._sites:
                if isinstance(module, InputOf):
                    handle = module.module.register_forward_pre_hook(self._input_hook((layer, site)),
                                                                     with_kwargs=True)
                else:
                    handle = module.register_forward_hook(self._hook((layer, site)))
                self._module_handles.append(handle)
        except BaseException:
            self._remove_hooks()
            raise
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self._remove_hooks()
        self._flush()
        return False

    def _remove_hooks(self) -> None:
        for h in (*self._module_handles, *self._tensor_handles):
            h.remove()
        self._module_handles, self._tensor_handles = [], []
        self._collect = None
        self._scratch = {}
        self._active = False

    def _hook(self, key: Site) -> Callable[[nn.Module, tuple[Any, ...], Any], None]:
        store_fwd, store_grad = self._fwd[key], self._grad[key]

        def record(module: nn.Module, args: tuple[Any, ...], out: Any) -> None:
            self._record(key, out, store_fwd, store_grad)

        return record

    def _input_hook(self, key: Site) -> Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], None]:
        store_fwd, store_grad = self._fwd[key], self._grad[key]

        def record(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            x = next((a for a in args if isinstance(a, torch.Tensor)), kwargs.get("hidden_states"))
            if x is None:  # the stream passed by another keyword: the block's first (batch, tokens, hidden) tensor
                x = next((v for v in kwargs.values() if isinstance(v, torch.Tensor) and v.dim() == 3), None)
            if x is None:
                raise ValueError(f"site {key}: no (batch, tokens, hidden) tensor among the first block's arguments "
                                 f"({', '.join(kwargs) or 'none'}); pass sites=")
            self._record(key, x, store_fwd, store_grad)

        return record

    def _record(self, key: Site, out: Any, store_fwd: list[torch.Tensor], store_grad: list[torch.Tensor]) -> None:
        if isinstance(out, tuple | list) and out and isinstance(out[0], torch.Tensor):
            out = out[0]  # a block returning (hidden states, attention weights, …), as Hugging Face's did
        if isinstance(out, torch.Tensor) and out.is_nested:  # torch's encoder fast path drops padded positions
            raise ValueError(f"site {key}: the block returned a nested tensor (nn.TransformerEncoder's fast path on "
                             "a padded batch without gradients); build it with enable_nested_tensor=False, or "
                             "measure with gradients")
        if not isinstance(out, torch.Tensor) or out.dim() != 3:
            raise ValueError(f"site {key}: the module output must be a (batch, tokens, hidden) tensor "
                             f"(got {getattr(out, 'shape', type(out))})")
        mask = self._site_masks.get(key, self._mask)
        if mask is not None and mask.shape != tuple(out.shape[:2]):
            raise ValueError(f"site {key}: mask has shape {mask.shape} but the site tensor has (batch, tokens) = "
                             f"{tuple(out.shape[:2])}")
        scratch = self._scratch if out.device.type == "cpu" else None
        with torch.no_grad():
            self._defer(store_fwd, _raw_sums(out, mask, scratch))
        if self._grads and out.requires_grad:

            def grad_hook(g: torch.Tensor) -> None:
                with torch.no_grad():
                    self._defer(store_grad, _raw_sums(g, mask, scratch))

            self._tensor_handles.append(out.register_hook(grad_hook))
            if self._collect is not None:
                self._collect.append(out)

    def take_outputs(self) -> list[torch.Tensor]:
        """The site outputs collected since entering or since the last call (``collect_outputs``), handed over: the
        recorder keeps no reference to them. [] without ``collect_outputs`` or outside the ``with`` block."""
        outs = self._collect or []
        if self._collect is not None:
            self._collect = []
        return outs

    def _defer(self, store: list, raw: _Raw) -> None:
        """Queue a hook's raw sums for ``store``; they are finished in batches (:func:`_finish`) once the queue holds
        ``_FLUSH_ELEMENTS`` token-sum elements and whenever results are read, so that the fixed cost of the small
        float64 operations is paid per batch of records, not per hook call."""
        self._pending.append((store, raw))
        self._pending_elements += raw.col.numel()
        if self._pending_elements >= _FLUSH_ELEMENTS:
            self._flush()

    def _flush(self) -> None:
        pending, self._pending, self._pending_elements = self._pending, [], 0
        if pending:
            for (store, _), row in zip(pending, _finish([raw for _, raw in pending]), strict=True):
                store.append(row)

    def set_mask(self, mask: torch.Tensor | None, keys: Iterable[Sequence[Any]] | None = None) -> None:
        """Use ``mask`` (bool (batch, tokens), True = real token; ``None`` = every token real) from the next forward
        on: at every site (clearing per-site masks) or, with ``keys``, only at those (layer, site) keys."""
        m = None if mask is None else _Mask(mask)
        if keys is None:
            self._mask, self._site_masks = m, {}
        else:
            for key in keys:
                key = tuple(key)
                if key not in self._fwd:
                    raise ValueError(f"set_mask: unknown site {key}; the sites are {self.keys}")
                self._site_masks[key] = m
        self._masked_any = self._masked_any or m is not None

    def reset(self) -> None:
        """Forget everything recorded so far."""
        self._pending, self._pending_elements = [], 0
        for lst in (*self._fwd.values(), *self._grad.values()):
            lst.clear()

    # -- results ----------------------------------------------------------------------------------------------
    @property
    def keys(self) -> list[tuple[int, str]]:
        """The (layer, site) keys in recording order."""
        return list(self._fwd)

    def forward_counts(self) -> dict[tuple[int, str], int]:
        """(layer, site) → how many forward records it holds (one per call of its module)."""
        self._flush()
        return {key: len(records) for key, records in self._fwd.items()}

    @property
    def n_passes(self) -> tuple[int, int]:
        """(forward, gradient) records of the site recorded most often."""
        self._flush()
        return (max((len(v) for v in self._fwd.values()), default=0),
                max((len(v) for v in self._grad.values()), default=0))

    @property
    def sums(self) -> dict[tuple[int, str], SiteSums]:
        """Pooled sums per (layer, site), all sites pooled in one vectorised step (on the first record's device)."""
        self._flush()
        lists = [lst for k in self._fwd for lst in (self._fwd[k], self._grad[k])]
        rows = [r for lst in lists for r in lst]
        if not rows:
            return {k: SiteSums(None, None) for k in self._fwd}
        dev = rows[0].device
        groups = torch.tensor([g for g, lst in enumerate(lists) for _ in lst], dtype=torch.long, device=dev)
        pooled = _pool_groups(torch.stack([r.to(dev) for r in rows]), groups, len(lists))
        parts = [TokenSums(pooled[g]) if lst else None for g, lst in enumerate(lists)]
        return {k: SiteSums(parts[2 * i], parts[2 * i + 1]) for i, k in enumerate(self._fwd)}

    def merge(self, other: Recorder | Mapping[tuple[int, str], SiteSums]) -> Recorder:
        """Add another recorder's records (or a ``sums`` dict) to this one, in place; returns ``self``."""
        self._flush()
        if isinstance(other, Recorder):
            other._flush()
            items = [(k, other._fwd[k], other._grad[k]) for k in other._fwd]
            self._masked_any = self._masked_any or other._masked_any
        else:
            items = [(k, [] if ss.fwd is None else [ss.fwd.data], [] if ss.grad is None else [ss.grad.data])
                     for k, ss in other.items()]
        for k, f, g in items:
            self._fwd.setdefault(k, []).extend(f)
            self._grad.setdefault(k, []).extend(g)
        return self

    def __add__(self, other: Recorder) -> Recorder:
        if not isinstance(other, Recorder):
            return NotImplemented
        return Recorder(self._sites, grads=self._grads, model=self._model).merge(self).merge(other)

    def profile(self, config: dict | None = None, meta: dict | None = None) -> Profile:
        """The measured :class:`~sigprop.core.profile.Profile`: a row per site in ``sites()`` order (rows of merged
        sites after), NaN where no forward (all quantities) or no gradient (grad quantities) was recorded.

        ``config`` defaults to ``model.config.to_dict()`` when the recorder was given a model with a config;
        ``meta`` is added to the recorder's own (passes recorded, whether padding was excluded).
        """
        n_fwd, n_grad = self.n_passes
        info = {"engine": "sigprop.measurement", "forward_passes": n_fwd, "gradient_passes": n_grad,
                "padding_excluded": self._masked_any, "grads": self._grads}
        missing = [list(k) for k, v in self._fwd.items() if not v]
        if missing:
            info["sites_not_reached"] = missing
        info.update(meta or {})
        cfg = _model_config(self._model) if config is None else config
        return profile_from_sums(self.sums, cfg, info)


def _token_shapes(batch: Any) -> set[tuple[int, ...]]:
    """The (batch, tokens) shapes of a batch's token ids (the encoder's and the decoder's); empty for images or what
    carries no token ids."""
    if isinstance(batch, Batch):
        tensors = [batch.inputs, batch.decoder_inputs]
    elif isinstance(batch, Mapping):
        tensors = [batch.get("input_ids"), batch.get("decoder_input_ids")]
    else:
        tensors = [batch]
    return {tuple(t.shape) for t in tensors if isinstance(t, torch.Tensor) and t.dim() == 2}


def measure(model: nn.Module, batch: Batch | Mapping[str, Any] | torch.Tensor,
            loss_fn: Callable[[nn.Module, Any], torch.Tensor] | None = None, mask: _MaskArg = None,
            sites: Sequence[tuple[int, str, nn.Module | InputOf]] | None = None, n_repeats: int = 1,
            config: dict | None = None, meta: dict | None = None) -> Profile:
    """Measured profile of ``model`` on ``batch``: ``n_repeats`` forward + backward passes under a :class:`Recorder`.

    Works on any model with a stack of blocks (:mod:`sigprop.measurement.adapters`): a sigprop model, a Hugging Face
    model of any family, a user's own ``nn.Module``.

    Args:
        model: the model, in the train/eval mode the caller set (in train mode each repeat draws new dropout masks:
            repeats then average over them).
        batch: sigprop's batch dict, a Hugging Face batch dict (``input_ids``, ``attention_mask``, ``labels``,
            ``token_type_ids``, ``pixel_values``), a tensor of token ids or a :class:`~sigprop.model.batch.Batch`;
            turned once into a ``Batch`` (a Hugging Face causal LM's unshifted labels are shifted into sigprop's
            convention there).
        loss_fn: ``loss_fn(model, batch) -> scalar tensor``, called with ``batch`` as given. Default: the model's own
            loss (``model.loss`` of a sigprop model; a Hugging Face model's ``outputs.loss`` given the labels), else
            the objective of its head on its logits (next token for a causal LM, with labels derived from the ids
            and padding when the batch has none).
        mask: bool (batch, tokens), True = real token, or ``{(layer, site): mask}``, excluding padding from every
            statistic. Default: the batch's padding mask (``padding_mask`` / ``attention_mask``; an
            encoder–decoder's decoder sites take the decoder's).
        sites: ``(layer, site, module)`` tuples instead of the model's own or the ones found from its blocks.
        n_repeats: forward + backward passes, pooled.
        config: the profile's config (default: the model's ``config.to_dict()``).
        meta: added to the profile's ``meta``.

    Returns:
        The measured :class:`~sigprop.core.profile.Profile`, a row per site.

    Raises:
        ValueError: a model with no stack of blocks and no ``sites`` (or two that tie), a batch with none of the
            known keys, a loss that cannot be taken (no labels for a masked LM, logits of an unknown shape) or is
            not a scalar; a found stack whose blocks run more often than the model (shared across depth, or
            re-run by checkpointing) or return (tokens, batch, hidden) where the batch is (batch, tokens).

    The backward pass is ``torch.autograd.grad(loss, site_outputs)``: it delivers ∂Loss/∂x at every site exactly as
    ``loss.backward()`` would, but computes no parameter gradient, so existing ``.grad`` fields are left untouched
    (neither populated nor cleared) and the backward pass is cheaper. Sites that the loss does not depend on get NaN
    gradient statistics, as do all sites when the loss does not require grad. ``autograd.grad`` returns every site's
    gradient at the end of the pass, so they are held together briefly (~3 (batch, tokens, hidden) tensors per layer,
    while the graph's saved activations are being freed); use a :class:`Recorder` around ``loss.backward()`` where
    that matters.

    Example:
        >>> import torch, sigprop
        >>> config = sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8)
        >>> model = sigprop.Transformer(config)
        >>> ids = torch.randint(5, 64, (2, 8), generator=torch.Generator().manual_seed(0))
        >>> profile = sigprop.measure(model, sigprop.make_batch(config, ids), n_repeats=2)
        >>> [(r.layer, r.site) for r in profile.site("layer")], profile.meta["forward_passes"]
        ([(0, 'layer'), (1, 'layer')], 2)
    """
    if isinstance(n_repeats, bool) or not isinstance(n_repeats, int) or n_repeats < 1:
        raise ValueError(f"n_repeats must be an integer >= 1 (got {n_repeats!r})")
    adapter = adapt(model, sites)
    if loss_fn is None and adapter.kind == "protocol" and not callable(getattr(model, "loss", None)):
        raise ValueError("model has no loss(batch) method: pass loss_fn(model, batch)")
    the_batch = adapter.batch(batch, strict=loss_fn is None)
    site_list, _ = _resolve_sites(adapter.sites)
    if mask is None:
        mask = adapter.masks(batch if the_batch is None else the_batch)
    token_shapes = _token_shapes(batch if the_batch is None else the_batch)
    calls = [0]  # the model's own forward calls: a loss may run it more than once (pairs, chosen and rejected)
    no_gradient = False  # a loss that does not require grad (frozen weights, inference mode): no gradient statistics
    counting = model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    rec = Recorder(site_list, mask=mask, grads=True, model=model, collect_outputs=True)
    with contextlib.ExitStack() as stack:
        stack.callback(counting.remove)
        stack.enter_context(rec)
        stack.enter_context(torch.enable_grad())  # gradients also where the caller is inside torch.no_grad()
        for _ in range(n_repeats):
            loss = loss_fn(model, batch) if loss_fn is not None else adapter.loss(
                batch if the_batch is None else the_batch)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise ValueError(f"the loss must be a scalar tensor (got {getattr(loss, 'shape', type(loss))})")
            outs = rec.take_outputs()
            for out in outs:
                shape = tuple(out.shape[:2])
                if shape not in token_shapes and shape[::-1] in token_shapes:
                    raise ValueError(f"a site's output is (tokens, batch, hidden) = {tuple(out.shape)}: a "
                                     "sequence-first block (e.g. nn.TransformerEncoderLayer without batch_first=True)"
                                     "; sigprop reads (batch, tokens, hidden): build it batch-first or pass sites= "
                                     "of modules that return that")
            if loss.requires_grad and outs:
                try:
                    torch.autograd.grad(loss.reshape(()), outs, allow_unused=True)
                except RuntimeError as err:
                    if "use_reentrant" not in str(err):
                        raise
                    raise ValueError("the model runs its blocks under activation checkpointing, which re-runs them "
                                     "in the backward pass; measure without checkpointing") from None
            else:
                no_gradient = True
            del loss, outs
    if adapter.kind != "protocol":
        shared = {key: n for key, n in rec.forward_counts().items() if n > max(calls[0], n_repeats)}
        if shared:
            (layer, site), n = next(iter(shared.items()))
            raise ValueError(f"site ({layer}, {site!r}) ran {n} times in {calls[0]} forward pass(es) of the model: "
                             "it shares its blocks across depth (as ALBERT does), so one module stands for several "
                             "layers, or re-runs them (activation checkpointing); pass sites= of modules that run "
                             "once per layer, and measure without checkpointing")
    info = {"n_repeats": n_repeats, "backward": "torch.autograd.grad w.r.t. the site tensors"}
    if no_gradient:  # the diagnosis reads it: NaN gradients that were not computed, not a model gone NaN
        info["grad_source"] = NO_GRADIENT_MEASURED
    if adapter.kind != "protocol":
        info["sites_from"] = list(adapter.stacks)
    info.update(meta or {})
    return rec.profile(config, info)
