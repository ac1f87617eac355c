"""Reproductions of Noci et al. (2023) Figs. 1, 3, 4, 5, 7 and 8: finite networks against the covariance SDEs.

Each figure is one function returning a small result object with ``to_json()`` (plain dict, no NaN). Defaults are
the captions' settings; where the paper does not state a setting we chose one (``DEFAULTS`` documents it):

* m (tokens) is not stated for any figure. Fig. 3 (a correlation between two inputs) uses m = 2; the attention
  figures use m = 4 (the token averages of Eq. 10 need m > 2 to differ from a two-point average); rho is always
  the pair (0, 1) (pairs of one network are dependent, so only one pair enters the KS statistic).
* V0 = (1 - rho0) I + rho0 11^T (unit token norms, pairwise correlation rho0), X0 = sqrt(n) V0^{1/2} [I 0].
* Figs. 5 and 8 (stopping times, Sec. 4.4): the caption's adversarial V0, "eigenvalues of order 100": 100 V0 with
  rho0 = 0.2; T = d/n = 1; ``source="network"`` (what the paper plots, the default) or ``"sde"`` (the Thm. 4.2
  SDE, whose cubic drift explodes from this start within t ≈ 0.02–0.08: at n = 200 the network's logits are of
  order 7 and saturate the softmax, outside the large-τ expansion the SDE rests on).
* SDE step: the largest dt' <= dt that divides T = d/n (e.g. T = 1/3 for Fig. 3).

Statistics: two-sample KS statistic (scipy.stats.ks_2samp) between the SDE at T = d/n and the networks at depth d,
with the asymptotic critical value c(alpha) sqrt((n1 + n2)/(n1 n2)), c(alpha) = sqrt(-ln(alpha/2)/2), at
alpha = 0.001 (the largest KS two independent samples of one law give with probability 0.999); quantiles with the
distribution-free standard error (order statistics at N q +- sqrt(N q (1 - q)), half their distance).
"""

from __future__ import annotations

import inspect
import math
import time

import numpy as np
from scipy import stats

from .integrate import euler_maruyama
from .network import equicorrelated, intervention, simulate_network
from .result import ExperimentResult, Progress, jsonable, stage
from .transformer import covariance_sde
from .triu import correlation

__all__ = ["DEFAULTS", "ks_test", "ks_critical", "quantile_se", "sde_dt", "simulate_sde", "ExperimentResult",
           "figure1", "figure3", "figure4", "figure5", "figure7", "figure8", "FIGURES", "run_figure", "figure_options",
           "jsonable"]

#: gamma of Figs. 1 and 7 (1/sqrt 8) and of Fig. 4 (1/sqrt 2).
GAMMA_FIG1, GAMMA_FIG4 = 1 / math.sqrt(8), 1 / math.sqrt(2)

#: The captions' settings (and our documented choices for what they leave open).
DEFAULTS = {
    1: {"width": 200, "depth": 150, "gamma": 1 / math.sqrt(8), "tau0": 1.0, "rho0": 0.2, "dt": 0.01,
        "samples": 2**12, "tokens": 4, "curve_samples": 512},
    7: {"width": 200, "depth": 150, "gamma": 1 / math.sqrt(8), "tau0": 1.0, "rho0": 0.2, "dt": 0.01,
        "samples": 2**12, "tokens": 4},
    3: {"width": 300, "depth": 100, "gammas": (0.1, 1 / math.sqrt(8), 0.5, 1 / math.sqrt(2), 1.0), "rho0": 0.2,
        "c_plus": 0.0, "c_minus": -1.0, "dt": 0.01, "samples": 2**13, "tokens": 2,
        "ks_gammas": (1 / math.sqrt(8), 0.5, 1 / math.sqrt(2))},
    4: {"width": 300, "depth": 150, "gamma": 1 / math.sqrt(2), "tau0": 1.0, "rho0": 0.2, "samples": 2**13,
        "tokens": 4},
    5: {"width": 200, "depth": 200, "gammas": (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0), "tau0": 1.0,
        "rho0": 0.2, "scale": 100.0, "dt": 0.01, "samples": 100, "tokens": 4},
    8: {"width": 200, "depth": 200, "gammas": (0.2, 0.4, 0.6, 0.8, 1.0), "tau0s": (0.5, 1.0, 1.5, 2.0, 3.0),
        "rho0": 0.2, "scale": 100.0, "dt": 0.01, "samples": 100, "tokens": 4},
}

