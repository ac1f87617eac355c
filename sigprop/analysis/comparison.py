"""``sigprop.compare`` (this module): join a predicted and a measured :class:`~sigprop.core.profile.Profile` on
(layer, site) and summarise the agreement per quantity (ARCHITECTURE.md, "Profiles and comparison").

For each quantity: median, mean and 90th-percentile relative error |pred − meas|/|meas|, the largest absolute
error, and R² = 1 − Σ(pred − meas)²/Σ(meas − mean(meas))² over the layers — computed on log values when the
measured quantity spans more than a decade (gradient variances of deep models), as the paper's Figures 2–3 are
read; it is NaN for a quantity that does not vary across layers. Correlations are also judged by absolute error
(a relative error of a correlation near 0 means little).

When the measurement carries standard errors (a seed average: ``meta["stderr"]``), each quantity also gets the share
of rows whose error is within two of them, the share within t_{0.975, K−1} of them (``within_t95``: a mean of K seeds
has K − 1 degrees of freedom, so an exact theory meets two standard errors only with probability 2F_t(2; K−1) − 1,
0.71 at K = 2, and the Student interval with probability 0.95) and the median |pred − meas|/SE, which say whether a
discrepancy is larger than the measurement can resolve, and the *noise ceiling* of R²: 1 − Σ SE²/Σ(meas −
mean(meas))², the R² that an exact theory scores against this measurement in expectation (its residuals are then the
measurement errors, E Σ(pred − meas)² = Σ SE², whatever their correlation across layers; on logs SE/meas is used). An
R² near its ceiling is limited by the measurement, not by the theory; a quantity that barely varies (a DeepScaleLM
forward variance) has a low ceiling, and only more seeds raise it. When the prediction takes a boundary from the same
measurement (the gradient measured at the top layer), its errors share the measurement's and R² may exceed the
ceiling. (For quantities whose seed-to-seed spread is log-normal-like, such as a deep Post-LN gradient, the SE of a
few seeds is itself uncertain; see docs/results/accuracy.md, "R² against its noise ceiling". The comparison's
``meta["heavy_tails"]`` names the layers where Cochran's rule says the seeds are too few:
:mod:`sigprop.measurement.spread`.)"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ..core.jsonio import finite_or_null, json_number, write_csv_atomic, write_json_atomic
from ..core.profile import QUANTITIES, Profile
from ..measurement.spread import heavy_tails
from ..theory.spread import BAND_LEVEL, profile_bands
from .diagnosis import diagnose, side_by_side

__all__ = ["Comparison", "QuantitySummary", "compare", "summarise", "comparison_side", "measured_from_json",
           "read_measured"]


@dataclass(frozen=True)
class QuantitySummary:
    """Agreement of one quantity over the compared rows."""

    quantity: str
    n: int
    median_rel: float
    mean_rel: float
    p90_rel: float
    max_abs: float
    median_abs: float
    r2: float
    r2_log: bool
    within_2se: float = float("nan")
    median_z: float = float("nan")
    r2_noise_ceiling: float = float("nan")
    median_rel_se: float = float("nan")  # the measurement's own standard error relative to it, median over rows
    within_band: float = float("nan")  # share of the rows with a predicted spread whose measured value is in its band
    band_rows: int = 0  # the rows judged against the band (a spread > 0)
    # share of the rows whose error is within t_{0.975, K−1} standard errors (K seeds: the 95% two-sided Student
    # interval an exact theory meets 95% of the time; ``within_2se`` it meets 2F_t(2; K−1) − 1 of the time, 0.71 at
    # K = 2, 0.94 at K = 16)
    within_t95: float = float("nan")
    not_finite: int = 0  # rows left out: the prediction or the measurement not finite there (an overflow)

    def to_dict(self) -> dict:
        return finite_or_null(dict(self.__dict__))


def summarise(quantity: str, pred, meas, se=None, band=None, dof: int | None = None) -> QuantitySummary:
    """:class:`QuantitySummary` of arrays ``pred`` vs ``meas`` (rows where either is not finite left out and
    counted: ``not_finite``); ``se``: the measurement's
    standard errors per row, if known (rows without a finite positive SE are left out of the SE-based numbers),
    with ``dof`` degrees of freedom (K − 1 for a mean of K seeds: ``within_t95``);
    ``band``: (low, high) per row, the predicted band of the measured seed mean (:func:`seed_mean_bands`; rows where
    it is NaN or of zero width are left out of ``within_band``)."""
    p, m = np.asarray(pred, dtype=np.float64), np.asarray(meas, dtype=np.float64)
    e = np.full(p.shape, np.nan) if se is None else np.asarray(se, dtype=np.float64)
    lo, hi = (np.full(p.shape, np.nan),) * 2 if band is None else (np.asarray(b, dtype=np.float64) for b in band)
    keep = np.isfinite(p) & np.isfinite(m)
    dropped = int((~keep).sum())
    p, m, e, lo, hi = p[keep], m[keep], e[keep], lo[keep], hi[keep]
    nan = float("nan")
    if p.size == 0:
        return QuantitySummary(quantity, 0, nan, nan, nan, nan, nan, nan, False, not_finite=dropped)
    abs_err = np.abs(p - m)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(m != 0, abs_err / np.abs(m), np.where(abs_err == 0, 0.0, np.inf))
    positive = bool(np.all(m > 0) and np.all(p > 0))
    use_log = positive and m.size > 1 and float(m.max() / m.min()) > 10.0
    a, b = (np.log(p), np.log(m)) if use_log else (p, m)
    ss_tot = float(np.sum((b - b.mean()) ** 2))
    # R² is undefined for a quantity that does not vary (a Post-LN forward variance is 1 by construction)
    flat = float(np.ptp(m)) <= 1e-6 * max(float(np.max(np.abs(m))), 1e-300)
    r2 = 1.0 - float(np.sum((a - b) ** 2)) / ss_tot if ss_tot > 0 and not flat else nan
    has_se = np.isfinite(e) & (e > 0)
    z = abs_err[has_se] / e[has_se]
    within, median_z = (float(np.mean(z <= 2.0)), float(np.median(z))) if z.size else (nan, nan)
    within_t = float(np.mean(z <= t95(dof))) if z.size and dof is not None and dof >= 1 else nan
    rel_se = float(np.median(e[has_se] / np.abs(m[has_se]))) if z.size and bool(np.all(m[has_se] != 0)) else nan
    ceiling = nan
    if not np.isnan(r2) and bool(np.all(has_se)):
        noise = e / m if use_log else e  # d log m = dm / m
        ceiling = 1.0 - float(np.sum(noise ** 2)) / ss_tot
    banded = np.isfinite(lo) & np.isfinite(hi) & (hi > lo)
    in_band = float(np.mean((m[banded] >= lo[banded]) & (m[banded] <= hi[banded]))) if banded.any() else nan
    return QuantitySummary(quantity, int(p.size), float(np.median(rel)), float(np.mean(rel)),
                           float(np.percentile(rel, 90)), float(abs_err.max()), float(np.median(abs_err)), r2,
                           use_log, within, median_z, ceiling, rel_se, in_band, int(banded.sum()), within_t,
                           dropped)


def t95(dof: int) -> float:
    """The 0.975 quantile of Student's t with ``dof`` degrees of freedom, the half-width of its two-sided 95%
    interval in standard errors (1.96 as dof → ∞).

    Example:
        >>> round(t95(1), 3), round(t95(15), 3)
        (12.706, 2.131)
    """
    from scipy import stats

    return float(stats.t.ppf(0.975, dof))


@dataclass(frozen=True)
class Comparison:
    """Theory against measurement at one site: the joined rows, each quantity's agreement and both diagnoses.

    What :func:`compare` returns (module docstring: the relative errors, R² over logs where a quantity spans
    decades, and R² against its noise ceiling when the measurement carries standard errors). :meth:`records` and
    :meth:`write_csv` give the joined rows, :meth:`to_json` / :meth:`write_json` the comparison JSON of
    ``sigprop compare --json``, :meth:`diagnosis_lines` the measured findings with the theory's number beside each.

    Attributes:
        predicted: the predicted :class:`~sigprop.core.profile.Profile`.
        measured: the measured :class:`~sigprop.core.profile.Profile`.
        site: the compared site (``"layer"``: the layer outputs).
        layers: the layers both profiles have at that site (or those asked for), ascending.
        summaries: quantity (``fwd_mean``, ``fwd_var``, ``fwd_corr``, ``grad_var``, ``grad_corr``) →
            :class:`QuantitySummary`: ``median_rel``, ``mean_rel``, ``p90_rel`` (relative error), ``max_abs``,
            ``median_abs``, ``r2`` (``r2_log``: over logs), and with standard errors ``within_2se``,
            ``within_t95``, ``median_z``, ``r2_noise_ceiling``, ``median_rel_se``, and with a predicted spread
            ``within_band``, ``band_rows``.
        meta: ``"heavy_tails"``: the quantities whose seed mean is heavy-tailed at some layer, if any; ``"t95"``:
            with K ≥ 2 seeds, the degrees of freedom K − 1 and the threshold of ``within_t95``; ``"band"``: with a
            predicted spread, its level, the seeds K and each row's (low, high) band of a K-seed mean, and
            ``"not_judged"``: a quantity left out and why (the gradient's variance under the theory's boundary).
        diagnoses: for the layer outputs, ``"predicted"`` and ``"measured"`` →
            :class:`~sigprop.analysis.diagnosis.Diagnosis` (in the JSON: ``meta["diagnosis"]``); else empty.

    Example:
        >>> import sigprop
        >>> config = sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8)
        >>> predicted = sigprop.predict(config)
        >>> exact = sigprop.Profile("measured", predicted.config, predicted.rows)  # a measurement equal to theory
        >>> comparison = sigprop.compare(predicted, exact)
        >>> comparison.layers, comparison.summaries["fwd_var"].median_rel, sorted(comparison.diagnoses)
        ((0, 1), 0.0, ['measured', 'predicted'])
        >>> comparison.records()[0]["pred_fwd_var"] == comparison.records()[0]["meas_fwd_var"]
        True
    """

    predicted: Profile
    measured: Profile
    site: str
    layers: tuple[int, ...]
    summaries: dict
    meta: dict = field(default_factory=dict)
    diagnoses: dict = field(default_factory=dict)

    def diagnosis_lines(self) -> tuple[list[str], str | None]:
        """The measured findings with the theory's number beside each (:func:`sigprop.analysis.diagnosis.side_by_side`),
        and the measured diagnosis's hint."""
        measured = self.diagnoses["measured"]
        return side_by_side(self.diagnoses["predicted"], measured), measured.hint

    def records(self) -> list[dict]:
        """One dict per joined layer: ``layer``, ``site``, and ``pred_Q`` / ``meas_Q`` for each statistic Q (NaN
        where it was not computed)."""
        pred, meas = self.predicted.lookup(), self.measured.lookup()
        rows = []
        for layer in self.layers:
            rp, rm = pred[(layer, self.site)], meas[(layer, self.site)]
            row = {"layer": layer, "site": self.site}
            for q in QUANTITIES:
                row[f"pred_{q}"] = getattr(rp, q)
                row[f"meas_{q}"] = getattr(rm, q)
            rows.append(row)
        return rows

    def write_csv(self, path) -> None:
        """Write :meth:`records` as CSV (a header row, a row per layer; NaN as an empty cell), atomically."""
        write_csv_atomic(path, self.records())

    def to_json(self) -> dict:
        rows = [{k: (json_number(v) if isinstance(v, float) else v) for k, v in r.items()} for r in self.records()]
        measured_meta = {k: v for k, v in self.measured.meta.items() if k != "per_seed"}  # the merge's, not ours
        meta = dict(self.meta)
        if self.diagnoses:
            meta["diagnosis"] = {kind: d.to_dict() for kind, d in self.diagnoses.items()}
        return {"kind": "comparison", "site": self.site, "config": self.predicted.config,
                "predicted_meta": finite_or_null(self.predicted.meta), "measured_meta": finite_or_null(measured_meta),
                "meta": finite_or_null(meta),
                "summary": {q: s.to_dict() for q, s in self.summaries.items()}, "per_layer": rows}

    def write_json(self, path) -> None:
        write_json_atomic(path, self.to_json())


