"""``sigprop doctor``: a model's signal propagation at initialisation, predicted and measured, diagnosed, and the fix
with the fixed model's profile beside the current one.

The model is a sigprop configuration (a preset or a config file), a Hugging Face configuration (mapped by
:func:`~sigprop.hf.config_map.map_hf_config`) or a training run's. The diagnosis is
:func:`~sigprop.analysis.diagnosis.diagnose` of the measured profile (of the predicted one when nothing is measured):
forward growth, vanishing or exploding gradients with their per-layer law, rank collapse, and a model whose layers
pass the stream on unchanged. The recommendation, when something is flagged:

* a variance that changes with depth under a scheme other than DeepScaleLM: DeepScaleLM (Kedia et al. Sec. 3.5,
  App. E.3–E.4), the config's own λ / β overrides removed; ``init="auto"`` (DeepScaleLM calibrated by the rules,
  :mod:`sigprop.model.auto_init`) where the model has components its closed forms do not cover (SwiGLU / GeGLU,
  RMSNorm, DyT / Derf: on a 192-layer Llama-style decoder DSLM's output variance is 0.68, auto's 1.05,
  docs/auto-init.md);
* with it, Q/K scaled above their scheme's std (``qk_gain`` > 1): back to 1 (Sec. 3.3);
* rank collapse without dropout: dropout 0.1, which caps the token correlation below 1 (App. F);
* with a new scheme, a learning-rate warning (DeepScaleLM's best rate sits higher: :data:`LEARNING_RATE_WARNING`);
* what the configuration shows (:mod:`sigprop.analysis.config_checks`): a Post-LN scheme in a Pre-LN stack
  (DeepScaleLM instead), a subcritical or saturated DyT/Derf (a smaller α).

The fixed configuration is predicted (and measured with the same seeds) so that the report sets the two profiles side
by side. The hint speaks the model's language: ``sigprop.apply_init(model, "dslm")`` for a Hugging Face model,
``--set init=dslm`` for a sigprop configuration or run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.jsonio import finite_or_null
from ..model.auto_init import beyond_dslm
from ..model.config import TransformerConfig
from .config_checks import Check, config_checks
from .diagnosis import DEPTH_VERDICTS, DSLM_INITS, Diagnosis, diagnose

__all__ = ["DoctorReport", "Recommendation", "doctor", "recommend", "SOURCES"]

#: What the recommendation says of the learning rate when it changes the scheme to DeepScaleLM.
LEARNING_RATE_WARNING = (
    "learning rate: retune it upwards with the new scheme. Its branches enter the stream scaled by β = {beta:.3g} "
    "(β² = 2/N, N = {n}) and its embeddings are ~25× Xavier's, so under Adam one rate moves the function less (in "
    "sigprop's `depth` experiment, docs/experiments/depth.md, at 8 × 64 Post-LN, where both optima lie inside their "
    "grids, DeepScaleLM's best rate is 2× Xavier's; Kedia et al. Sec. 4.2: deeper-thinner models needed higher "
    "rates)")

#: Where a doctored model came from: a sigprop configuration, a Hugging Face configuration or model, a training run.
SOURCES = ("sigprop", "hf", "run")


@dataclass(frozen=True)
class Recommendation:
    """The fix: the config fields it sets (``changes``), why, and how to apply it in the model's language."""

    changes: dict
    reasons: tuple[str, ...]
    apply: str

    def to_dict(self) -> dict:
        return {"changes": dict(self.changes), "reasons": list(self.reasons), "apply": self.apply}


@dataclass
class DoctorReport:
    """The current model's profiles and diagnosis and, when a fix is recommended, the fixed model's."""

    config: TransformerConfig
    source: str
    seeds: int
    predicted: object
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
        def profile(p):
            return None if p is None else [{"layer": r.layer, "site": r.site, "fwd_var": r.fwd_var,
                                            "fwd_corr": r.fwd_corr, "grad_var": r.grad_var,
                                            "grad_corr": r.grad_corr} for r in p.site("layer")]

        return {"kind": "doctor", "source": self.source, "config": self.config.to_dict(), "seeds": self.seeds,
                "verdict": self.verdict, "diagnosis": self.diagnosis.to_dict(),
                "checks": [c.to_dict() for c in self.checks], "fixed_checks": [c.to_dict() for c in self.fixed_checks],
                "recommendation": None if self.recommendation is None else self.recommendation.to_dict(),
                "fixed_config": None if self.fixed_config is None else self.fixed_config.to_dict(),
                "fixed_diagnosis": None if self.fixed_diagnosis is None else self.fixed_diagnosis.to_dict(),
                "agreement": self.agreement, "noise": finite_or_null(self.noise),
                "profiles": {"predicted": profile(self.predicted), "measured": profile(self.measured),
                             "fixed_predicted": profile(self.fixed_predicted),
                             "fixed_measured": profile(self.fixed_measured)}}


