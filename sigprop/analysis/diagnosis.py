"""Diagnosis: do this model's activations and gradients explode, vanish or collapse to rank one with depth?

A profile (predicted or measured) answers it layer by layer; :func:`diagnose` says it in a few lines, per stack
(an encoder–decoder's encoder and decoder are read apart, since the decoder's stream starts afresh):

* **Forward variance** of the layer outputs, from the first layer to the last, and **gradient variance**, from the
  last layer down to the first (the direction a gradient travels). Each is called *bounded* when its largest and
  smallest value over the stack are within a factor ``growth`` (default 10) of each other; otherwise it *grows* or
  *shrinks*, or *explodes* / *vanishes* where the change is exponential in depth; one whose end-to-end change is
  within the factor while its layers are not (a boundary layer's jump, a dip in the middle) *varies*. Kedia et al.
  Sec. 3.1 and Table 3 give the laws to expect at initialisation: Pre-LN's forward variance grows linearly in N and
  its gradient as a power of depth (App. E.1), Post-LN's gradient changes like c^{±N} (App. E.2), DeepScaleLM keeps
  both O(1) (App. E.3–E.4).
* **The law** of that change, fitted to the profile itself over the stack's middle layers l ∈ [N/8, N − N/8) (the
  first layers carry the embedding's transient, the last the head's boundary): log σ² = a + b·l (exponential,
  factor e^b per layer) against log σ² = a + p·log(l + 1) (power law σ² ∝ l^p; "linear" for p near 1,
  "hyperbolic" for p near −1, App. E.1's σ²_g,n = σ²_g,N (N/n)^C with C ≈ 1), whichever leaves the smaller
  squared residual. A change below 1.2× over that window is "flat". This describes the curve; it is not a
  prediction, and nothing from it enters one.
* **Token correlation** at the last layer: the tokens have collapsed to rank one when it reaches ``collapse``
  (default 0.99; Noci et al. 2022's rank collapse, Kedia et al. App. F, where dropout keeps it below r_max < 1).
* **An identity stack**: when the config's init plan scales every residual branch by |β| ≤ 1e-4, the branches
  contribute nothing at initialisation (SkipInit, ReZero, LayerScale's β ≤ 1e-5 beyond 18 layers): everything is
  "bounded" because nothing propagates, which the diagnosis says rather than praise.

Assumes the profile's "layer" rows are the stream after each layer (as :func:`sigprop.predict` and
:func:`sigprop.measure` give them) and that variances are positive; a non-finite value is reported as such.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from ..core.jsonio import finite_or_null
from ..core.profile import Profile
from ..model.init_schemes import INIT_SCHEMES

__all__ = ["DiagnosisLimits", "GrowthLaw", "Finding", "Diagnosis", "Verdict", "Quantity", "diagnose",
           "record_diagnosis", "overflow_diagnosis", "growth_law",
           "exponential_and_power_fits", "side_by_side"]

#: What a finding says of its quantity (the words its JSON and its sentence carry): a variance is "bounded",
#: "grows" / "shrinks" (by a power or less), "explodes" / "vanishes" (exponentially) or "varies" (between layers, not
#: end to end); the stream is the "identity"; the token correlation "collapses" or "stays below rank collapse"; any
#: of them may be "not finite".
Verdict = Literal["bounded", "grows", "shrinks", "explodes", "vanishes", "varies", "identity", "collapses",
                  "stays below rank collapse", "not finite"]
#: The quantity a finding is about: forward variance, gradient variance, token correlation, or the stream itself.
Quantity = Literal["fwd_var", "grad_var", "fwd_corr", "stream"]
#: A growth law's form (:class:`GrowthLaw`).
LawKind = Literal["flat", "power", "exponential"]
#: Which profile a diagnosis is of.
ProfileKind = Literal["predicted", "measured"]

#: Fewest layers in the fitting window for a growth law to be named.
MIN_LAW_LAYERS = 6
#: Below this change across the fitting window a variance is "flat".
FLAT_FACTOR = 1.2
#: A power-law exponent within this distance of ±1 is called linear / hyperbolic.
EXPONENT_TOLERANCE = 0.25
#: Verdicts of a variance that changes with depth end to end (what DeepScaleLM's scaling addresses; a "varies" is
#: often one boundary layer's jump, which it does not: :attr:`Finding.changes_with_depth` tells the two apart).
DEPTH_VERDICTS: tuple[Verdict, ...] = ("grows", "shrinks", "explodes", "vanishes")
#: The largest residual-branch scale |β| under which a stack passes its input on at initialisation (a branch then
#: adds at most 1e-8 of its variance per layer).
IDENTITY_BETA = 1e-4


@dataclass(frozen=True)
class DiagnosisLimits:
    """Where a change becomes a finding: ``growth``, the factor between a variance's largest and smallest value over
    a stack beyond which it is not bounded (> 1); ``collapse``, the last layer's token correlation at or above which
    the tokens count as collapsed to rank one (in (0, 1))."""

    growth: float = 10.0
    collapse: float = 0.99

    def __post_init__(self):
        if not (isinstance(self.growth, int | float) and math.isfinite(self.growth) and self.growth > 1.0):
            raise ValueError(f"growth must be a finite factor > 1 (got {self.growth!r})")
        if not (isinstance(self.collapse, int | float) and 0.0 < self.collapse < 1.0):
            raise ValueError(f"collapse must be a correlation in (0, 1) (got {self.collapse!r})")


@dataclass(frozen=True)
class GrowthLaw:
    """How a positive quantity changes with the layer index l: ``kind`` "flat", "power" (∝ (l + 1)^rate) or
    "exponential" (× rate per layer, upward in l)."""

    kind: LawKind
    rate: float = math.nan

    def describe(self, towards_input: bool = False) -> str:
        """In words; ``towards_input`` states an exponential factor per layer downwards (for gradients)."""
        if self.kind == "flat":
            return "flat over the middle layers"
        if self.kind == "power":
            if abs(self.rate - 1.0) <= EXPONENT_TOLERANCE:
                name = "linearly in depth"
            elif abs(self.rate + 1.0) <= EXPONENT_TOLERANCE:
                name = "hyperbolically in depth"
            else:
                name = "as a power of depth"
            return f"over the middle layers {name} (∝ l^{self.rate:.2f})"
        factor = 1.0 / self.rate if towards_input else self.rate
        direction = " towards the input" if towards_input else ""
        return f"over the middle layers exponentially (×{factor:.4g} per layer{direction})"


@dataclass(frozen=True)
class Finding:
    """One quantity of one stack. ``verdict``: "bounded", "grows", "shrinks", "explodes", "vanishes", "varies"
    (variances), "identity" (quantity "stream": the layers pass the stream on unchanged),
    "collapses" or "stays below rank collapse" (correlation), or "not finite". ``change`` is last / first layer for
    the forward variance and first / last layer for the gradient (its growth towards the input); for the
    correlation, the last layer's value. ``flagged``: beyond the limits."""

    stack: str
    quantity: Quantity
    verdict: Verdict
    flagged: bool
    change: float
    spread: float = math.nan
    law: GrowthLaw | None = None

    @property
    def changes_with_depth(self) -> bool:
        """Whether this is a variance that changes along the depth, what DeepScaleLM's scaling addresses: a verdict
        of :data:`DEPTH_VERDICTS`, or one that *varies* and changes over the middle layers too (its law there is
        not flat). A variance that changes only by a boundary layer's jump, flat between (whatever its verdict), does
        not, nor a stack that nothing reaches.

        Example:
            >>> jump = Finding("", "grad_var", "varies", True, 0.5, 100.0, GrowthLaw("flat"))
            >>> trend = Finding("", "grad_var", "varies", True, 0.34, 10.8, GrowthLaw("exponential", 1.02))
            >>> jump.changes_with_depth, trend.changes_with_depth
            (False, True)
        """
        if self.law is not None and self.law.kind == "flat":  # the change is one boundary layer's jump
            return False
        if self.verdict == "vanishes" and self.change == 0.0 and math.isnan(self.spread):
            return False  # nothing reaches this stack (a branch scaled to 0 upstream): not a change along it
        if self.verdict in DEPTH_VERDICTS:
            return True
        return self.verdict == "varies" and self.law is not None

    def describe(self) -> str:
        where = f"{self.stack}: " if self.stack else ""
        if self.verdict == "identity":
            return (f"{where}every layer passes the stream on unchanged (residual branches scaled to ~0 at "
                    "initialisation): nothing propagates until training moves β")
        if self.verdict == "not finite":
            return (f"{where}{_NAMES[self.quantity]} is NaN, infinite or negative at some layer (an overflow, or NaN "
                    "in the weights or the inputs)")
        if self.quantity == "fwd_corr":
            if self.verdict == "collapses":
                return f"{where}token correlation reaches {self.change:.4f} at the last layer: rank collapse"
            return f"{where}token correlation at the last layer {self.change:.4f} (below rank collapse)"
        if self.verdict == "vanishes" and self.change == 0.0 and math.isnan(self.spread):
            return f"{where}{_NAMES[self.quantity]} is 0 at every layer: nothing reaches this stack"
        towards_input = self.quantity == "grad_var"
        span = "from the last layer to the first" if towards_input else "from the first layer to the last"
        if self.verdict == "varies":
            text = (f"{where}{_NAMES[self.quantity]} varies ×{self.spread:.3g} between layers (×{self.change:.3g} "
                    f"{span})")
        else:
            text = f"{where}{_NAMES[self.quantity]} {self.verdict}: ×{self.change:.3g} {span}"
        if self.law is not None and self.verdict != "bounded":
            text += f"; {self.law.describe(towards_input)}"
        if self.verdict == "vanishes" and self.change == 0.0:
            text += " (it reaches 0 at some layer: underflow)"
        if self.verdict == "explodes" and math.isinf(self.change):
            text += " (past float64's range: the theory overflows)"
        return text


