"""``sigprop doctor``: a model's signal propagation at initialisation, predicted and measured, diagnosed, and the fix
with the fixed model's profile beside the current one.

The model is a sigprop configuration (a preset or a config file), a Hugging Face configuration (mapped by
:func:`~sigprop.hf.config_map.map_hf_config`) or a training run's. The diagnosis is
:func:`~sigprop.analysis.diagnosis.diagnose` of the measured profile (of the predicted one when nothing is measured):
forward growth, vanishing or exploding gradients with their per-layer law, rank collapse, and a model whose layers
pass the stream on unchanged. The recommendation, when something is flagged:

* a variance that changes with depth (:attr:`Finding.changes_with_depth <sigprop.analysis.diagnosis.Finding.
  changes_with_depth>`: along the middle layers too, not by a boundary layer's jump alone) under a scheme other
  than DeepScaleLM: DeepScaleLM (Kedia et al. Sec. 3.5,
  App. E.3–E.4), the config's own λ / β overrides removed; ``init="auto"`` (DeepScaleLM calibrated by the rules,
  :mod:`sigprop.model.auto_init`) where the model has components its closed forms do not cover (SwiGLU / GeGLU,
  RMSNorm, DyT / Derf: on a 192-layer Llama-style decoder DSLM's output variance is 0.68, auto's 1.05,
  docs/results/auto-init.md);
* with it, Q/K scaled above their scheme's std (``qk_gain`` > 1): back to 1 (Sec. 3.3);
* rank collapse without dropout: dropout 0.1, which caps the token correlation below 1 (App. F);
* with a new scheme, a learning-rate warning (retune: the best rate moves, up or down by model:
  :data:`LEARNING_RATE_WARNING`);
* what the configuration shows (:mod:`sigprop.analysis.config_checks`): a Post-LN scheme in a Pre-LN stack
  (DeepScaleLM instead), a subcritical or saturated DyT/Derf (a smaller α).

The fixed configuration is predicted (and measured with the same seeds) so that the report sets the two profiles side
by side. A flagged verdict without a fix says why there is none (:func:`no_fix_reason`).

A model with weights of its own (a :class:`SavedModel`: a Hugging Face folder's safetensors, a training run's
checkpoint, a model object) is diagnosed as it is: its weights are the one draw measured (no fresh seeds), and the
theory reads their standard deviations (:meth:`InitPlan.from_model <sigprop.model.init.InitPlan.from_model>`,
:func:`~sigprop.hf.weights.read_hf_plan`), with ``approximations`` where trained weights break the i.i.d. theory's
assumptions. Its fix is still a re-initialisation, predicted and measured as a fresh model.

The hint speaks the model's language: ``sigprop.apply_init(model, "dslm")`` for a Hugging Face model,
``--set init=dslm`` for a sigprop configuration or run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, get_args

from ..core.errors import NotFinite
from ..core.jsonio import finite_or_null
from ..model.auto_init import beyond_dslm
from ..model.batch import Batch
from ..model.config import TransformerConfig
from .config_checks import Check, config_checks
from .diagnosis import Diagnosis, diagnose, overflow_diagnosis
from .fix_cases import fix_evidence

__all__ = ["DoctorReport", "Recommendation", "SavedModel", "GradientInterval", "doctor", "doctor_measured",
           "recommend", "no_fix_reason", "narrowing_text", "saved_plan", "measure_saved", "SOURCES", "INTERVAL_LEVEL"]

#: What the recommendation says of the learning rate when it changes the scheme to DeepScaleLM.
LEARNING_RATE_WARNING = (
    "learning rate: retune it with the new scheme rather than keep the old one. Its branches enter the stream scaled "
    "by β = {beta:.3g} (β² = {k:g}/N^{alpha:g}, N = {n}) and its embeddings start at unit variance, so under Adam one "
    "rate moves the function by another amount. Which way the best rate moves was measured to depend on the model: "
    "2× higher for DeepScaleLM than Xavier at 8 × 64 Post-LN (`depth`, docs/results/experiments/depth.md; Kedia et "
    "al. Sec. 4.2: deeper-thinner models needed higher rates), the same at 32 × 32 Pre-LN and lower for a "
    "Llama-style model under init='auto' (`doctor-fixes`)")

#: The probability of the interval the doctor gives for one model's first-layer gradient ratio (``spread=True``).
INTERVAL_LEVEL = 0.9

#: Where a doctored model came from: a sigprop configuration, a Hugging Face configuration or model, a training run.
Source = Literal["sigprop", "hf", "run"]
SOURCES: tuple[Source, ...] = get_args(Source)


@dataclass(frozen=True)
class Recommendation:
    """The fix: the config fields it sets (``changes``), why, how to apply it in the model's language, and what
    training measured of fixes of its kind (``evidence``: :func:`~sigprop.analysis.fix_cases.fix_evidence`)."""

    changes: dict
    reasons: tuple[str, ...]
    apply: str
    evidence: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"changes": dict(self.changes), "reasons": list(self.reasons), "apply": self.apply,
                "evidence": list(self.evidence)}


@dataclass(frozen=True)
class SavedModel:
    """A model with weights of its own, diagnosed as it is (module docstring).

    Attributes:
        describe: what it is, for the report (e.g. "the saved weights of gpt2-scaled/").
        load: builds the model with its weights (called once).
        read_plan: ``read_plan(model, config)``: the :class:`~sigprop.model.init.InitPlan` its weights show, for the
            theory of ``config``; ``ValueError`` where its weights cannot be read (the theory then describes a fresh
            model of the config, and the report says so).
        batch: ``batch(config, batch_size)``: (its batch, what tokenised it), e.g. text encoded by a Hugging Face
            folder's own tokenizer, or (None, …) for sigprop's batch of the config.
        where: where its weights live, recorded in a measurement of them (``meta["saved"]``) so that a later
            ``sigprop compare --measured`` reads their plan again: ``{"kind": "run", "path", "checkpoint"}`` or
            ``{"kind": "hf", "path"}`` (absolute paths); None for a model in memory.
    """

    describe: str
    load: Callable
    read_plan: Callable
    batch: Callable | None = None
    where: dict | None = None

    @classmethod
    def of(cls, model, describe: str = "the model object") -> SavedModel:
        """A model in memory diagnosed as it is: a sigprop :class:`~sigprop.model.transformer.Transformer` (its plan
        read by :meth:`InitPlan.from_model <sigprop.model.init.InitPlan.from_model>`) or a Hugging Face model of a
        mapped family (:func:`~sigprop.hf.weights.read_hf_plan`).

        Example:
            >>> import sigprop
            >>> from sigprop.analysis.doctor import SavedModel, doctor
            >>> config = sigprop.TransformerConfig(n_layers=2, d_model=32, n_heads=2, vocab_size=300, seq_len=16)
            >>> report = doctor(config, saved=SavedModel.of(sigprop.Transformer(config)))  # doctest: +SKIP
        """
        def read_plan(m, config):
            if callable(getattr(m, "sites", None)):
                from ..model.init import InitPlan

                return InitPlan.from_model(m, strict=False)
            from ..hf.weights import read_hf_plan

            return read_hf_plan(m, config)

        return cls(describe, lambda: model, read_plan)


@dataclass(frozen=True)
class GradientInterval:
    """Where one freshly drawn model's first-layer gradient variance, relative to the last layer's, falls with
    probability ``level`` (:func:`~sigprop.theory.spread.gradient_ratio_interval` of a prediction with spread).

    Attributes:
        expected: the predicted expectation of the ratio σ²_g(0)/σ²_g(top).
        low: the interval's lower end.
        high: its upper end.
        level: its probability.
        log_sd: the predicted seed-to-seed standard deviation of the ratio's log.

    Example:
        >>> interval = GradientInterval(expected=4.0, low=1.55, high=8.03, level=0.9, log_sd=0.5)
        >>> round(interval.decades, 3)  # log10(8.03 / 1.55)
        0.714
    """

    expected: float
    low: float
    high: float
    level: float
    log_sd: float

    @property
    def decades(self) -> float:
        """The interval's width in decades, log10(high / low)."""
        import math

        return math.log10(self.high / self.low)

    def describe(self) -> str:
        return (f"one model's first-layer gradient, relative to the last layer's: {self.low:.3g} to {self.high:.3g} "
                f"with {100 * self.level:g}% probability (expected {self.expected:.3g}, log-sd {self.log_sd:.3g})")

    def to_dict(self) -> dict:
        return finite_or_null({"expected": self.expected, "low": self.low, "high": self.high, "level": self.level,
                               "log_sd": self.log_sd, "decades": self.decades})

    @classmethod
    def of(cls, predicted, level: float = INTERVAL_LEVEL) -> GradientInterval | None:
        """The interval of a prediction with spread, or None where it has none (no spread, no gradient)."""
        from ..theory.spread import gradient_ratio_interval

        if predicted is None or not predicted.has_spread:
            return None
        try:
            low, high = gradient_ratio_interval(predicted, 0, level)
        except ValueError:
            return None
        rows = {r.layer: r for r in predicted.site("layer")}
        return cls(rows[0].grad_var / rows[max(rows)].grad_var, low, high, level, rows[0].grad_var_log_sd)