def ks_critical(n1: int, n2: int, alpha: float = 0.001) -> float:
    """Asymptotic two-sample KS critical value c(alpha) sqrt((n1 + n2)/(n1 n2)), c(alpha) = sqrt(-ln(alpha/2)/2)."""
    return math.sqrt(-math.log(alpha / 2.0) / 2.0) * math.sqrt((n1 + n2) / (n1 * n2))


def ks_test(a, b, alpha: float = 0.001) -> dict:
    """Two-sample KS of the finite values of a and b: statistic, p-value, critical value at alpha, sample sizes."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    res = stats.ks_2samp(a, b)
    return {"statistic": float(res.statistic), "pvalue": float(res.pvalue), "alpha": alpha,
            "critical": ks_critical(a.size, b.size, alpha), "n1": int(a.size), "n2": int(b.size)}


def quantile_se(x, q: float) -> tuple[float, float]:
    """The q-quantile of the finite values of x and its distribution-free standard error: half the distance of the
    order statistics at ranks N q -+ sqrt(N q (1 - q)) (the binomial +-1 sigma band of the empirical quantile)."""
    x = np.sort(np.asarray(x, dtype=float)[np.isfinite(x)])
    n = x.size
    half = math.sqrt(n * q * (1.0 - q))
    lo = int(np.clip(math.floor(n * q - half), 0, n - 1))
    hi = int(np.clip(math.ceil(n * q + half), 0, n - 1))
    return float(np.quantile(x, q)), float((x[hi] - x[lo]) / 2.0)


def sde_dt(t_end: float, dt: float) -> float:
    """The largest step dt' <= dt with t_end / dt' a whole number (euler_maruyama needs one)."""
    if not dt > 0:
        raise ValueError(f"dt must be > 0 (got {dt})")
    return t_end / max(1, math.ceil(t_end / dt - 1e-9))


#: Eigenvalue band of the network-vs-SDE comparisons: a blow-up (an eigenvalue above 1e12, the finite-time explosion
#: of the cubic drift, Sec. 4.4) stops (freezes) a path, and so does a raw Euler iterate with a negative eigenvalue
#: (before the PSD projection; counted in ``psd_interventions``). A frozen path's value at T is its value when it
#: stopped, while the networks are never stopped: the comparisons report the SDE's stopped fraction
#: (``checks["sde_stopped_fraction"]``), which must be 0 for their KS statistic to compare like with like.
BLOWUP_BOUNDS = (0.0, 1e12)


def simulate_sde(kind: str, v0, t_end: float, dt: float, n_samples: int, gamma, tau0=1.0, c_plus=0.0,
                 c_minus=0.0, seed: int = 0, record_every: int = 1, eig_bounds=BLOWUP_BOUNDS):
    """:func:`euler_maruyama` on the covariance SDE ``kind`` (Thm. 3.2, Thm. 4.2 or Cor. 4.3) over [0, t_end],
    step :func:`sde_dt`, recording every ``record_every``-th grid time (and t_end). Paths are frozen when an
    eigenvalue leaves ``eig_bounds`` (default :data:`BLOWUP_BOUNDS`: only at a blow-up, where Sigma's eigh would
    otherwise fail; a raw Euler iterate with a negative eigenvalue also stops the path, counted in the result's
    ``psd_interventions``)."""
    step = sde_dt(t_end, dt)
    k = round(t_end / step)
    idx = np.unique(np.r_[np.arange(0, k + 1, max(1, record_every)), k])
    return euler_maruyama(covariance_sde(kind, gamma, tau0, c_plus, c_minus), v0, t_end, step, n_samples,
                          record_times=idx * step, seed=seed, eig_bounds=eig_bounds)


def _quantiles(x, qs=(0.05, 0.5, 0.95)) -> dict:
    return {f"q{round(100 * q)}": dict(zip(("value", "se"), quantile_se(x, q), strict=True)) for q in qs}


def _dt_check(x_dt, x_half, qs=(0.05, 0.5, 0.95)) -> dict:
    """Quantiles at dt and dt/2 (independent draws): |difference| against the standard error of the difference
    se_diff = sqrt(se_dt^2 + se_half^2); "within" means |difference| <= 2 se_diff, "within_1se" <= se_diff."""
    out = {}
    for q in qs:
        a, sa = quantile_se(x_dt, q)
        b, sb = quantile_se(x_half, q)
        out[f"q{round(100 * q)}"] = {"dt": a, "dt_half": b, "diff": abs(a - b), "se_diff": math.hypot(sa, sb),
                                     "within_1se": bool(abs(a - b) <= math.hypot(sa, sb)),
                                     "within": bool(abs(a - b) <= 2.0 * math.hypot(sa, sb))}
    return out


def _entry(v: np.ndarray, quantity: str) -> np.ndarray:
    """rho^{01} (quantity "rho") or V^{01} ("cov") of (..., m, m) covariances."""
    if quantity == "cov":
        return v[..., 0, 1]
    import torch

    return correlation(torch.from_numpy(np.nan_to_num(v)))[..., 0, 1].numpy()


def _attention_vs_sde(figure: int, quantity: str, width, depth, gamma, tau0, rho0, dt, samples, tokens, seed,
                      check_dt, curve_samples, progress) -> ExperimentResult:
    t0 = time.perf_counter()
    v0 = equicorrelated(tokens, rho0)
    t_end = depth / width
    archs = ["shaped_attention"] + (["softmax_attention", "preln_attention"] if curve_samples else [])
    total = len(archs) + 1 + int(check_dt)
    curves, final = {}, {}
    for i, arch in enumerate(archs):
        stage(progress, f"network {arch}", i, total)
        s = samples if arch == "shaped_attention" else curve_samples
        path = simulate_network(arch, v0, width, depth, s, gamma, tau0, seed=seed + i)
        rho = path.corr()
        curves[arch] = {"layers": path.layers, "mean_rho": np.nanmean(rho, axis=0),
                        "mean_abs_cov": np.nanmean(np.abs(path.v[..., 0, 1]), axis=0), "samples": s,
                        "seconds": path.seconds}
        if arch == "shaped_attention":
            final["network"] = _entry(path.v[:, -1], quantity)
    stage(progress, "SDE (Thm. 4.2)", len(archs), total)
    sde = simulate_sde("shaped_attention", v0, t_end, dt, samples, gamma, tau0, seed=seed + 100)
    rho_sde = sde.corr()
    curves["sde"] = {"times": sde.times, "layers": sde.times * width, "mean_rho": rho_sde.mean(axis=0)}
    final["sde"] = _entry(sde.v[:, -1], quantity)
    data = {"curves": curves, "ks": ks_test(final["sde"], final["network"]),
            "quantiles": {k: _quantiles(v) for k, v in final.items()}, "sde_dt": sde.dt,
            "psd_interventions": sde.psd_interventions}
    if check_dt:
        stage(progress, "SDE at dt/2", total - 1, total)
        half = simulate_sde("shaped_attention", v0, t_end, sde.dt / 2, samples, gamma, tau0, seed=seed + 200)
        data["dt_check"] = _dt_check(final["sde"], _entry(half.v[:, -1], quantity))
    stage(progress, "done", total, total)
    ks = data["ks"]
    stopped = float(np.mean(np.asarray(sde.stopping_times) < t_end))
    checks = {"ks_at_T": ks["statistic"], "ks_le_0.05": ks["statistic"] <= 0.05,
              "ks_le_critical": ks["statistic"] <= ks["critical"], "sde_stopped_fraction": stopped}
    if curve_samples:
        checks.update({f"final_mean_rho_{a}": curves[a]["mean_rho"][-1] for a in archs})
        checks["unshaped_collapses"] = bool(curves["softmax_attention"]["mean_rho"][-1] > 0.99
                                            and curves["shaped_attention"]["mean_rho"][-1] < 0.9)
    if check_dt:
        checks["dt_half_within_2se"] = all(d["within"] for d in data["dt_check"].values())
    setup = {"width": width, "depth": depth, "T": t_end, "gamma": gamma, "tau0": tau0, "rho0": rho0, "dt": dt,
             "samples": samples, "tokens": tokens, "seed": seed, "quantity": quantity, "n_k": width,
             "curve_samples": curve_samples}
    return ExperimentResult(figure, setup, data, checks, time.perf_counter() - t0, arrays=final)


def figure1(width=200, depth=150, gamma=GAMMA_FIG1, tau0=1.0, rho0=0.2, dt=0.01, samples=2**12, tokens=4,
            seed=0, check_dt=True, curve_samples=512, progress: Progress = None) -> ExperimentResult:
    """Noci et al. Fig. 1. Left: mean rho^{01}_l over depth for residual attention networks (Eq. 1) with shaped
    attention (Eq. 9), unshaped Softmax attention without LayerNorm (Eq. 2, tau = sqrt(n_k)) and Pre-LN, and the
    Thm. 4.2 SDE's mean. Right: the distribution of rho at T = d/n from the SDE and from the shaped networks, with
    the two-sample KS statistic (and, with ``check_dt``, the SDE's quantiles at dt/2). ``curve_samples``: networks
    for the two unshaped curves (their means are sharp; 0 skips them)."""
    return _attention_vs_sde(1, "rho", width, depth, gamma, tau0, rho0, dt, samples, tokens, seed, check_dt,
                             curve_samples, progress)


def figure7(width=200, depth=150, gamma=GAMMA_FIG1, tau0=1.0, rho0=0.2, dt=0.01, samples=2**12, tokens=4,
            seed=0, check_dt=True, progress: Progress = None) -> ExperimentResult:
    """Noci et al. Fig. 7: the distribution of the covariance V^{01} at T = d/n from the Thm. 4.2 SDE and shaped
    attention networks (V0^{ab} = 0.2, unit diagonal), with the KS statistic."""
    return _attention_vs_sde(7, "cov", width, depth, gamma, tau0, rho0, dt, samples, tokens, seed, check_dt, 0,
                             progress)


def figure3(width=300, depth=100, gammas=DEFAULTS[3]["gammas"], rho0=0.2, c_plus=0.0, c_minus=-1.0, dt=0.01,
            samples=2**13, tokens=2, seed=0, ks_gammas=DEFAULTS[3]["ks_gammas"], check_dt=True,
            progress: Progress = None) -> ExperimentResult:
    """Noci et al. Fig. 3: residual shaped-ReLU networks (Eq. 4) against the Thm. 3.2 SDE for several gamma: rho
    at depth d (densities; samples kept in ``arrays``), the 95th percentile of |rho| vs gamma for both, and the KS
    statistic per gamma (acceptance at those of ``gammas`` that are ``ks_gammas``, at every one of ``gammas`` where
    none is); with ``check_dt`` the SDE's |rho| quantiles at dt/2 for the first acceptance gamma. The Thm. 3.2 SDE
    is integrated without stopping (its coefficients grow linearly: no blow-up; PSD projection at the boundary
    rho = +-1)."""
    t0 = time.perf_counter()
    v0 = equicorrelated(tokens, rho0)
    t_end = depth / width
    gammas = [float(g) for g in gammas]
    # the acceptance γs are those asked for that are the caption's (to 0.1%: 0.7071 is 1/√2), else all asked for
    ks_gammas = [g for g in gammas if any(abs(g - float(k)) <= 1e-3 * abs(float(k)) for k in ks_gammas)] or gammas
    total = 2 * len(gammas) + int(check_dt)
    rows, arrays = [], {}
    for i, g in enumerate(gammas):
        stage(progress, f"network gamma={g:.3g}", 2 * i, total)
        net = simulate_network("resnet_relu", v0, width, depth, samples, g, c_plus=c_plus, c_minus=c_minus,
                               seed=seed + i, record_layers=[0, depth]).corr()[:, -1]
        stage(progress, f"SDE gamma={g:.3g}", 2 * i + 1, total)
        sde = simulate_sde("resnet_relu", v0, t_end, dt, samples, g, c_plus=c_plus, c_minus=c_minus,
                           seed=seed + 1000 + i, record_every=10**9, eig_bounds=None).corr()[:, -1]
        arrays[g] = {"network": net, "sde": sde}
        rows.append({"gamma": g, "ks": ks_test(sde, net),
                     "p95_abs_rho": {"network": quantile_se(np.abs(net), 0.95), "sde": quantile_se(np.abs(sde), 0.95)},
                     "mean_rho": {"network": float(np.mean(net)), "sde": float(np.mean(sde))}})
    data = {"rows": rows, "sde_dt": sde_dt(t_end, dt)}
    checks = {"ks": {f"{r['gamma']:.4f}": r["ks"]["statistic"] for r in rows}}
    sel = [r for r in rows if r["gamma"] in ks_gammas]
    checks["ks_le_0.05_at_ks_gammas"] = bool(sel) and all(r["ks"]["statistic"] <= 0.05 for r in sel)
    checks["ks_le_critical_all"] = all(r["ks"]["statistic"] <= r["ks"]["critical"] for r in rows)
    if check_dt and ks_gammas:
        g = float(ks_gammas[0])
        stage(progress, f"SDE gamma={g:.3g} at dt/2", total - 1, total)
        a = simulate_sde("resnet_relu", v0, t_end, dt, samples, g, c_plus=c_plus, c_minus=c_minus,
                         seed=seed + 2000, record_every=10**9, eig_bounds=None).corr()[:, -1]
        b = simulate_sde("resnet_relu", v0, t_end, sde_dt(t_end, dt) / 2, samples, g, c_plus=c_plus,
                         c_minus=c_minus, seed=seed + 3000, record_every=10**9,
                         eig_bounds=None).corr()[:, -1]
        data["dt_check"] = {"gamma": g, **_dt_check(np.abs(a), np.abs(b))}
        checks["dt_half_within_2se"] = all(v["within"] for k, v in data["dt_check"].items() if k != "gamma")
    stage(progress, "done", total, total)
    setup = {"width": width, "depth": depth, "T": t_end, "gammas": gammas, "rho0": rho0, "c_plus": c_plus,
             "c_minus": c_minus, "dt": dt, "samples": samples, "tokens": tokens, "seed": seed,
             "ks_gammas": list(ks_gammas)}
    return ExperimentResult(3, setup, data, checks, time.perf_counter() - t0, arrays=arrays)


#: The seven attention variants of Fig. 4: (identity, centre, shaped temperature).
FIG4_VARIANTS = ((True, True, True), (False, True, True), (True, False, True), (True, True, False),
                 (True, False, False), (False, True, False), (False, False, True))


def figure4(width=300, depth=150, gamma=GAMMA_FIG4, tau0=1.0, rho0=0.2, samples=2**13, tokens=4, seed=0,
            progress: Progress = None) -> ExperimentResult:
    """Noci et al. Fig. 4: mean rho^{01}_l and mean |V^{01}_l| over depth for shaped attention (Eq. 9) and six
    interventions that remove one or two of its modifications (identity, centring, tau = tau0 sqrt(n n_k); without
    the last, tau = sqrt(n_k)). Networks only. Also the median |V^{01}_l| and the fraction of networks with an entry
    of V above 1e4 by layer l: the mean is dominated by the rare finite-time blow-ups of Sec. 4.4."""
    t0 = time.perf_counter()
    v0 = equicorrelated(tokens, rho0)
    curves = {}
    for i, flags in enumerate(FIG4_VARIANTS):
        arch = intervention(*flags)
        stage(progress, f"network {arch.name}", i, len(FIG4_VARIANTS))
        path = simulate_network(arch, v0, width, depth, samples, gamma, tau0, seed=seed + i)
        with np.errstate(invalid="ignore", over="ignore"):
            cov = np.abs(path.v[..., 0, 1])
            big = ~(np.abs(path.v) <= 1e4).all(axis=(-1, -2))   # an entry above 1e4 (or non-finite)
            curves[arch.name] = {"identity": flags[0], "centre": flags[1], "shaped_tau": flags[2],
                                 "layers": path.layers, "mean_rho": np.nanmean(path.corr(), axis=0),
                                 "mean_abs_cov": np.mean(cov, axis=0), "median_abs_cov": np.median(cov, axis=0),
                                 "exploded_fraction": np.maximum.accumulate(big, axis=1).mean(axis=0),
                                 "seconds": path.seconds}
    stage(progress, "done", len(FIG4_VARIANTS), len(FIG4_VARIANTS))
    checks = {f"final_mean_rho[{k}]": c["mean_rho"][-1] for k, c in curves.items()}
    checks.update({f"final_mean_abs_cov[{k}]": c["mean_abs_cov"][-1] for k, c in curves.items()})
    checks.update({f"final_median_abs_cov[{k}]": c["median_abs_cov"][-1] for k, c in curves.items()})
    checks.update({f"exploded_fraction[{k}]": c["exploded_fraction"][-1] for k, c in curves.items()})
    setup = {"width": width, "depth": depth, "gamma": gamma, "tau0": tau0, "rho0": rho0, "samples": samples,
             "tokens": tokens, "seed": seed}
    return ExperimentResult(4, setup, {"curves": curves}, checks, time.perf_counter() - t0)


def _stopping(source, v0, width, depth, gamma, tau0, dt, samples, seed):
    """Stopping times t* (an eigenvalue of V leaves [1e-4, 1e4], Sec. 4.4) capped at min(1, T), T = depth/width
    the end of the simulated paths (a path not seen past T is not known to last to 1), and the max-eigenvalue path
    (median over samples, frozen at stopping for the SDE)."""
    t_end = depth / width
    if source == "sde":
        path = simulate_sde("shaped_attention", v0, t_end, dt, samples, gamma, tau0, seed=seed,
                            eig_bounds=(1e-4, 1e4))
        st, times, v = path.stopping_times, path.times, path.v
    elif source == "network":
        path = simulate_network("shaped_attention", v0, width, depth, samples, gamma, tau0, seed=seed)
        st, times, v = path.stopping_times(), path.times, path.v
    else:
        raise ValueError(f"source must be 'sde' or 'network' (got {source!r})")
    capped = np.minimum(st, min(1.0, t_end))
    finite = np.isfinite(v).all(axis=(-1, -2))
    eig = np.full(v.shape[:2], np.inf)
    eig[finite] = np.linalg.eigvalsh(v[finite])[..., -1]
    return capped, times, np.median(eig, axis=0)


def figure5(width=200, depth=200, gammas=DEFAULTS[5]["gammas"], tau0=1.0, rho0=0.2, scale=100.0, dt=0.01,
            samples=100, tokens=4, seed=0, source="network", progress: Progress = None) -> ExperimentResult:
    """Noci et al. Fig. 5 (Sec. 4.4): stopping time t* = d*/n (an eigenvalue of V leaves [1e-4, 1e4]) capped at
    min(1, T) (T = depth/width), median and 10th percentile over ``samples`` paths, vs gamma, from the adversarial
    V0 = scale V0(rho0); and the median path of the largest eigenvalue (left panel). ``source``: "sde" (Thm. 4.2)
    or "network"."""
    t0 = time.perf_counter()
    v0 = equicorrelated(tokens, rho0, scale)
    rows = []
    for i, g in enumerate(gammas):
        stage(progress, f"{source} gamma={g:.3g}", i, len(gammas))
        st, times, lam = _stopping(source, v0, width, depth, float(g), tau0, dt, samples, seed + i)
        rows.append({"gamma": float(g), "median": float(np.median(st)), "p10": float(np.quantile(st, 0.1)),
                     "stopped_fraction": float(np.mean(st < min(1.0, depth / width))), "times": times,
                     "median_max_eig": lam})
    stage(progress, "done", len(gammas), len(gammas))
    setup = {"width": width, "depth": depth, "T": depth / width, "gammas": [float(g) for g in gammas],
             "tau0": tau0, "rho0": rho0, "scale": scale, "dt": dt, "samples": samples, "tokens": tokens,
             "seed": seed, "source": source, "eig_bounds": [1e-4, 1e4]}
    checks = {"median_stopping_time": {f"{r['gamma']:.3g}": r["median"] for r in rows}}
    return ExperimentResult(5, setup, {"rows": rows}, checks, time.perf_counter() - t0)


def figure8(width=200, depth=200, gammas=DEFAULTS[8]["gammas"], tau0s=DEFAULTS[8]["tau0s"], rho0=0.2, scale=100.0,
            dt=0.01, samples=100, tokens=4, seed=0, source="network", progress: Progress = None) -> ExperimentResult:
    """Noci et al. Fig. 8: median stopping time (capped at min(1, T)) over a (gamma, tau0) grid, adversarial V0 as in
    :func:`figure5`. ``data["median"][i][j]`` is at gammas[i], tau0s[j]."""
    t0 = time.perf_counter()
    v0 = equicorrelated(tokens, rho0, scale)
    med = np.zeros((len(gammas), len(tau0s)))
    total = med.size
    for i, g in enumerate(gammas):
        for j, t in enumerate(tau0s):
            stage(progress, f"{source} gamma={g:.3g} tau0={t:.3g}", i * len(tau0s) + j, total)
            st, _, _ = _stopping(source, v0, width, depth, float(g), float(t), dt, samples, seed + i * 100 + j)
            med[i, j] = np.median(st)
    stage(progress, "done", total, total)
    setup = {"width": width, "depth": depth, "T": depth / width, "gammas": [float(g) for g in gammas],
             "tau0s": [float(t) for t in tau0s], "rho0": rho0, "scale": scale, "dt": dt, "samples": samples,
             "tokens": tokens, "seed": seed, "source": source}
    return ExperimentResult(8, setup, {"median": med}, {"min_median": float(med.min()),
                                                        "max_median": float(med.max())}, time.perf_counter() - t0)




def _figure2(progress: Progress = None, **options) -> ExperimentResult:
    """Fig. 2 (gradient norms at initialisation): :func:`sigprop.sde.gradients.figure2`."""
    from .gradients import figure2

    return figure2(progress=progress, **options)


FIGURES = {1: figure1, 2: _figure2, 3: figure3, 4: figure4, 5: figure5, 7: figure7, 8: figure8}


#: The figures whose γ option is a list.
_LIST_OPTIONS = {3: "gammas", 5: "gammas", 8: "gammas"}


def figure_options(figure: int, samples=None, width=None, depth=None, gammas=None, tau0s=None, dt=None, seed=0,
                   tokens=None, source=None, check_dt=None) -> dict:
    """The keyword options of figure ``figure``'s function (:data:`FIGURES`) from the command line's values (None:
    the caption's default; ``gammas`` / ``tau0s``: lists of γ and τ₀, one value where the figure takes one;
    ``check_dt``: the dt/2 rerun of figures 1, 3 and 7, on by default there), checked before anything runs:
    ``ValueError`` naming the option otherwise, also for an option the figure would not use (``--dt`` for the
    networks' stopping times of figures 5 and 8, ``--check-dt`` outside figures 1, 3 and 7)."""
    if figure not in FIGURES:
        raise ValueError(f"--figure must be one of {', '.join(map(str, FIGURES))} (got {figure})")
    for name, val, lo in (("--samples", samples, 2), ("--width", width, 2), ("--depth", depth, 1),
                          ("--tokens", tokens, 2)):
        if val is not None and val < lo:
            raise ValueError(f"{name} must be an integer >= {lo} (got {val})")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"--seed must be an integer >= 0 (got {seed})")
    if dt is not None and not dt > 0:
        raise ValueError(f"--dt must be > 0 (got {dt})")
    if figure != 2 and source != "sde":  # a Post-LN network is simulated in a basis of 2 m directions
        defaults = inspect.signature(FIGURES[figure]).parameters
        w = defaults["width"].default if width is None else width
        m = defaults["tokens"].default if tokens is None else tokens
        if w < 2 * m:
            raise ValueError(f"--width must be at least twice --tokens for figure {figure}'s networks (the reduced "
                             f"simulation keeps 2 m directions per token set; got width {w}, tokens {m})")
    for g in gammas or []:
        if not 0.0 <= g <= 1.0:
            raise ValueError(f"--gamma must lie in [0, 1] (got {g})")
    for t in tau0s or []:
        if not t > 0:
            raise ValueError(f"--tau0 must be > 0 (got {t})")
    if figure == 2:  # real decoders: --samples = weight draws, --tokens = sequence length
        if dt is not None or source is not None:
            raise ValueError("--dt and --source do not apply to figure 2 (gradients of real decoders)")
        for name, vals in (("--gamma", gammas), ("--tau0", tau0s)):
            if vals is not None and len(vals) != 1:
                raise ValueError(f"{name} takes one value for figure 2")
        return {"seeds": samples, "width": width, "depth": depth, "seed": seed, "seq_len": tokens,
                "gamma": gammas[0] if gammas else None, "tau0": tau0s[0] if tau0s else None}
    opts = {"samples": samples, "width": width, "depth": depth, "seed": seed, "tokens": tokens}
    if figure != 4:
        opts["dt"] = dt
    elif dt is not None:
        raise ValueError("--dt does not apply to figure 4 (networks only)")
    if figure in _LIST_OPTIONS:
        opts["gammas"] = gammas
    elif gammas is not None:
        if len(gammas) != 1:
            raise ValueError(f"--gamma takes one value for figure {figure} (got {len(gammas)})")
        opts["gamma"] = gammas[0]
    if figure == 8:
        opts["tau0s"] = tau0s
    elif tau0s is not None:
        if figure == 3:
            raise ValueError("--tau0 does not apply to figure 3 (no attention)")
        if len(tau0s) != 1:
            raise ValueError(f"--tau0 takes one value for figure {figure} (got {len(tau0s)})")
        opts["tau0"] = tau0s[0]
    if source is not None:
        if figure not in (5, 8):
            raise ValueError("--source applies to figures 5 and 8 only")
        if source not in ("sde", "network"):
            raise ValueError(f"--source must be sde or network (got {source!r})")
        opts["source"] = source
    if figure in (5, 8) and source != "sde" and dt is not None:
        raise ValueError(f"--dt applies to figure {figure} with --source sde only (the networks' stopping times "
                         "have no SDE step)")
    if figure in (1, 3, 7):
        opts["check_dt"] = check_dt
    elif check_dt is not None:
        raise ValueError("--check-dt / --no-check-dt apply to figures 1, 3 and 7 only (the SDE's quantiles rerun "
                         "at dt/2)")
    return opts


def run_figure(figure: int, progress: Progress = None, **options) -> ExperimentResult:
    """Run figure ``figure`` (1, 2, 3, 4, 5, 7 or 8) with keyword ``options`` (its function's parameters; None values
    keep the defaults). ``ValueError`` for another figure."""
    if figure not in FIGURES:
        raise ValueError(f"figure must be one of {tuple(FIGURES)} (got {figure!r})")
    opts = {k: v for k, v in options.items() if v is not None}
    return FIGURES[figure](progress=progress, **opts)