_NAMES = {"fwd_var": "forward variance", "grad_var": "gradient variance", "fwd_corr": "token correlation",
          "stream": "the stream"}


@dataclass(frozen=True)
class Diagnosis:
    """The findings on one profile and, when something is flagged, a hint.

    What :func:`diagnose` returns. ``flagged`` says whether any finding is beyond the limits, :meth:`lines` says
    each finding in words, :meth:`to_dict` is its plain JSON (each finding with its ``text``).

    Attributes:
        kind: the profile's kind, "predicted" or "measured".
        findings: one :class:`Finding` per quantity and stack: ``stack`` ("" for a single stack, "encoder" /
            "decoder"), ``quantity`` (``fwd_var``, ``grad_var``, ``fwd_corr``, or ``stream`` for an identity
            stack), ``verdict`` ("bounded", "grows", "shrinks", "explodes", "vanishes", "varies", "identity",
            "collapses", "stays below rank collapse", "not finite"), ``flagged``, ``change`` (last / first layer
            forward, first / last for the gradient, the last layer's value for the correlation), ``spread`` and the
            fitted ``law`` (:class:`GrowthLaw`).
        hint: what to change when something is flagged in a sigprop configuration (e.g. DeepScaleLM's scaling,
            Kedia et al. Sec. 3.5, App. E.3–E.4; dropout or shaped attention against rank collapse, App. F), or None.

    Example:
        >>> import sigprop
        >>> from sigprop.core.profile import Row
        >>> rows = tuple(Row(layer, "layer", fwd_var=1.0, fwd_corr=0.5, grad_var=2.0) for layer in range(4))
        >>> diagnosis = sigprop.diagnose(sigprop.Profile("measured", {}, rows))
        >>> diagnosis.kind, diagnosis.flagged, [f.verdict for f in diagnosis.findings]
        ('measured', False, ['bounded', 'bounded', 'stays below rank collapse'])
        >>> diagnosis.lines()[0]
        'forward variance bounded: ×1 from the first layer to the last'
    """

    kind: ProfileKind
    findings: tuple[Finding, ...]
    hint: str | None = None

    @property
    def flagged(self) -> bool:
        return any(f.flagged for f in self.findings)

    def lines(self) -> list[str]:
        return [f.describe() for f in self.findings]

    def to_dict(self) -> dict:
        """Plain JSON (a value that is not finite becomes null), each finding with its ``text``."""
        def finding(f: Finding) -> dict:
            return finite_or_null({**asdict(f), "text": f.describe()})

        return {"kind": self.kind, "flagged": self.flagged, "findings": [finding(f) for f in self.findings],
                "hint": self.hint}