def narrowing_text(current: GradientInterval, fixed: GradientInterval) -> str:
    """How the fix changes one model's interval: "the fix narrows it from 2.1 to 0.6 decades (1.3 to 3.9 …)"."""
    verb = "narrows" if fixed.decades < current.decades else "does not narrow"
    return (f"the fix {verb} it: {current.decades:.2g} → {fixed.decades:.2g} decades wide ({fixed.low:.3g} to "
            f"{fixed.high:.3g}, expected {fixed.expected:.3g})")


@dataclass
class DoctorReport:
    """The current model's profiles and diagnosis and, when a fix is recommended, the fixed model's."""

    config: TransformerConfig | None  # None: a model sigprop has no theory for (``theory`` says why)
    source: Source
    seeds: int
    predicted: object | None
    measured: object | None
    diagnosis: Diagnosis
    recommendation: Recommendation | None
    fixed_config: TransformerConfig | None = None
    fixed_predicted: object | None = None
    fixed_measured: object | None = None
    fixed_diagnosis: Diagnosis | None = None
    agreement: dict = field(default_factory=dict)  # "current" / "fixed": {quantity: median relative error}
    noise: dict = field(default_factory=dict)  # "current" / "fixed": {quantity: the measurement's median relative SE}
    checks: list = field(default_factory=list)  # config_checks of the current model
    fixed_checks: list = field(default_factory=list)
    measured_what: str = "fresh seeds"  # what the current model's measurement is of: fresh seeds or saved weights
    approximations: list = field(default_factory=list)  # where the theory of saved weights is an approximation
    theory: str | None = None  # why there is no theory (a model whose configuration sigprop cannot map)
    intervals: dict = field(default_factory=dict)  # "current" / "fixed": GradientInterval (with spread=True)

    @property
    def no_fix(self) -> str | None:
        """Why a flagged model has no recommendation (:func:`no_fix_reason`); None when not flagged or fixed."""
        if not self.flagged or self.recommendation is not None:
            return None
        if self.config is None:
            return f"without a theory of the model sigprop cannot derive a fix: {self.theory}"
        return no_fix_reason(self.config, self.diagnosis)

    @property
    def flagged(self) -> bool:
        return self.diagnosis.flagged or any(c.flagged for c in self.checks)

    @property
    def verdict(self) -> str:
        if not self.flagged:
            return "stable at initialisation: nothing flagged"
        flagged = "; ".join([*(f.describe() for f in self.diagnosis.findings if f.flagged),
                             *(c.message for c in self.checks if c.flagged)])
        return f"unstable at initialisation: {flagged}"

    def to_dict(self) -> dict:
        """Plain JSON: a value that is not finite (a diagnosis of "not finite") becomes null."""

        def profile(p):
            return None if p is None else [{"layer": r.layer, "site": r.site, "fwd_var": r.fwd_var,
                                            "fwd_corr": r.fwd_corr, "grad_var": r.grad_var,
                                            "grad_corr": r.grad_corr} for r in p.site("layer")]

        return finite_or_null({"kind": "doctor", "source": self.source,
                "config": None if self.config is None else self.config.to_dict(), "seeds": self.seeds,
                "measured_what": self.measured_what, "approximations": list(self.approximations),
                "theory": self.theory,
                "no_fix": self.no_fix, "verdict": self.verdict, "diagnosis": self.diagnosis.to_dict(),
                "checks": [c.to_dict() for c in self.checks], "fixed_checks": [c.to_dict() for c in self.fixed_checks],
                "recommendation": None if self.recommendation is None else self.recommendation.to_dict(),
                "fixed_config": None if self.fixed_config is None else self.fixed_config.to_dict(),
                "fixed_diagnosis": None if self.fixed_diagnosis is None else self.fixed_diagnosis.to_dict(),
                "agreement": self.agreement, "noise": finite_or_null(self.noise),
                "gradient_interval": {k: v.to_dict() for k, v in self.intervals.items()},
                "profiles": {"predicted": profile(self.predicted), "measured": profile(self.measured),
                             "fixed_predicted": profile(self.fixed_predicted),
                             "fixed_measured": profile(self.fixed_measured)}})  # NaN, ±inf: null