#: The configuration fields that make two profiles of different models (a prediction of a 4-layer Post-LN
#: model against a measurement of a 2-layer Pre-LN one); the others (``input_corr``, filled in by a batch) may differ.
_SAME_MODEL_FIELDS = ("arch", "n_layers", "d_model", "n_heads", "norm_position")


def _check_same_model(predicted: Profile, measured: Profile) -> None:
    """``ValueError`` naming the fields where both profiles' configurations give a value and the values differ."""
    differ = [f"{k} {predicted.config[k]!r} predicted, {measured.config[k]!r} measured" for k in _SAME_MODEL_FIELDS
              if k in predicted.config and k in measured.config and predicted.config[k] != measured.config[k]]
    if differ:
        raise ValueError(f"the profiles are of different models: {'; '.join(differ)}")


def _layer_list(layers: list[int]) -> str:
    return ", ".join(map(str, layers[:6])) + (", …" if len(layers) > 6 else "") if layers else "none"


def compare(predicted: Profile, measured: Profile, site: str = "layer", layers=None,
            quantities=QUANTITIES) -> Comparison:
    """Join a predicted and a measured profile on (layer, site) and summarise their agreement per quantity.

    For each quantity (:func:`summarise`; module docstring): median, mean and 90th-percentile relative error
    |pred − meas|/|meas|, the largest absolute error and R² = 1 − Σ(pred − meas)²/Σ(meas − mean(meas))² over the
    layers, on log values where the measured quantity spans more than a decade (as Kedia et al.'s Figures 2–3 are
    read); with the measurement's standard errors (a seed average: ``meta["stderr"]``), the share of rows within two
    of them and R²'s noise ceiling. With a prediction that carries the seed-to-seed spread (``spread=True``), each
    variance is also judged against the predicted band of a K-seed mean, K the measurement's seeds
    (:func:`~sigprop.theory.spread.profile_bands`): ``within_band``, the share of rows inside it, and
    ``meta["band"]``. ``meta["heavy_tails"]`` lists the quantities whose seed mean is heavy-tailed at
    some layer (:func:`sigprop.measurement.spread.heavy_tails`), if any; for the layer outputs, ``diagnoses`` holds
    :func:`sigprop.analysis.diagnosis.diagnose` of each profile (in the JSON: ``meta["diagnosis"]``).

    Args:
        predicted: a profile of kind "predicted" (:func:`sigprop.predict`).
        measured: a profile of kind "measured" (:func:`sigprop.measure`, or a seed average).
        site: the site whose rows are joined (``"layer"``, ``"attn"``, ``"ffn"``, ``"cross"``, ``"input"``).
        layers: only these layers (default: every layer both profiles have).
        quantities: the statistics to summarise (default: all five).

    Returns:
        The :class:`Comparison`.

    Raises:
        ValueError: profiles of the wrong kinds (or in the wrong order), of different models (their configurations
            differ in the architecture, depth, width, heads or norm placement), whose rows of ``site`` are of
            different layers (unless ``layers`` picks some), or that share no row of ``site``.

    Example:
        >>> import torch, sigprop
        >>> config = sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8)
        >>> model = sigprop.Transformer(config, generator=torch.Generator().manual_seed(0))
        >>> ids = torch.randint(5, 64, (4, 8), generator=torch.Generator().manual_seed(0))
        >>> batch = sigprop.make_batch(config, ids, torch.Generator().manual_seed(1))
        >>> comparison = sigprop.compare(sigprop.predict(model, token_ids=ids), sigprop.measure(model, batch))
        >>> comparison.site, comparison.layers, comparison.summaries["grad_var"].n
        ('layer', (0, 1), 2)
        >>> sigprop.compare(sigprop.measure(model, batch), sigprop.predict(model))
        Traceback (most recent call last):
        ...
        ValueError: compare(predicted, measured): got kinds 'measured', 'predicted'
    """
    if predicted.kind != "predicted" or measured.kind != "measured":
        raise ValueError(f"compare(predicted, measured): got kinds {predicted.kind!r}, {measured.kind!r}")
    _check_same_model(predicted, measured)
    pred, meas = predicted.lookup(), measured.lookup()
    common = sorted(layer for (layer, s) in pred if s == site and (layer, site) in meas)
    if layers is None:
        only = {kind: sorted({layer for (layer, s) in rows if s == site} - set(common))
                for kind, rows in (("predicted", pred), ("measured", meas))}
        if common and any(only.values()):
            raise ValueError(f"the profiles' {site!r} rows are of different layers (only predicted: "
                             f"{_layer_list(only['predicted'])}; only measured: {_layer_list(only['measured'])}): "
                             "pass layers= to compare the layers they share")
    if layers is not None:
        wanted = set(int(x) for x in layers)
        common = [layer for layer in common if layer in wanted]
    if not common:
        raise ValueError(f"the profiles share no rows of site {site!r}")
    stderr = measured.meta.get("stderr") or {}
    seeds = max(1, len(measured.meta.get("seeds") or ()))
    bands = profile_bands(predicted, seeds) if predicted.has_spread else {}
    unjudged = {}
    if "grad_var" in bands and not str(predicted.meta.get("grad_source", "")).startswith(("given", "measured")):
        del bands["grad_var"]  # the band is of the ratio to the top layer's gradient, whose own spread it leaves out
        unjudged["grad_var"] = ("the gradient's band is that of its ratio to the top layer's; with the theory's "
                                "boundary the measured mean also carries the loss's own seed-to-seed spread, which "
                                "the band leaves out: compare with the measured boundary to judge it")
    nan_band = (np.nan, np.nan)
    summaries = {q: summarise(q, [getattr(pred[(lyr, site)], q) for lyr in common],
                              [getattr(meas[(lyr, site)], q) for lyr in common],
                              [stderr.get(f"{lyr}:{site}", {}).get(q, np.nan) for lyr in common],
                              (tuple(zip(*(bands[q].get((lyr, site), nan_band) for lyr in common), strict=True))
                               if q in bands else None), seeds - 1 if seeds > 1 else None)
                 for q in quantities}
    meta: dict = {}
    if seeds > 1:
        meta["t95"] = {"dof": seeds - 1, "threshold": t95(seeds - 1)}
    tails = [dataclasses.asdict(note) for note in heavy_tails(measured, site)]
    if tails:
        meta["heavy_tails"] = tails
    if bands or unjudged:
        meta["band"] = {"level": BAND_LEVEL, "seeds": seeds,
                        "what": f"the predicted {100 * BAND_LEVEL:g}% band of a {seeds}-seed mean "
                                "(sigprop.theory.spread.seed_mean_band)",
                        "rows": {q: {f"{layer}:{s}": list(v) for (layer, s), v in by_row.items() if s == site}
                                 for q, by_row in bands.items()}}
        if unjudged:
            meta["band"]["not_judged"] = unjudged
    diagnoses = {p.kind: diagnose(p) for p in (predicted, measured)} if site == "layer" else {}
    return Comparison(predicted, measured, site, tuple(common), summaries, meta, diagnoses)