def exponential_and_power_fits(x: np.ndarray, log_y: np.ndarray) -> dict[str, tuple[float, float]]:
    """Least-squares fits of log y = a + b·x ("exponential": its factor e^b) and log y = a + p·log x ("power": its
    exponent p), each as (squared residual, rate); x > 0."""
    fits = {}
    for kind, regressor in (("exponential", x), ("power", np.log(x))):
        design = np.stack([np.ones_like(regressor), regressor], axis=1)
        coef, *_ = np.linalg.lstsq(design, log_y, rcond=None)
        slope = float(coef[1])
        fits[kind] = (float(np.sum((log_y - design @ coef) ** 2)), math.exp(slope) if kind == "exponential" else slope)
    return fits


def growth_law(values) -> GrowthLaw | None:
    """The law of a positive per-layer quantity (index l = 0 … N − 1), fitted on l ∈ [N/8, N − N/8): "flat" when it
    changes by less than FLAT_FACTOR (1.2×) there, else the better by squared residual of
    :func:`exponential_and_power_fits` in l + 1 (an exponential's factor per layer is the same in l and l + 1). None
    for fewer than 6 layers in the window or a value that is not finite and positive."""
    y = np.asarray(values, dtype=np.float64)
    n = y.size
    lo, hi = n // 8, n - max(1, n // 8)
    if hi - lo < MIN_LAW_LAYERS or not np.all(np.isfinite(y)) or np.any(y <= 0.0):
        return None
    layers = np.arange(lo, hi, dtype=np.float64)
    logs = np.log(y[lo:hi])
    if logs.max() - logs.min() < math.log(FLAT_FACTOR):
        return GrowthLaw("flat")
    fits = exponential_and_power_fits(layers + 1.0, logs)
    kind = min(fits, key=lambda k: fits[k][0])
    return GrowthLaw(kind, fits[kind][1])