def recommend(config: TransformerConfig, diagnosis: Diagnosis, source: Source = "sigprop",
              checks: list[Check] = ()) -> Recommendation | None:
    """The fix for ``diagnosis`` of ``config`` and its flagged ``checks`` (module docstring), or None when nothing
    flagged has one."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)} (got {source!r})")
    changes, reasons = {}, []
    depth = any(f.flagged and f.changes_with_depth for f in diagnosis.findings)
    collapse = any(f.flagged and f.quantity == "fwd_corr" for f in diagnosis.findings)
    if depth and not config.scheme.bounds_depth and config.norm_position in ("pre", "post") and _keeps_skip(config):
        beyond = beyond_dslm(config)
        changes["init"] = "auto" if beyond else "dslm"
        reasons.append("DeepScaleLM keeps forward and gradient variance bounded at any depth (Kedia et al. Sec. 3.5, "
                       "App. E.3–E.4)" + (f"; its closed forms assume ReLU/GELU and LayerNorm, not {beyond}, so "
                                          "init='auto' calibrates its output projections with sigprop's rules"
                                          if beyond else ""))
    if depth and config.qk_gain > 1.0:
        changes["qk_gain"] = 1.0
        reasons.append(f"Q/K at {config.qk_gain:g}× their scheme's std make the scores s² {config.qk_gain ** 4:g}× "
                       "larger and the softmax's gradient explode (Kedia et al. Sec. 3.3): back to 1×")
    if collapse and config.dropout == 0.0:
        changes["dropout"] = 0.1
        reasons.append("dropout caps the token correlation below rank collapse (Kedia et al. App. F)")
    for check in checks:
        if not check.flagged:
            continue
        if "init" in changes and "norm_alpha" in check.changes:  # a new scheme moves the stream α acts on: the
            reasons.append(check.subject + ": checked again on the fixed model")  # fixed model's
            continue  # own checks say whether α must move too
        for key, value in check.changes.items():  # two α fixes: the smaller α satisfies both
            if key == "init":  # a scheme the check proposes is the depth rule's choice: auto beyond DSLM's forms
                beyond = beyond_dslm(config)
                value = changes.get("init") or ("auto" if beyond else value)
                if beyond and "init" not in changes:
                    reasons.append(f"DeepScaleLM's closed forms assume ReLU/GELU and LayerNorm, not {beyond}, so "
                                   "init='auto' calibrates its output projections with sigprop's rules")
            changes[key] = min(value, changes[key]) if key == "norm_alpha" and key in changes else value
        reasons.append(check.message)
    if "init" in changes:  # the scheme's own residual scales
        changes.update({k: None for k in ("lam", "beta") if getattr(config, k) is not None})
        beta = config.dslm_beta2 ** 0.5
        reasons.append(LEARNING_RATE_WARNING.format(n=config.total_layers, beta=beta, k=config.beta_k,
                                                    alpha=config.beta_alpha))
    if "norm_alpha" in changes:
        changes.update({k: None for k in ("norm_alpha_attn", "norm_alpha_ffn") if getattr(config, k) is not None})
    if not changes:
        return None
    if source == "hf":
        extra = ", ".join(f"{k} = {v}" for k, v in changes.items() if k not in ("init", "lam", "beta"))
        if "init" not in changes:
            apply = f"set {extra}"
        else:
            apply = f"sigprop.apply_init(model, {changes['init']!r})" + (f", then set {extra}" if extra else "")
    else:
        apply = " ".join(f"--set {k}={'none' if v is None else v}" for k, v in changes.items())
    return Recommendation(changes=changes, reasons=tuple(reasons), apply=apply,
                          evidence=fix_evidence(config, changes))


def _keeps_skip(config: TransformerConfig) -> bool:
    """Whether DeepScaleLM's residual scales keep a skip path at this depth: β² = k/N^α < 1 (Sec. 3.5). At N ≤ k
    (two layers, k = 2) λ = 0 would remove every skip connection: no fix a doctor should propose."""
    return config.dslm_beta2 < 1.0


def no_fix_reason(config: TransformerConfig, diagnosis: Diagnosis) -> str:
    """Why :func:`recommend` has no fix for the flagged findings of ``diagnosis`` of ``config``: a sentence."""
    flagged = [f for f in diagnosis.findings if f.flagged]
    depth = [f for f in flagged if f.changes_with_depth]
    if depth and config.scheme.bounds_depth:
        return (f"the model already uses init={config.init!r}, the scheme that bounds the variances with depth; what "
                f"remains ({depth[0].describe()}) is beyond what an initialisation changes: a deeper look at its "
                "components (sigprop compare) shows which layer departs from the theory")
    if depth and config.norm_position not in ("pre", "post"):
        return (f"the model has no norms (norm_position={config.norm_position!r}): DeepScaleLM's bounds need a Pre-LN "
                "or Post-LN stack, and sigprop has no fix for an unnormalised one")
    if depth and not _keeps_skip(config):
        return (f"with {config.total_layers} layers DeepScaleLM's β² = {config.beta_k:g}/N^{config.beta_alpha:g} "
                "reaches 1 and its λ = 0 would remove every skip connection; a change over so few layers is not a "
                "depth law that a residual scaling fixes")
    if any(f.quantity == "fwd_corr" for f in flagged) and config.dropout > 0:
        return (f"the tokens collapse although the model has dropout {config.dropout:g}: dropout is the fix sigprop "
                "knows (Kedia et al. App. F), and it is already there")
    kinds = ", ".join(sorted({f.verdict for f in flagged})) or "a configuration check"
    return f"sigprop knows no fix for what is flagged ({kinds})"


def agreement_text(errors: dict, noise: dict) -> str:
    """"grad_var 6.21% (noise 5.90%), …": each quantity's median relative error, theory against measurement, and
    beside it the measurement's own median relative standard error where the seeds give one."""
    def one(q, v):
        n = noise.get(q, float("nan"))
        return f"{q} {100 * v:.2f}%" + (f" (noise {100 * n:.2f}%)" if n == n else "")
    return ", ".join(one(q, v) for q, v in errors.items())