def comparison_side(data: dict, kind: str) -> Profile:
    """One side of a comparison JSON (``sigprop compare --json``) as a profile: ``kind`` "predicted" (the
    ``pred_*`` columns and ``predicted_meta``) or "measured" (``meas_*``, ``measured_meta``), the compared site's
    rows only."""
    prefix = {"predicted": "pred", "measured": "meas"}[kind]
    rows = [{"layer": r["layer"], "site": r.get("site", data.get("site", "layer")),
             **{q: r.get(f"{prefix}_{q}") for q in QUANTITIES}} for r in data.get("per_layer", [])]
    return Profile.from_json({"kind": kind, "config": data.get("config", {}),
                              "meta": data.get(f"{kind}_meta", {}), "per_site": rows})


def measured_from_json(data: dict) -> Profile:
    """The measured :class:`~sigprop.core.profile.Profile` held by a JSON object: a measured profile (``sigprop measure
    --json``, every site) or a comparison (``sigprop compare --json``: the compared site's rows, its ``meas_*``
    columns, and the measurement's meta with the standard errors of every site). Plain JSON; nothing is unpickled.
    ``ValueError`` for any other object."""
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == "measured":
        return Profile.from_json(data)
    if kind == "comparison":
        return comparison_side(data, "measured")
    raise ValueError("expected a measured profile (sigprop measure --json) or a comparison (sigprop compare --json), "
                     f"got an object of kind {kind!r}")