def _variance_finding(stack: str, quantity: Quantity, values: np.ndarray, limits: DiagnosisLimits) -> Finding:
    if not np.all(np.isfinite(values)) or np.any(values < 0.0):
        return Finding(stack, quantity, "not finite", True, math.nan)
    if np.all(values == 0.0):  # nothing reaches the stack (a branch scaled to 0 on the way: ReZero's cross-attention)
        return Finding(stack, quantity, "vanishes", True, 0.0, math.nan)
    if np.any(values == 0.0):  # underflow: a variance that vanished all the way to 0 (in float32, below ~1e-45)
        return Finding(stack, quantity, "vanishes", True, 0.0, math.inf)
    change = values[-1] / values[0] if quantity == "fwd_var" else values[0] / values[-1]
    spread = float(values.max() / values.min())
    law = growth_law(values)
    if spread <= limits.growth:
        return Finding(stack, quantity, "bounded", False, float(change), spread, law)
    if 1.0 / limits.growth <= change <= limits.growth:
        return Finding(stack, quantity, "varies", True, float(change), spread, law)
    upward = change > 1.0  # forward: larger at the top; gradient: larger at the input
    verdict: Verdict
    if law is not None and law.kind == "exponential":
        verdict = "explodes" if upward else "vanishes"
    else:
        verdict = "grows" if upward else "shrinks"
    return Finding(stack, quantity, verdict, True, float(change), spread, law)


def _not_carried(profile: Profile, quantity: Quantity) -> bool:
    """Whether a quantity that is NaN at every layer was never computed rather than computed as NaN: a prediction's
    (its walk refuses moments that are not finite, so NaN there is a quantity it did not compute, e.g. gradients
    with ``gradients=False``), a measurement's gradient where its loss required none (``meta["grad_source"]`` says
    so: frozen weights, inference mode), or a token correlation (one token has no pair; a NaN stream is the forward
    variance's finding). Otherwise a measurement computed it: NaN there is what the model gave."""
    from ..measurement.hooks import NO_GRADIENT_MEASURED

    if profile.kind == "predicted" or quantity == "fwd_corr":
        return True
    return quantity == "grad_var" and profile.meta.get("grad_source") == NO_GRADIENT_MEASURED


def _correlation_finding(stack: str, values: np.ndarray, limits: DiagnosisLimits) -> Finding:
    last = float(values[-1])
    if not math.isfinite(last):
        return Finding(stack, "fwd_corr", "not finite", True, math.nan)
    collapsed = last >= limits.collapse
    return Finding(stack, "fwd_corr", "collapses" if collapsed else "stays below rank collapse", collapsed, last)


def _branch_scales(profile: Profile) -> np.ndarray | None:
    """|β| of every layer's attention and FFN residual branch, shape (2, layers): from the plan the profile records
    (``meta["plan"]``, what :func:`sigprop.predict` read), else from its config's init plan; None when neither
    can be read (a partial or foreign config)."""
    from ..model.config import config_from_dict
    from ..model.init import make_plan

    recorded = profile.meta.get("plan") if isinstance(profile.meta, dict) else None
    if isinstance(recorded, dict) and isinstance(recorded.get("beta"), dict):
        n = 1 + max((r.layer for r in profile.site("layer")), default=-1)
        try:
            return np.abs(np.stack([np.broadcast_to(np.asarray(recorded["beta"][site], dtype=np.float64), (n,))
                                    for site in ("attn", "ffn")]))
        except (KeyError, ValueError, TypeError):
            return None
    try:
        plan = make_plan(config_from_dict(profile.config))
    except (ValueError, KeyError, TypeError, NotImplementedError):
        return None
    return np.abs(np.stack([np.asarray(plan.beta[site], dtype=np.float64) for site in ("attn", "ffn")]))