def _median_errors(comparison) -> tuple[dict, dict]:
    """{quantity: median relative error} of a comparison, and {quantity: the measurement's median relative standard
    error over the seeds} (NaN with one seed): noise alone gives a median relative error of ~0.67 times the latter
    (the median of |z| for a normal z), so an error at that level is the seeds' count, not the theory."""
    summaries = {q: s for q, s in comparison.summaries.items() if q != "fwd_mean"}  # mean: ~0
    return ({q: float(s.median_rel) for q, s in summaries.items()},
            {q: float(s.median_rel_se) for q, s in summaries.items()})


def doctor(config: TransformerConfig, source: Source = "sigprop", seeds: int = 2, batch_size: int = 4,
           progress=None, saved: SavedModel | None = None, spread: bool = False) -> DoctorReport:
    """Diagnose the model of ``config`` at initialisation, recommend a fix and show the fixed model's profile.

    Args:
        config: the model's configuration (a Hugging Face model's mapped one).
        source: where it came from (:data:`SOURCES`): the hint speaks its language.
        seeds: fresh models measured per configuration (0: theory only).
        batch_size: sequences of the default corpus measured.
        progress: a :class:`~sigprop.core.progress.Progress` (or None).
        saved: a model with weights of its own: measured as it is (its one draw, whatever ``seeds``) and predicted
            from its weights (module docstring).
        spread: predict the seed-to-seed spread too (:mod:`sigprop.theory.spread`): the report's ``intervals``
            give where one freshly drawn model's first-layer gradient ratio falls with 90% probability
            (:class:`GradientInterval`), for the current model (not for one with weights of its own: they are
            drawn) and the fixed one.

    Returns:
        The :class:`DoctorReport`.

    Raises:
        ValueError: an unknown source, a negative seed count; with ``spread`` an encoder–decoder.
    """
    from ..core.progress import tasks
    from ..theory.predict import predict
    from .experiment import batch_prediction, compare_config, config_batch

    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)} (got {source!r})")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 0:
        raise ValueError(f"seeds must be an integer >= 0 (got {seeds!r})")
    if spread:
        from ..theory.spread import check_spread

        check_spread(config)
    progress = tasks(progress)
    approximations: list[str] = []
    tokenised_by: list[str] = []  # a saved model's own tokenizer, when it made the batch

    def look(cfg: TransformerConfig, what: str, own: SavedModel | None = None):
        with_spread = spread and own is None
        if seeds == 0 and own is None:
            progress.task(f"predict the {what} model ({cfg.total_layers} layers"
                          f"{', spread' if with_spread else ''})", None)
            return predict(cfg, batch_size=batch_size, spread=with_spread), None, {}, {}
        batch = measured = plan = None
        if own is not None and own.batch is not None:
            batch, tokenised = own.batch(cfg, batch_size)
            if batch is not None:
                filled = cfg
                tokenised_by.append(tokenised)
        if batch is None:
            progress.task(f"build the {what} model's batch (a corpus is tokenised once, then cached)", None)
            filled, batch = config_batch(cfg, batch_size, None, 0, False)
        if own is not None:
            progress.task(f"load and measure {own.describe}", None)
            model = own.load()
            plan = saved_plan(own, model, filled, approximations)
            measured = measure_saved(own, model, filled, batch)
        prediction = batch_prediction(filled, batch, plan=plan)
        predict_tick = progress.task(f"predict the {what} model ({cfg.total_layers} layers, forward and backward"
                                     f"{', spread' if with_spread else ''})", prediction.steps(spread=with_spread))
        measure_tick = None if own is not None else progress.task(
            f"measure the {what} model ({cfg.total_layers} layers × {seeds} seeds)", seeds)
        predicted, measured, comparison = compare_config(filled, batch, seeds, progress=measure_tick,
                                                         predict_progress=predict_tick, prediction=prediction,
                                                         measured=measured, spread=with_spread)
        return predicted, measured, *_median_errors(comparison)

    def looked(cfg: TransformerConfig, what: str, own: SavedModel | None = None):
        """``look``, and its diagnosis; a theory that overflows float64 is diagnosed as exploding (its profile,
        and a measurement compared with it, are then absent)."""
        try:
            predicted, measured, errors, noise = look(cfg, what, own)
        except NotFinite as err:
            if not err.overflow:  # NaN given (weights, a measured boundary): no overflow to diagnose
                raise ValueError(f"the {what} model's theory is NaN ({err}): NaN in its weights or in its measured "
                                 "gradient; `sigprop measure` shows at which layers") from None
            return None, None, {}, {}, overflow_diagnosis(cfg.to_dict())
        if measured is not None and predicted is not None and "plan" in predicted.meta:
            measured.meta.setdefault("plan", predicted.meta["plan"])  # β as read from the weights, not the config's
        return predicted, measured, errors, noise, diagnose(measured if measured is not None else predicted)

    predicted, measured, errors, noise, diagnosis = looked(config, "current", saved)
    checks = config_checks(config, predicted)
    report = DoctorReport(config, source, 1 if saved is not None else seeds, predicted, measured, diagnosis,
                          recommend(config, diagnosis, source, checks), agreement={"current": errors} if errors else {},
                          noise={"current": noise} if errors else {},
                          checks=checks, measured_what=("theory only" if measured is None else
                                                        "fresh seeds") if saved is None else saved.describe + "".join(
                              f", on text tokenised by {t}" for t in tokenised_by),
                          approximations=approximations)
    current = None if predicted is None else GradientInterval.of(predicted)
    if current is not None:
        report.intervals["current"] = current
    if report.recommendation is not None:
        fixed = config.replace(**report.recommendation.changes)
        f_pred, f_meas, f_errors, f_noise, report.fixed_diagnosis = looked(fixed, "fixed")
        report.fixed_config, report.fixed_predicted, report.fixed_measured = fixed, f_pred, f_meas
        report.fixed_checks = config_checks(fixed, f_pred)
        if f_errors:
            report.agreement["fixed"], report.noise["fixed"] = f_errors, f_noise
        fixed_interval = None if f_pred is None else GradientInterval.of(f_pred)
        if fixed_interval is not None:
            report.intervals["fixed"] = fixed_interval
    return report


