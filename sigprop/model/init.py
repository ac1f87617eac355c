"""Initialisation schemes as plans (ARCHITECTURE.md, "Init schemes"): the one place where weights get their
distributions.

A scheme is a function ``config -> InitPlan``. The plan gives, for every parameter *role* (``token``, ``position``,
``segment``, ``patch``, ``q``, ``k``, ``v``, ``o``, ``w1``, ``w2``, ``head``) and layer, the standard deviation of
its N(0, std²) entries, plus every block's residual scales (λ, β), whether β is learnable, and the head scale.
:meth:`InitPlan.apply` samples a model's weights from it and sets the declared values that the moment rules read
(``Linear.weight_std``, the attention's ``sigma_q/k/v``, the embedding stds, the residual buffers), so the theory
reads the same plan and never the sampled weights. Roles are assigned by module type, and :meth:`InitPlan.apply`
raises if any parameter of the model was not initialised by the plan.

Schemes (Kedia et al. Table 3, Sec. 3.5, App. K, M):

* ``xavier``: every matrix N(0, 2/(fan_in + fan_out)) on its full shape (Q, K, V, O are d × d).
* ``bert``: every matrix and table N(0, σ²), σ = ``config.initializer_range`` (0.02: Devlin et al.; the
  ``initializer_range`` of Hugging Face's GPT-2, BERT and Llama ``_init_weights``, biases zero, norms at 1).
* ``dslm``: App. M, Fig. 15: σ²_e = (1−p)/n_emb for each of the n_emb embedding tables, σ²_q = σ²_k = 1/d,
  FFN σ² = √(2(1−p)/(d·d_ff)) (= (1/d)√((1−p)/2) at d_ff = 4d: unit FFN output, Table 2), V and O of layer n
  σ² = (1/d)√((1−p)/r_n) with r_n the token correlation at the layer's input from Fig. 15's recurrence
  (:func:`sigprop.laws.dslm.dslm_correlation_schedule`), λ² = 1 − β², β² = k/N^α, head input scaled by 1/√d.
* ``dslm_simple``: Fig. 14: as ``dslm`` but V and O share the FFN's σ².
* ``deepnorm``: Wang et al. 2022 (encoder form): λ = (2N)^{1/4}, β = 1, V, O, W1, W2 Xavier × (8N)^{−1/4}.
* ``dsinit``: Zhang et al. 2019: Xavier scaled by 1/√l in layer l = 1..N.
* ``layerscale``: Touvron et al. 2021: Xavier, learnable β = ε (0.1 for N ≤ 18, 10⁻⁵ for N ≤ 24, 10⁻⁶ beyond).
* ``skipinit`` / ``rezero``: De & Smith 2020 / Bachlechner et al. 2021: Xavier, learnable β = 0 (ReZero is meant
  with ``norm_position="none"``).
* ``noci2022``: Noci et al. 2022 as Kedia et al. describe it (Sec. 3.4, App. F and Table 11): Q, K and V of each
  head N(0, 1/fan_out) = N(0, 1/d_head), "a rather non-standard version of Xavier", which puts the queries and keys
  H times above Xavier's 1/d (the large Q/K that Sec. 3.4 blames for their divergence); the other matrices Xavier;
  every residual branch scaled β = 1/√N with λ = 1 (Noci et al.'s depth-dependent residual scaling, which Sec. 3.4
  also cites).
* ``mup``: the initialisation of µP (Yang et al. 2021, "Tensor Programs V", Table 3 for Adam), at one width:
  every hidden matrix (Q, K, V, O, W₁, W₂) N(0, 1/fan_in); embedding tables of unit output variance (σ² =
  1/n_emb, µP's O(1) input weights); the readout at µP's 1/width: an untied head N(0, 1/d²), a tied head (the
  token table) through a head scale 1/d. Not represented: µP's zero-initialised queries (sigprop's attention needs
  σ_q > 0), its 1/d_head attention temperature and its per-layer learning rates, so this is "µP-style" (Kedia et
  al. Table 11 report vanilla µP diverging at 96 and 192 layers).
* ``alekseev``: Alekseev 2026, Sec. 2.1 and App. A (the ViT of its experiments, timm's std-0.02 initialisation in
  the paper's σ parametrisation): W_V, W_O ∈ R^{d×d} with variance σ²_V/d, σ²_O/d and σ_O = σ_V = √σ_OV
  (``config.sigma_ov``); W_1 (d → d_ff) with variance σ²_1/d and W_2 (d_ff → d) with variance σ²_2/d_ff
  (σ²_2/(4d) at the paper's d_ff = 4d) and σ_1 = σ_2 = √σ_21 (``config.sigma_21``); Q and K std 0.02 (σ_Q = σ_K =
  0.02·√d); token, position and segment embeddings and the head std 0.02; the patch embedding std 1/√(3·fan_in),
  PyTorch's default for timm's patch convolution; λ = β = 1, head scale 1. Only the products σ_OV = σ_Oσ_V and
  σ_21 = σ_2σ_1 enter the paper's recurrences (Eqs. 8, 9, 12), so splitting them evenly loses nothing.
* ``shaped``: Noci et al. 2023 (the shaped Transformer, Eq. 11, Secs. 2–4, App. D). Every matrix N(0, 1/fan_in):
  the paper writes each weight as W/√n with W ~ N(0, 1) (Eqs. 1, 2, 4), so W_Q, W_K, W_V (d → H·d_head) and
  W_O (H·d_head → d) have std 1/√d, W_pre = W_1 std 1/√d and W_post = W_2 std 1/√d_ff. Q/K at 1/√d go with shaped
  attention's temperature τ = τ₀√(d·d_head) (Eq. 9); App. D's W_Q, W_K ~ N(0, n^{-3/2}) with τ = τ₀√n_k is the same
  map (the ShapedAttention docstring). With an output projection, σ²_v σ²_o H d_head = 1/d is Eq. 1's W_V/√n
  (per-element second moments). App. D literally samples *all* weights from N(0, 1/n) with n = 768, W_post
  (3072 → 768) included; we keep 1/fan_in for W_2, which is what Eq. 4's square W_post√(c/n) does to second
  moments: with ``shaped_normalize`` (√c in the activation) the FFN branch then preserves E x² exactly, and the
  shaped attention branch at γ₁ = γ₂ = 1 up to its O(1/(τ₀²d)) drift. Residual scales λ = √(1 − γ²), β = γ with
  γ = ``config.shaped_gamma`` (Sec. 2 "λ² + γ² = 1", Thm. 4.2; default 1/√8 of Fig. 1) at every site. Token,
  position and segment tables std √((1−p)/n_emb) and a patch embedding that std over √patch_dim (as ``dslm``): the
  embedding output after dropout has unit second moment, V^{αα} = 1. Head: untied N(0, 1/d) with head scale 1
  (unit logit variance); a tied head is the token table (std ≈ 0.7), so its input is scaled by 1/√d (DSLM's
  Sec. 4.1 head scale) to keep the logits O(1) instead of variance d·σ²_e. Meant with
  ``norm_position="none"`` (the paper's unnormalised architecture), ``attention="shaped"`` and
  ``activation="shaped_relu"``; the plan applies to any configuration.

* ``auto``: ``dslm`` with each residual branch's output projection (O, W₂; a cross-attention's β) calibrated
  layer by layer by the component rules so that every branch's output second moment equals its skip input's: the
  stream keeps unit variance whatever the components (SwiGLU, RMSNorm, DyT/Derf, causal or grouped-query
  attention). The scheme gives DSLM's plan; :func:`sigprop.model.transformer.plan_for` calibrates it
  (:mod:`sigprop.model.auto_init`), and every model built from a config uses that.

DyT/Derf α: :meth:`InitPlan.apply` sets every DyT/Derf norm's α to the config's value at its position
(:meth:`TransformerConfig.alpha_at`: attention, FFN or final norm).

Config hooks applied to every scheme: ``qk_gain`` multiplies σ_q and σ_k, ``v_init="noci"`` sets σ²_v = 1/d_head,
``lam`` / ``beta`` override the residual scales, ``learnable_beta`` makes β learnable, ``head_scale`` overrides.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..core.moments import Stat
from .init_schemes import SCHEME_NAMES, scheme_info
from .layer import SITES

if TYPE_CHECKING:
    from .config import TransformerConfig
    from .transformer import Transformer

__all__ = ["InitPlan", "SCHEMES", "make_plan", "ROLES", "SITES"]

ROLES = ("token", "position", "segment", "patch", "cls", "q", "k", "v", "o", "w1", "w2", "w3", "transform", "head")
_BLOCK_ROLES = ("q", "k", "v", "o", "w1", "w2")
#: What a plan read from weights that break the theory's assumptions says last (trained weights).
TRAINED_WEIGHTS = ("read as a freshly initialised model with these standard deviations: an approximation for "
                   "trained weights, whose correlations the i.i.d. theory does not see")
#: Roles that may hold one value per layer in an explicit plan: the block roles and a gated FFN's up projection.
_PER_LAYER_ROLES = (*_BLOCK_ROLES, "w3")



def _xavier(fan_in: int, fan_out: int) -> float:
    return math.sqrt(2.0 / (fan_in + fan_out))


@dataclass(frozen=True)
class InitPlan:
    """An init scheme's numbers for one config: a standard deviation per weight role, residual scales, head scale.

    A scheme is a function ``config -> InitPlan`` (module docstring: Kedia et al. Table 3, Sec. 3.5, App. K, M).
    :meth:`apply` samples a model's weights from the plan, every entry N(0, std²), and sets the declared values the
    moment rules read, so the theory reads the plan and never a sampled weight. Built from a scheme
    (:func:`make_plan`, :meth:`from_scheme`, :func:`sigprop.plan_for`), from explicit standard deviations
    (:meth:`from_stds`) or from a model's weights (:meth:`from_model`: what :func:`sigprop.predict` reads).

    Attributes:
        scheme: the scheme's name (:data:`SCHEMES`).
        stds: role (:data:`ROLES`: ``token``, ``position``, ``q``, ``k``, ``v``, ``o``, ``w1``, ``w2``, ``head``,
            …) → standard deviation: a float, or for the block roles an array with one value per layer.
        lam: site ("attn", "cross", "ffn") → λ of the residual y = λ·x + β·f(x), an array over layers.
        beta: site → β, likewise.
        learnable_beta: whether β is a parameter.
        head_scale: the factor on the head's input (1/√d for DSLM, Sec. 4.1).
        notes: what the scheme records beside (e.g. DSLM's correlation schedule, ``"source"`` of a plan read from
            weights, ``"approximations"``).

    Example:
        >>> import sigprop
        >>> config = sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8,
        ...                                    init="dslm")
        >>> plan = sigprop.make_plan(config)
        >>> round(plan.std("q", layer=0) ** 2 * config.d_model, 6)  # σ²_q = 1/d (App. M)
        1.0
        >>> lam, beta = plan.scales("ffn", 1)
        >>> round(lam ** 2 + beta ** 2, 6), round(beta ** 2 * config.n_layers, 6)  # β² = k/N, λ² = 1 − β²
        (1.0, 2.0)
    """

    scheme: str
    stds: dict
    lam: dict
    beta: dict
    learnable_beta: bool
    head_scale: float
    notes: dict = field(default_factory=dict)

    def std(self, role: str, layer: int | None = None) -> float:
        """The std of role ``role`` (in layer ``layer`` for block roles). ``w3``, the up projection of a gated FFN
        (SwiGLU / GeGLU: :class:`~sigprop.components.glu.GLU`, whose gate is ``w1``), takes ``w1``'s value in a plan
        that names no ``w3`` of its own (it has w1's shape); ``cls``, a ViT's [CLS] vector, takes ``position``'s (it
        is drawn like a position row: Hugging Face's ViT draws both from N(0, initializer_range²))."""
        if role == "w3" and "w3" not in self.stds:
            role = "w1"
        if role == "cls" and "cls" not in self.stds:
            role = "position"
        if role not in self.stds:
            raise KeyError(f"init plan '{self.scheme}' has no std for role {role!r}")
        v = self.stds[role]
        if np.ndim(v) == 0:
            return float(v)
        if layer is None:
            raise ValueError(f"role {role!r} has per-layer stds: pass the layer")
        return float(v[layer])

    def scales(self, site: str, layer: int) -> tuple[float, float]:
        """(λ, β) of the residual around block ``site`` of layer ``layer``."""
        return float(self.lam[site][layer]), float(self.beta[site][layer])

    def apply(self, model: Transformer, generator: torch.Generator | None = None, sample: bool = True) -> Transformer:
        """Sample every parameter of ``model`` (a :class:`~sigprop.model.transformer.Transformer`) from the plan
        and set the declared values its moment rules read. Raises if a parameter is left without a plan.
        ``sample=False`` skips drawing the random matrices (what :func:`sigprop.predict` needs)."""
        from .roles import initialise_from_plan

        done = initialise_from_plan(model, self, generator, sample)
        missing = [n for n, p in model.named_parameters() if id(p) not in done]
        if missing:
            raise RuntimeError(f"init plan '{self.scheme}' left parameters uninitialised: {', '.join(missing)}")
        return model

    def to_dict(self) -> dict:
        """A JSON-friendly summary (per-layer arrays as lists)."""
        conv = lambda v: v.tolist() if isinstance(v, np.ndarray) else v  # noqa: E731
        return {"scheme": self.scheme, "stds": {k: conv(v) for k, v in self.stds.items()},
                "lam": {k: conv(v) for k, v in self.lam.items()}, "beta": {k: conv(v) for k, v in self.beta.items()},
                "learnable_beta": self.learnable_beta, "head_scale": self.head_scale, "notes": self.notes}

    def summary(self) -> dict:
        """:meth:`to_dict` with every per-layer array that holds one value written as that value, and without the
        notes' long schedules: what a profile records of the plan its rules read (``meta["plan"]``)."""
        def compact(v: Stat) -> float | list[Any]:
            a = np.asarray(v, dtype=np.float64)
            if a.ndim == 0 or (a.size and np.all(a == a.flat[0])):
                return float(a.flat[0]) if a.ndim else float(a)
            return a.tolist()

        return {"scheme": self.scheme, "source": self.notes.get("source", f"the {self.scheme!r} scheme"),
                "stds": {k: compact(v) for k, v in self.stds.items()},
                "lam": {k: compact(v) for k, v in self.lam.items()},
                "beta": {k: compact(v) for k, v in self.beta.items()},
                "learnable_beta": self.learnable_beta, "head_scale": self.head_scale}

    @classmethod
    def from_scheme(cls, config: TransformerConfig, scheme: str) -> InitPlan:
        """The plan of init scheme ``scheme`` (a name of :data:`SCHEMES`) for ``config``, with the config's overrides,
        whatever ``config.init`` says."""
        return make_plan(config.replace(init=scheme))

    @classmethod
    def from_model(cls, model: Transformer, strict: bool = True) -> InitPlan:
        """The plan a model's weights show: every role's standard deviation read as the root mean square of its
        weights, layer by layer, λ and β from its residuals, the head scale from its buffer
        (:func:`~sigprop.model.roles.read_plan`). What :func:`sigprop.predict` reads from a model re-initialised by
        hand. ``ValueError`` for weights on the meta device, non-zero biases or norms off their initial affine
        parameters; with ``strict=False`` (trained weights) these last two are listed in
        ``notes["approximations"]`` instead: the i.i.d. theory of a model with these standard deviations is then an
        approximation of the trained model."""
        from .roles import read_weights

        approximations: list[str] | None = None if strict else []
        plan = cls(model.plan.scheme, **read_weights(model, approximations),
                   notes={**model.plan.notes, "source": "read from the model's weights"})
        if approximations:
            plan.notes["approximations"] = approximations + [TRAINED_WEIGHTS]
        return plan

    @classmethod
    def from_stds(cls, config: TransformerConfig, stds: dict, lam: dict | None = None, beta: dict | None = None,
                  head_scale: float | None = None) -> InitPlan:
        """The plan of ``config``'s scheme with explicit standard deviations: ``stds`` maps roles (:data:`ROLES`) to a
        float, or for the block roles (q, k, v, o, w1, w2, and w3) one value per layer (``config.total_layers``);
        ``lam`` and ``beta`` map sites (:data:`SITES`) likewise; ``head_scale`` replaces the scheme's. ``ValueError``
        naming an unknown role or site, a wrong length, or a value that is not finite and positive (λ, β:
        non-negative)."""
        base = make_plan(config)
        n = config.total_layers

        def values(name: str, v: Stat, lo_open: bool) -> Stat:
            a = np.asarray(v, dtype=np.float64) if not isinstance(v, bool) else np.asarray(np.nan)
            if a.ndim not in (0, 1) or (a.ndim == 1 and a.shape[0] != n):
                raise ValueError(f"{name}: one value, or one per layer ({n}), got shape {a.shape}")
            if not np.all(np.isfinite(a)) or np.any(a <= 0 if lo_open else a < 0):
                raise ValueError(f"{name} must be finite and {'> 0' if lo_open else '>= 0'} (got {v!r})")
            return a if a.ndim else float(a)

        new_stds = dict(base.stds)
        for role, v in stds.items():
            if role not in ROLES:
                raise ValueError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
            a = values(f"stds[{role!r}]", v, True)
            new_stds[role] = np.full(n, a) if role in _PER_LAYER_ROLES and np.ndim(a) == 0 else a
            if role not in _PER_LAYER_ROLES and np.ndim(a):
                raise ValueError(f"stds[{role!r}]: role {role!r} takes one value")

        def sites(given: dict[str, Stat] | None, current: dict[str, np.ndarray], name: str) -> dict[str, np.ndarray]:
            out = dict(current)
            for site, v in (given or {}).items():
                if site not in SITES:
                    raise ValueError(f"unknown site {site!r} in {name}; sites: {', '.join(SITES)}")
                out[site] = np.broadcast_to(values(f"{name}[{site!r}]", v, False), (n,)).astype(np.float64)
            return out

        hs = base.head_scale if head_scale is None else values("head_scale", head_scale, True)
        return InitPlan(base.scheme, new_stds, sites(lam, base.lam, "lam"), sites(beta, base.beta, "beta"),
                        base.learnable_beta, float(hs), {**base.notes, "source": "explicit standard deviations"})


# --------------------------------------------------------------------------------------------------------------
# base values
# --------------------------------------------------------------------------------------------------------------

def _patch_dim(c: TransformerConfig) -> int:
    return c.channels * c.patch_size**2


def _xavier_stds(c: TransformerConfig) -> dict:
    d, n = c.d_model, c.total_layers
    per_layer = lambda v: np.full(n, v, dtype=np.float64)  # noqa: E731
    out_dim = c.vocab_size if c.input == "tokens" else c.n_classes
    return {
        "token": _xavier(c.vocab_size, d),
        "position": _xavier(c.max_len if c.input == "tokens" else c.n_image_tokens, d),
        "segment": _xavier(max(c.n_segments, 1), d),
        "patch": _xavier(_patch_dim(c), d),
        "q": per_layer(_xavier(d, c.n_heads * c.d_head)), "k": per_layer(_xavier(d, c.kv_heads * c.d_head)),
        "v": per_layer(_xavier(d, c.kv_heads * c.d_head)), "o": per_layer(_xavier(c.n_heads * c.d_head, d)),
        "w1": per_layer(_xavier(d, c.ffn_width)), "w2": per_layer(_xavier(c.ffn_width, d)),
        "transform": _xavier(d, d), "head": _xavier(d, out_dim),
    }


def _unit_scales(c: TransformerConfig, lam: float = 1.0, beta: float = 1.0) -> tuple[dict[str, np.ndarray], dict[str,
                 np.ndarray]]:
    n = c.total_layers
    return ({s: np.full(n, lam, dtype=np.float64) for s in SITES},
            {s: np.full(n, beta, dtype=np.float64) for s in SITES})


def _dslm_common(c: TransformerConfig) -> tuple[dict, dict, dict, dict]:
    d, p, n = c.d_model, c.dropout, c.total_layers
    stds = _xavier_stds(c)
    emb_std = math.sqrt((1.0 - c.p_embed) / c.n_embedding_types)  # undoes the embedding dropout's 1/(1 − p)
    stds["token"] = stds["position"] = stds["segment"] = emb_std
    # a patch embedding sees pixels of unit variance (normalised images): σ²·patch_dim = σ²_e
    stds["patch"] = emb_std / math.sqrt(_patch_dim(c))
    ffn_var = math.sqrt(2.0 * (1.0 - p) / (d * c.ffn_width))
    for role in ("w1", "w2"):
        stds[role] = np.full(n, math.sqrt(ffn_var))
    for role in ("q", "k"):
        stds[role] = np.full(n, math.sqrt(1.0 / d))
    beta2 = c.dslm_beta2
    lam, beta = _unit_scales(c, math.sqrt(1.0 - beta2), math.sqrt(beta2))
    notes = {"beta2": beta2, "ffn_var": ffn_var}
    return stds, lam, beta, notes


def _input_correlation(c: TransformerConfig) -> float:
    """Token correlation at the first layer's input that DSLM's schedule starts from: ``config.input_corr``, else
    the expectation for Zipf(1) tokens over the vocabulary (App. A.1) after the embedding dropout (which scales a
    correlation by 1 − p), i.e. exactly what :func:`sigprop.predict` feeds the first layer without a batch."""
    if c.input_corr is not None:
        return float(c.input_corr)
    if c.input != "tokens":
        raise ValueError("init='dslm' with patch input needs config.input_corr, the token correlation of the patch "
                         "embedding's output on your images (App. H reports 0.46 for ViT on ImageNet): "
                         "sigprop.theory.boundaries.patch_input_correlation(config, images) computes it; the "
                         "command line fills it in from its batch")
    from ..components.embedding import embedding_forward, zipf_correlation

    var = (1.0 - c.p_embed) / c.n_embedding_types
    m = embedding_forward(var, zipf_correlation(c.vocab_size), position_var=var if c.position_table else 0.0,
                          segment_var=var if c.n_segments else 0.0)
    return (1.0 - c.p_embed) * float(m.corr)


# --------------------------------------------------------------------------------------------------------------
# schemes
# --------------------------------------------------------------------------------------------------------------

def _scheme_xavier(c: TransformerConfig) -> InitPlan:
    lam, beta = _unit_scales(c)
    return InitPlan("xavier", _xavier_stds(c), lam, beta, False, 1.0)


def _scheme_bert(c: TransformerConfig) -> InitPlan:
    std = c.initializer_range
    stds = {k: (np.full(c.total_layers, std) if k in _BLOCK_ROLES else std) for k in ROLES}
    lam, beta = _unit_scales(c)
    return InitPlan("bert", stds, lam, beta, False, 1.0)


def _scheme_dslm(c: TransformerConfig) -> InitPlan:
    from ..laws.dslm import dslm_correlation_schedule

    stds, lam, beta, notes = _dslm_common(c)
    beta2 = notes["beta2"]
    r_in = np.asarray(dslm_correlation_schedule(c.total_layers, c.dropout, _input_correlation(c),
                                                1.0 - beta2, beta2), dtype=np.float64)
    if np.any(r_in <= 0.0):
        raise ValueError("DSLM's V/O variance (1/d)·√((1−p)/r) needs a positive input correlation r at every layer")
    vo_var = np.sqrt((1.0 - c.dropout) / r_in) / c.d_model
    stds["v"] = stds["o"] = np.sqrt(vo_var)
    notes["corr_schedule"] = r_in.tolist()
    return InitPlan("dslm", stds, lam, beta, False, 1.0 / math.sqrt(c.d_model), notes)


def _scheme_auto(c: TransformerConfig) -> InitPlan:
    """DSLM's plan, to be calibrated (module docstring; :mod:`sigprop.model.auto_init`)."""
    plan = _scheme_dslm(c)
    return InitPlan("auto", plan.stds, plan.lam, plan.beta, False, plan.head_scale,
                    {**plan.notes, "calibrated": False})


def _scheme_dslm_simple(c: TransformerConfig) -> InitPlan:
    stds, lam, beta, notes = _dslm_common(c)
    stds["v"] = stds["o"] = stds["w1"].copy()
    return InitPlan("dslm_simple", stds, lam, beta, False, 1.0 / math.sqrt(c.d_model), notes)


def _scheme_deepnorm(c: TransformerConfig) -> InitPlan:
    n = c.total_layers
    stds = _xavier_stds(c)
    shrink = (8.0 * n) ** -0.25
    for role in ("v", "o", "w1", "w2"):
        stds[role] = stds[role] * shrink
    lam, beta = _unit_scales(c, (2.0 * n) ** 0.25, 1.0)
    return InitPlan("deepnorm", stds, lam, beta, False, 1.0, {"alpha": (2.0 * n) ** 0.25, "beta_init": shrink})


def _scheme_dsinit(c: TransformerConfig) -> InitPlan:
    stds = _xavier_stds(c)
    depth = 1.0 / np.sqrt(np.arange(1, c.total_layers + 1, dtype=np.float64))
    for role in _BLOCK_ROLES:
        stds[role] = stds[role] * depth
    lam, beta = _unit_scales(c)
    return InitPlan("dsinit", stds, lam, beta, False, 1.0)


def _scheme_layerscale(c: TransformerConfig) -> InitPlan:
    n = c.total_layers
    eps = 0.1 if n <= 18 else (1e-5 if n <= 24 else 1e-6)
    lam, beta = _unit_scales(c, 1.0, eps)
    return InitPlan("layerscale", _xavier_stds(c), lam, beta, True, 1.0, {"epsilon": eps})


def _scheme_zero_beta(name: str) -> Callable[[TransformerConfig], InitPlan]:
    def scheme(c: TransformerConfig) -> InitPlan:
        lam, beta = _unit_scales(c, 1.0, 0.0)
        return InitPlan(name, _xavier_stds(c), lam, beta, True, 1.0)

    return scheme


def _scheme_noci2022(c: TransformerConfig) -> InitPlan:
    """Noci et al. 2022 as Kedia et al. Sec. 3.4 / App. F describe it (module docstring)."""
    stds = _xavier_stds(c)
    big = np.full(c.total_layers, math.sqrt(1.0 / c.d_head))
    stds.update(q=big, k=big.copy(), v=big.copy())
    lam, beta = _unit_scales(c, 1.0, 1.0 / math.sqrt(c.total_layers))
    return InitPlan("noci2022", stds, lam, beta, False, 1.0)


def _scheme_mup(c: TransformerConfig) -> InitPlan:
    """µP-style initialisation, Yang et al. 2021 Table 3 (module docstring)."""
    d, n = c.d_model, c.total_layers
    per_layer = lambda v: np.full(n, v, dtype=np.float64)  # noqa: E731
    emb = math.sqrt(1.0 / c.n_embedding_types)
    stds = {"token": emb, "position": emb, "segment": emb, "patch": emb / math.sqrt(_patch_dim(c)),
            "q": per_layer(1.0 / math.sqrt(d)), "k": per_layer(1.0 / math.sqrt(d)), "v": per_layer(1.0 / math.sqrt(d)),
            "o": per_layer(1.0 / math.sqrt(c.n_heads * c.d_head)), "w1": per_layer(1.0 / math.sqrt(d)),
            "w2": per_layer(1.0 / math.sqrt(c.ffn_width)), "transform": 1.0 / math.sqrt(d), "head": 1.0 / d}
    lam, beta = _unit_scales(c)
    tied = c.input == "tokens" and c.tie_head
    return InitPlan("mup", stds, lam, beta, False, 1.0 / d if tied else 1.0)


def _scheme_alekseev(c: TransformerConfig) -> InitPlan:
    """Alekseev 2026 Sec. 2.1 / App. A (module docstring)."""
    n = c.total_layers
    per_layer = lambda v: np.full(n, v, dtype=np.float64)  # noqa: E731
    vit = 0.02
    ov, ff = math.sqrt(c.sigma_ov), math.sqrt(c.sigma_21)  # σ_O = σ_V = √σ_OV, σ_1 = σ_2 = √σ_21
    stds: dict[str, Stat] = {role: vit for role in ("token", "position", "segment", "transform", "head")}
    # timm's patch embedding is a Conv2d left at PyTorch's default init, kaiming_uniform(a=√5): std 1/√(3·fan_in);
    # it puts standardised pixels at q⁰ ≈ 1/3, the order of the paper's CIFAR-100 inputs (q⁰, p⁰) ≈ (0.5, 0.25)
    stds["patch"] = 1.0 / math.sqrt(3.0 * _patch_dim(c))
    stds.update(q=per_layer(vit), k=per_layer(vit), v=per_layer(ov / math.sqrt(c.d_model)),
                o=per_layer(ov / math.sqrt(c.d_model)), w1=per_layer(ff / math.sqrt(c.d_model)),
                w2=per_layer(ff / math.sqrt(c.ffn_width)))
    lam, beta = _unit_scales(c)
    return InitPlan("alekseev", stds, lam, beta, False, 1.0, {"sigma_ov": c.sigma_ov, "sigma_21": c.sigma_21})


def _scheme_shaped(c: TransformerConfig) -> InitPlan:
    """Noci et al. 2023 Secs. 2–4, App. D (module docstring)."""
    d, n = c.d_model, c.total_layers
    per_layer = lambda v: np.full(n, v, dtype=np.float64)  # noqa: E731
    emb = math.sqrt((1.0 - c.p_embed) / c.n_embedding_types)
    stds = {"token": emb, "position": emb, "segment": emb, "patch": emb / math.sqrt(_patch_dim(c)),
            "q": per_layer(1.0 / math.sqrt(d)), "k": per_layer(1.0 / math.sqrt(d)),
            "v": per_layer(1.0 / math.sqrt(d)), "o": per_layer(1.0 / math.sqrt(c.n_heads * c.d_head)),
            "w1": per_layer(1.0 / math.sqrt(d)), "w2": per_layer(1.0 / math.sqrt(c.ffn_width)),
            "transform": 1.0 / math.sqrt(d), "head": 1.0 / math.sqrt(d)}
    gamma = float(c.shaped_gamma)
    lam, beta = _unit_scales(c, math.sqrt(1.0 - gamma**2), gamma)
    tied = c.input == "tokens" and c.tie_head
    return InitPlan("shaped", stds, lam, beta, False, 1.0 / math.sqrt(d) if tied else 1.0, {"gamma": gamma})


_PLANS = {
    "xavier": _scheme_xavier,
    "bert": _scheme_bert,
    "dslm": _scheme_dslm,
    "dslm_simple": _scheme_dslm_simple,
    "deepnorm": _scheme_deepnorm,
    "dsinit": _scheme_dsinit,
    "layerscale": _scheme_layerscale,
    "skipinit": _scheme_zero_beta("skipinit"),
    "rezero": _scheme_zero_beta("rezero"),
    "noci2022": _scheme_noci2022,
    "mup": _scheme_mup,
    "alekseev": _scheme_alekseev,
    "shaped": _scheme_shaped,
    "auto": _scheme_auto,
}
#: Each scheme's plan function, in the order of the registry of what the schemes are
#: (:data:`sigprop.model.init_schemes.SCHEME_NAMES`), which names every scheme once.
SCHEMES = {name: _PLANS[name] for name in SCHEME_NAMES}


def make_plan(config: TransformerConfig) -> InitPlan:
    """The plan of ``config.init``, with the config's overrides applied.

    The scheme's function (:data:`SCHEMES`; module docstring) gives the plan; ``qk_gain`` then multiplies σ_q and
    σ_k (Kedia et al. Sec. 3.3's "2× Xavier"), ``v_init="noci"`` sets σ²_v = 1/d_head (Noci et al. 2022), ``lam`` /
    ``beta`` replace every site's residual scales, ``learnable_beta`` makes β learnable and ``head_scale`` replaces
    the scheme's. A scheme drawn for a unit-variance embedding output (DSLM, ``auto``, µP, ``shaped``) under a token
    scale s (``embed_scale``, Gemma's √d) gets its token table's std divided by s, and with a tied head its head
    scale multiplied by s, so that the embedding's output and the logits keep the variances the scheme aims at
    (:attr:`~sigprop.model.init_schemes.InitScheme.unit_embedding`). For ``init="auto"`` this is the plan before
    its calibration: a model gets :func:`sigprop.model.transformer.plan_for`'s.

    Args:
        config: a :class:`~sigprop.model.config.TransformerConfig`.

    Returns:
        The :class:`InitPlan`.

    Example:
        >>> import sigprop
        >>> config = sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8)
        >>> plain, doubled = sigprop.make_plan(config), sigprop.make_plan(config.replace(qk_gain=2.0))
        >>> round(doubled.std("q", 0) / plain.std("q", 0), 6), plain.scheme
        (2.0, 'xavier')
    """
    plan = SCHEMES[config.init](config)
    stds = dict(plan.stds)
    head_scale = plan.head_scale
    if config.embed_scale != 1.0 and scheme_info(config.init).unit_embedding:
        stds["token"] = float(stds["token"]) / config.embed_scale
        if config.input == "tokens" and config.tie_head:
            head_scale *= config.embed_scale
    if config.qk_gain != 1.0:
        stds["q"] = stds["q"] * config.qk_gain
        stds["k"] = stds["k"] * config.qk_gain
    if config.v_init == "noci":
        stds["v"] = np.full(config.total_layers, math.sqrt(1.0 / config.d_head))
    lam, beta = dict(plan.lam), dict(plan.beta)
    if config.lam is not None:
        lam = {s: np.full(config.total_layers, float(config.lam)) for s in SITES}
    if config.beta is not None:
        beta = {s: np.full(config.total_layers, float(config.beta)) for s in SITES}
    head_scale = head_scale if config.head_scale is None else float(config.head_scale)
    return InitPlan(plan.scheme, stds, lam, beta, plan.learnable_beta or config.learnable_beta, head_scale,
                    plan.notes)