def _identity_finding(stack: str, rows: list, scales: np.ndarray | None) -> Finding | None:
    """The residual branches are scaled to (almost) nothing at initialisation: every |β| of the stack's layers at
    most IDENTITY_BETA (SkipInit and ReZero's 0, LayerScale's ≤ 1e-5 beyond 18 layers). The statistics cannot tell
    this apart from a stack whose blocks preserve them (a Post-LN stream's variance is 1 whatever its blocks do), so
    the init plan is asked."""
    if scales is None or not rows:
        return None
    layers = [r.layer for r in rows if 0 <= r.layer < scales.shape[1]]
    if len(layers) != len(rows) or scales[:, layers].max() > IDENTITY_BETA:
        return None
    return Finding(stack, "stream", "identity", False, rows[-1].fwd_var / rows[0].fwd_var)


def _stacks(profile: Profile) -> list[tuple[str, list]]:
    rows = profile.site("layer")
    config = profile.config or {}
    if config.get("arch") == "encoder_decoder":
        n_enc = int(config["n_layers"])
        return [("encoder", [r for r in rows if r.layer < n_enc]), ("decoder", [r for r in rows if r.layer >= n_enc])]
    return [("", rows)]


def _as_config(config: dict):
    """The :class:`~sigprop.model.config.TransformerConfig` of a profile's config dict, or None where it does not
    read as one (a foreign or partial config)."""
    from ..model.config import config_from_dict

    try:
        return config_from_dict(config)
    except (ValueError, KeyError, TypeError):
        return None


def _hint(config: dict, findings: list[Finding]) -> str | None:
    if "init" not in config:  # not a sigprop configuration: its fixes are not `--set` options
        return None
    from ..model.auto_init import beyond_dslm

    scheme, built = INIT_SCHEMES.get(config.get("init")), _as_config(config)
    variance = any(f.changes_with_depth for f in findings)
    collapse = any(f.flagged and f.quantity == "fwd_corr" for f in findings)
    hints = []
    if variance and scheme is not None and scheme.made_for == "post" and config.get("norm_position", "pre") != "post":
        hints.append("DeepNet (deepnorm) is a Post-LN scheme (Wang et al. 2022; Kedia et al. Table 3 gives it no "
                     "Pre-LN entry): its skip scale α = (2N)^(1/4) > 1 is renormalised after every layer there and "
                     "compounds here")
    if variance and not (scheme is not None and scheme.bounds_depth) and config.get("norm_position", "pre") in (
            "pre", "post") and (built is None or built.dslm_beta2 < 1.0):  # the doctor's rule: DSLM where its
        # forms hold, `auto` beyond them; no norm, or so few layers that β² = k/N^α reaches 1 (λ = 0): no scheme
        beyond = "" if built is None else beyond_dslm(built)
        hints.append("DeepScaleLM keeps forward and gradient variance bounded at any depth (Kedia et al. Sec. 3.5, "
                     "App. E.3–E.4): " + (f"its closed forms assume ReLU/GELU and LayerNorm, not {beyond}, so "
                                          "--set init=auto calibrates its output projections with sigprop's rules"
                                          if beyond else "--set init=dslm"))
    if collapse:
        hints.append("dropout caps the token correlation at r_max < 1 (Kedia et al. App. F; e.g. --set dropout=0.1), "
                     "and shaped attention keeps tokens apart by design (Noci et al. 2023; --set attention=shaped "
                     "--set attn_dropout=0)")
    return "; ".join(hints) or None