def read_measured(path) -> Profile:
    """:func:`measured_from_json` of the JSON file at ``path``; ``ValueError`` naming the file if it is missing,
    not JSON, or not a measurement."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"measurement file not found: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON: {err}") from None
    try:
        profile = measured_from_json(data)
        check_measurement(profile)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{path}: {err}") from None
    return profile


def check_measurement(profile: Profile) -> None:
    """``ValueError`` unless ``profile`` is a measurement sigprop could have written: a configuration it builds (and,
    where the file records it, the one it was measured with: ``config_sha256``), a "layer" row for every layer (no
    configuration at all for a Hugging Face family sigprop does not map),
    finite statistics where they are given, variances ≥ 0 and correlations in [−1, 1], and seeds a list of distinct
    integers. A file edited by hand (or by accident) is refused instead of compared."""
    import math

    from ..model.batches import config_fingerprint
    from ..model.config import config_from_dict

    if not profile.rows:
        raise ValueError("the measurement has no rows")
    if profile.config:  # else a Hugging Face family sigprop does not map: no config of ours, its layers its own
        config = config_from_dict(profile.config)
        want = profile.meta.get("config_sha256")
        if want is not None and want != config_fingerprint(config):
            raise ValueError("its config is not the one it was measured with (config_sha256 differs): was it edited?")
        layers = {r.layer for r in profile.rows if r.site == "layer"}
        missing = sorted(set(range(config.total_layers)) - layers)
        if missing:
            raise ValueError(f"it has no row for layer(s) {', '.join(map(str, missing[:8]))} of its "
                             f"{config.total_layers}")
    for r in profile.rows:
        for q in ("fwd_mean", "fwd_var", "fwd_corr", "grad_var", "grad_corr"):
            v = getattr(r, q)
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise ValueError(f"layer {r.layer} {r.site}: {q} is not a number ({v!r})")
            if math.isinf(v) or (math.isnan(v) and q in ("fwd_mean", "fwd_var")):
                raise ValueError(f"layer {r.layer} {r.site}: {q} is not finite ({v!r})")
            if q.endswith("var") and v < 0:
                raise ValueError(f"layer {r.layer} {r.site}: {q} is negative ({v!r})")
            if q.endswith("corr") and abs(v) > 1.0 + 1e-6:
                raise ValueError(f"layer {r.layer} {r.site}: {q} = {v!r} is not a correlation")
    seeds = profile.meta.get("seeds", [])
    if not isinstance(seeds, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds) \
            or len(set(seeds)) != len(seeds):
        raise ValueError(f"meta.seeds must be a list of distinct integer seeds (got {seeds!r})")