def doctor_measured(build: Callable, batch, seeds: list[int], describe: str, theory: str, source: Source = "hf",
                    progress=None) -> DoctorReport:
    """Diagnose a model sigprop has no theory for from its measurement alone.

    Args:
        build: ``build(seed)`` returns the model to measure (the same saved model for its one seed, or a fresh one).
        batch: what :func:`sigprop.measure` takes for it.
        seeds: the seeds to build and measure, averaged.
        describe: what is measured, for the report.
        theory: why there is no theory (:func:`sigprop.hf.config_map.not_mapped_reason`).
        source: where the model came from (:data:`SOURCES`).
        progress: a :class:`~sigprop.core.progress.Progress` (or None).

    Returns:
        A :class:`DoctorReport` without config, prediction or fix; its ``theory`` says why, and a flagged verdict
        says that no fix can be derived.
    """
    from ..core.progress import tasks
    from ..measurement.average import average_profiles
    from ..measurement.hooks import measure

    tick = tasks(progress).task(f"measure {describe} × {len(seeds)}", len(seeds))
    profiles = []
    for seed in seeds:
        model = build(seed)
        model.train()
        profiles.append(measure(model, batch))
        tick(1)
    measured = average_profiles(profiles, {}, {"seeds": list(seeds), "theory": theory})
    return DoctorReport(None, source, len(seeds), None, measured, diagnose(measured), None, measured_what=describe,
                        theory=theory)