def diagnose(profile: Profile, limits: DiagnosisLimits | None = None) -> Diagnosis:
    """Does a profile's signal explode, vanish or collapse to rank one with depth: its findings, stack by stack.

    For each stack of ``profile`` (an encoder–decoder's encoder and decoder apart; module docstring): the forward
    variance from the first layer to the last and the gradient variance from the last to the first are "bounded"
    within a factor ``limits.growth``, else they grow / shrink, or explode / vanish where the change is exponential
    in depth (Kedia et al. Sec. 3.1, Table 3: Pre-LN's linear growth, App. E.1; Post-LN's c^{±N} gradient, App.
    E.2; DeepScaleLM's O(1), App. E.3–E.4), with the law fitted over the middle layers; the last layer's token
    correlation collapses at ``limits.collapse`` (Noci et al. 2022's rank collapse, Kedia et al. App. F); a stack
    whose every residual branch is scaled to ~0 is an identity (SkipInit, ReZero). Quantities the profile does not
    carry (NaN at every layer of a prediction, e.g. gradients with ``gradients=False``; a token correlation NaN at
    every layer: one token) are skipped; a measured variance NaN at every layer is "not finite" (NaN weights or
    inputs, a loss that overflowed).

    Args:
        profile: a predicted or measured :class:`~sigprop.core.profile.Profile` (its "layer" rows are read).
        limits: the :class:`DiagnosisLimits` (default: a factor 10 for variances, 0.99 for the correlation).

    Returns:
        The :class:`Diagnosis`, with a hint when something is flagged in a sigprop configuration.

    Example:
        >>> import sigprop
        >>> from sigprop.core.profile import Row
        >>> rows = tuple(Row(layer, "layer", fwd_var=1.5 ** layer, fwd_corr=0.995) for layer in range(16))
        >>> diagnosis = sigprop.diagnose(sigprop.Profile("predicted", {}, rows))
        >>> [(f.quantity, f.verdict, f.flagged) for f in diagnosis.findings]
        [('fwd_var', 'explodes', True), ('fwd_corr', 'collapses', True)]
        >>> round(diagnosis.findings[0].law.rate, 6)  # the fitted factor per layer
        1.5
    """
    limits = limits or DiagnosisLimits()
    findings = []
    scales = _branch_scales(profile) if profile.config else None
    for stack, rows in _stacks(profile):
        if not rows:
            continue
        for quantity in ("fwd_var", "grad_var", "fwd_corr"):
            values = np.array([getattr(r, quantity) for r in rows], dtype=np.float64)
            if np.all(np.isnan(values)) and _not_carried(profile, quantity):
                continue
            if quantity == "fwd_corr":
                findings.append(_correlation_finding(stack, values, limits))
            else:
                findings.append(_variance_finding(stack, quantity, values, limits))
        identity = _identity_finding(stack, rows, scales)
        if identity is not None:
            findings.append(identity)
    return Diagnosis(profile.kind, tuple(findings), _hint(profile.config or {}, findings))


def overflow_diagnosis(config: dict) -> Diagnosis:
    """The diagnosis of a model whose theory overflowed float64 (a :class:`~sigprop.core.errors.NotFinite` with
    ``overflow`` from its walk): its forward variance explodes, beyond any factor a profile could state.

    Args:
        config: the model's configuration (as a dict), for the hint.

    Returns:
        A predicted :class:`Diagnosis` with one flagged finding.

    Example:
        >>> overflow_diagnosis({}).lines()[0]
        "forward variance explodes: ×inf from the first layer to the last (past float64's range: the theory overflows)"
    """
    findings = [Finding("", "fwd_var", "explodes", True, math.inf, math.inf)]
    return Diagnosis("predicted", tuple(findings), _hint(config, findings))


def record_diagnosis(profile: Profile, limits: DiagnosisLimits | None = None) -> Diagnosis:
    """:func:`diagnose` of ``profile``, also recorded in its meta under "diagnosis" (and so in its JSON)."""
    diagnosis = diagnose(profile, limits)
    profile.meta["diagnosis"] = diagnosis.to_dict()
    return diagnosis


def side_by_side(predicted: Diagnosis, measured: Diagnosis) -> list[str]:
    """The measured findings, each followed by the theory's value of the same change (for ``sigprop compare``).
    The numbers, not the verdicts, are set side by side: a change near a limit can fall on either side of it in
    the theory and the measurement while the two agree closely."""
    theory = {(f.stack, f.quantity): f for f in predicted.findings}
    lines = []
    for f in measured.findings:
        t = theory.get((f.stack, f.quantity))
        if t is None:
            lines.append(f.describe())
            continue
        value = f"{t.change:.4f}" if f.quantity == "fwd_corr" else f"×{t.change:.3g}"
        lines.append(f"{f.describe()} (theory: {value})")
    return lines
