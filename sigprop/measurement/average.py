"""The average over independently initialised models (seeds) of a measured profile, and its standard errors.

What the theory predicts. Every rule propagates moments of the distribution over weights and inputs: a variance
σ² = E[x²] − μ², and a token correlation r defined by Cov(x_j, x_l) = r σ² (Kedia et al. Sec. 2, Table 1,
"definition of correlation"), so r = E[cov]/E[var], a ratio of expectations. One model's measured correlation is
its own ratio cov_s/var_s, and the mean over seeds of those ratios estimates E[cov/var] instead, which differs from
E[cov]/E[var] by the covariation of the two across seeds (to second order,
E[c/v] ≈ E[c]/E[v] · (1 + Var v/E[v]² − Cov(c, v)/(E[c]E[v]))), an O(1/d) bias that does not shrink with more
seeds. A correlation is therefore pooled: r̂ = Σ_s r_s v_s / Σ_s v_s, the mean covariance over the mean variance
(the seeds share one batch, so each has the same tokens and token pairs), with a jackknife standard error over
seeds. Means and variances are plain means over seeds.

Measured on 192 seeds of the 192-layer DSLM Pre-LN preset at d = 128 (``bench/resolved_vs_exchangeable.py``,
docs/results/accuracy.md, "Correlations are pooled over seeds"): the pooled layer-output correlation lies above the mean
of the per-seed ones at every layer, by 0.0029 on average (0.0012 at d = 256: O(1/d)), about one standard error of
the 192-seed mean, in the same direction at every layer.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.profile import QUANTITIES, Profile, Row
from .spread import SPREAD_QUANTITIES, log_sd

__all__ = ["average_profiles", "pooled_ratio", "POOLED"]

#: Each correlation and the variance that weights it when pooling over seeds.
POOLED = {"fwd_corr": "fwd_var", "grad_corr": "grad_var"}


def pooled_ratio(corr: np.ndarray, var: np.ndarray) -> tuple[float, float]:
    """The pooled correlation Σ r_s v_s / Σ v_s of per-seed correlations ``corr`` and variances ``var`` (1-D, one
    entry per seed) and its jackknife standard error √((n−1)/n · Σ_s (r̂_(s) − r̄_(·))²) over the leave-one-out
    estimates r̂_(s) (NaN for one seed). NaN if any entry is NaN; the plain mean of ``corr`` (and its standard
    error) where the variances sum to zero, the ratio then being undefined."""
    corr, var = np.asarray(corr, dtype=np.float64), np.asarray(var, dtype=np.float64)
    n = corr.shape[0]
    if n == 0 or corr.shape != var.shape:
        raise ValueError(f"pooled_ratio: corr and var must be 1-D of one length > 0, got {corr.shape}, {var.shape}")
    if not (np.all(np.isfinite(corr)) and np.all(np.isfinite(var))):
        return math.nan, math.nan
    cov, total = corr * var, var.sum()
    if total <= 0 or (n > 1 and np.any(total - var <= 0)):
        se = corr.std(ddof=1) / math.sqrt(n) if n > 1 else math.nan
        return float(corr.mean()), float(se)
    ratio = float(cov.sum() / total)
    if n == 1:
        return ratio, math.nan
    leave_one_out = (cov.sum() - cov) / (total - var)
    se = math.sqrt((n - 1) / n * float(((leave_one_out - leave_one_out.mean()) ** 2).sum()))
    return ratio, se


def average_profiles(profiles: list[Profile], config: dict, meta: dict) -> Profile:
    """The seed average of ``profiles`` (one per seed, the same sites in the same order): per site, the mean over
    seeds of mean and variances and the pooled correlations (module docstring); the standard error of each goes to
    ``meta["stderr"]`` and the sd over seeds of each variance's log to ``meta["seed_log_sd"]`` (None where a value is
    not positive; with two seeds or more; :mod:`sigprop.measurement.spread`)."""
    if not profiles:
        raise ValueError("average_profiles: no profiles to average")
    keys = [(r.layer, r.site) for r in profiles[0].rows]
    looks = [p.lookup() for p in profiles]
    rows, stderr, spread = [], {}, {}
    n = len(profiles)
    for key in keys:
        vals = {q: np.array([getattr(lk[key], q) for lk in looks], dtype=np.float64) for q in QUANTITIES}
        mean, se = {}, {}
        for q in QUANTITIES:
            if q in POOLED:
                mean[q], se[q] = pooled_ratio(vals[q], vals[POOLED[q]])
            else:
                mean[q] = float(vals[q].mean())
                se[q] = float(vals[q].std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
        rows.append(Row(key[0], key[1], **mean))
        if n > 1:
            stderr[f"{key[0]}:{key[1]}"] = se
            sds = {q: log_sd(vals[q]) for q in SPREAD_QUANTITIES}
            spread[f"{key[0]}:{key[1]}"] = {q: (v if math.isfinite(v) else None) for q, v in sds.items()}
    sources = {p.meta.get("grad_source") for p in profiles}  # every seed's gradients not computed: said once
    carried = {"grad_source": sources.pop()} if len(sources) == 1 and None not in sources else {}
    return Profile("measured", config, tuple(rows), {**meta, **carried, "stderr": stderr, "seed_log_sd": spread})