def saved_plan(saved: SavedModel, model, config: TransformerConfig, notes: list[str]):
    """The plan the weights of ``model`` (``saved``, loaded) show for the theory of ``config``, or ``None`` where
    they cannot be read (the theory then describes a fresh model of the configuration); what they break of the
    theory's assumptions, or why they cannot be read, is appended to ``notes``."""
    try:
        plan = saved.read_plan(model, config)
    except ValueError as err:
        notes.append(f"the theory describes a freshly initialised model of this configuration: the weights could "
                     f"not be read ({err})")
        return None
    notes.extend(plan.notes.get("approximations", ()))
    return plan


def measure_saved(saved: SavedModel, model, config: TransformerConfig, batch: Batch | dict):
    """``model`` (``saved``, loaded) measured once on ``batch`` in training mode (dropout on, as sigprop measures its
    models, its masks drawn under ``torch.manual_seed(0)``, the same on every run), with the meta a stored
    measurement carries (its one seed, the batch's and the config's fingerprints, what was measured)."""
    import torch

    from ..measurement.hooks import measure
    from ..model.batches import batch_fingerprint, config_fingerprint

    batch = Batch.from_any(batch)
    meta = {"seeds": [0], "tokens": int(batch.inputs.numel()), "sequences": batch.sequences,
            "batch_sha256": batch_fingerprint(batch), "config_sha256": config_fingerprint(config),
            "weights": saved.describe}
    if saved.where is not None:
        meta["saved"] = dict(saved.where)
    torch.manual_seed(0)
    return measure(model.train(), batch, config=config.to_dict(), meta=meta)