def recommend(config: TransformerConfig, diagnosis: Diagnosis, source: str = "sigprop",
              checks: list[Check] = ()) -> Recommendation | None:
    """The fix for ``diagnosis`` of ``config`` and its flagged ``checks`` (module docstring), or None when nothing
    flagged has one."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)} (got {source!r})")
    changes, reasons = {}, []
    depth = any(f.flagged and f.verdict in DEPTH_VERDICTS for f in diagnosis.findings)
    collapse = any(f.flagged and f.quantity == "fwd_corr" for f in diagnosis.findings)
    if depth and config.init not in (*DSLM_INITS, "auto") and config.norm_position in ("pre", "post"):
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
            reasons.append(check.message.split(":")[0] + ": checked again on the fixed model")  # fixed model's
            continue  # own checks say whether α must move too
        for key, value in check.changes.items():  # two α fixes: the smaller α satisfies both
            changes[key] = min(value, changes[key]) if key == "norm_alpha" and key in changes else value
        reasons.append(check.message)
    if "init" in changes:  # the scheme's own residual scales
        changes.update({k: None for k in ("lam", "beta") if getattr(config, k) is not None})
        beta = (config.beta_k / config.total_layers**config.beta_alpha) ** 0.5
        reasons.append(LEARNING_RATE_WARNING.format(n=config.total_layers, beta=beta))
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
    return Recommendation(changes=changes, reasons=tuple(reasons), apply=apply)


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


def doctor(config: TransformerConfig, source: str = "sigprop", seeds: int = 2, batch_size: int = 4,
           progress=None) -> DoctorReport:
    """Predict (and with ``seeds`` ≥ 1 measure, on a batch of ``batch_size`` sequences of the default corpus) the
    model of ``config``, diagnose it, recommend a fix (:func:`recommend`) and predict and measure the fixed model the
    same way. ``progress``: a :class:`~sigprop.core.progress.Progress` (or None)."""
    from ..core.progress import tasks
    from ..theory.predict import predict
    from .experiment import batch_prediction, compare_config, config_batch

    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)} (got {source!r})")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 0:
        raise ValueError(f"seeds must be an integer >= 0 (got {seeds!r})")
    progress = tasks(progress)

    def look(cfg: TransformerConfig, what: str):
        if seeds == 0:
            progress.task(f"predict the {what} model ({cfg.total_layers} layers)", None)
            return predict(cfg, batch_size=batch_size), None, {}, {}
        filled, batch = config_batch(cfg, batch_size, None, 0, False)
        prediction = batch_prediction(filled, batch)
        predict_tick = progress.task(f"predict the {what} model ({cfg.total_layers} layers, forward and backward)",
                                     prediction.steps())
        measure_tick = progress.task(f"measure the {what} model ({cfg.total_layers} layers × {seeds} seeds)", seeds)
        predicted, measured, comparison = compare_config(filled, batch, seeds, progress=measure_tick,
                                                         predict_progress=predict_tick, prediction=prediction)
        return predicted, measured, *_median_errors(comparison)

    predicted, measured, errors, noise = look(config, "current")
    diagnosis = diagnose(measured if measured is not None else predicted)
    checks = config_checks(config, predicted)
    report = DoctorReport(config, source, seeds, predicted, measured, diagnosis,
                          recommend(config, diagnosis, source, checks), agreement={"current": errors} if errors else {},
                          noise={"current": noise} if errors else {},
                          checks=checks)
    if report.recommendation is not None:
        fixed = config.replace(**report.recommendation.changes)
        f_pred, f_meas, f_errors, f_noise = look(fixed, "fixed")
        report.fixed_config, report.fixed_predicted, report.fixed_measured = fixed, f_pred, f_meas
        report.fixed_diagnosis = diagnose(f_meas if f_meas is not None else f_pred)
        report.fixed_checks = config_checks(fixed, f_pred)
        if f_errors:
            report.agreement["fixed"], report.noise["fixed"] = f_errors, f_noise
    return report
