"""Figures of the reproductions of Noci et al. Figs. 1–5, 7, 8 from :mod:`sigprop.sde.experiments`
results: one PNG per result, laid out like the paper's figure."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from scipy import stats

from ..core.figures import pyplot, save_figure

__all__ = ["plot_result"]


def _density(ax, x, label, style="-", color=None):
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < 2 or np.ptp(x) == 0:
        return
    grid = np.linspace(x.min(), x.max(), 200)
    ax.plot(grid, stats.gaussian_kde(x)(grid), style, color=color, label=label)


def _distribution_panel(ax, arrays, xlabel, ks):
    if not arrays:
        ax.text(0.5, 0.5, "(samples not kept)", ha="center", transform=ax.transAxes)
        return
    for key, style, color in (("network", "-", "C0"), ("sde", "--", "C1")):
        x = np.asarray(arrays[key], dtype=float)
        ax.hist(x[np.isfinite(x)], bins=60, density=True, alpha=0.25, color=color)
        _density(ax, x, "shaped attention NN" if key == "network" else "SDE (Thm. 4.2)", style, color)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("density")
    ax.set_title(f"KS = {ks['statistic']:.4f} (critical {ks['critical']:.3f} at alpha = {ks['alpha']:g})")
    ax.legend()


def _fig1(result, plt):
    d, s = result.data, result.setup
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = {"shaped_attention": "shaped attention", "softmax_attention": "Softmax attention, no LN",
             "preln_attention": "Pre-LN"}
    for key, c in d["curves"].items():
        if key == "sde":
            a.plot(c["layers"], c["mean_rho"], "k--", label="SDE (Thm. 4.2)")
        else:
            a.plot(c["layers"], c["mean_rho"], label=f"{names.get(key, key)} NN ({c['samples']})")
    a.set_xlabel("layer l")
    a.set_ylabel("mean correlation rho")
    a.set_title(f"n = {s['width']}, d = {s['depth']}, gamma = {s['gamma']:.3g}, tau0 = {s['tau0']:g}, "
                f"m = {s['tokens']}")
    a.legend()
    _distribution_panel(b, result.arrays, "rho at T = d/n", d["ks"])
    return fig


def _fig7(result, plt):
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    _distribution_panel(ax, result.arrays, "covariance V^{01} at T = d/n", result.data["ks"])
    return fig


def _fig3(result, plt):
    rows = result.data["rows"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, r in enumerate(rows):
        arr = result.arrays.get(r["gamma"])
        if arr is not None:
            _density(a, arr["network"], f"gamma = {r['gamma']:.3g}", "-", f"C{i}")
            _density(a, arr["sde"], None, "--", f"C{i}")
    a.set_xlabel("rho at depth d (solid: network, dashed: SDE)")
    a.set_ylabel("density")
    a.legend()
    g = [r["gamma"] for r in rows]
    for key, style in (("network", "o-"), ("sde", "s--")):
        v = [r["p95_abs_rho"][key][0] for r in rows]
        e = [r["p95_abs_rho"][key][1] for r in rows]
        b.errorbar(g, v, yerr=e, fmt=style, capsize=3, label=key)
    b.set_xlabel("gamma")
    b.set_ylabel("95th percentile of |rho|")
    b.legend()
    return fig


def _fig4(result, plt):
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, c in result.data["curves"].items():
        cov = np.asarray(c["mean_abs_cov"], dtype=float)
        med = np.asarray(c.get("median_abs_cov", cov), dtype=float)
        exploding = not np.all(np.isfinite(med)) or np.nanmax(med) > 1e3   # the median: rare blow-ups aside
        if not exploding:
            a.plot(c["layers"], c["mean_rho"], label=name)
        line, = b.plot(c["layers"], cov, label=name)
        b.plot(c["layers"], c["median_abs_cov"], ":", color=line.get_color())
    a.set_xlabel("layer l")
    a.set_ylabel("mean correlation")
    a.set_title("(variants whose median covariance explodes left out)")
    a.legend(fontsize=8)
    b.set_yscale("log")
    b.set_xlabel("layer l")
    b.set_ylabel("mean |covariance| (dotted: median)")
    b.legend(fontsize=8)
    return fig


def _fig5(result, plt):
    rows = result.data["rows"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in rows:
        a.plot(r["times"], r["median_max_eig"], label=f"gamma = {r['gamma']:.2g}")
    a.set_yscale("log")
    a.set_xlabel("t = l/n")
    a.set_ylabel("median largest eigenvalue of V")
    a.legend(fontsize=7)
    g = [r["gamma"] for r in rows]
    b.plot(g, [r["median"] for r in rows], "o-", label="median")
    b.plot(g, [r["p10"] for r in rows], "s--", label="10th percentile")
    b.set_xlabel("gamma")
    b.set_ylabel("stopping time (capped at 1)")
    b.set_title(f"source: {result.setup['source']}")
    b.legend()
    return fig


def _fig2(result, plt):
    curves = result.data["curves"]
    layers = np.asarray(result.data["layers"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, (w, title) in zip(axes, (("w_v", "value weights W_V"), ("w_q", "query weights W_Q")), strict=True):
        for arch, c in curves.items():
            y = np.asarray(c[w]["geo_mean"], dtype=float)
            se = np.asarray(c[w]["log_se"], dtype=float)
            line, = ax.plot(layers, y, label=arch)
            if np.isfinite(se).any():
                ax.fill_between(layers, y * np.exp(-se), y * np.exp(se), color=line.get_color(), alpha=0.25)
        ax.set_yscale("log")
        ax.set_xlabel("layer")
        ax.set_ylabel("‖∂L/∂W‖ (geometric mean over seeds, ±1 SE)")
        ax.set_title(f"gradient norm of the {title} at initialisation", fontsize=10)
        ax.legend()
    return fig


def _fig8(result, plt):
    s = result.setup
    fig, ax = plt.subplots(figsize=(6.5, 5))
    im = ax.imshow(np.asarray(result.data["median"], dtype=float), origin="lower", aspect="auto", vmin=0, vmax=1,
                   cmap="viridis")
    ax.set_xticks(range(len(s["tau0s"])), [f"{t:g}" for t in s["tau0s"]])
    ax.set_yticks(range(len(s["gammas"])), [f"{g:.2g}" for g in s["gammas"]])
    ax.set_xlabel("tau0")
    ax.set_ylabel("gamma")
    ax.set_title(f"median stopping time ({s['source']})")
    fig.colorbar(im, ax=ax)
    return fig


_PLOTS = {1: _fig1, 2: _fig2, 3: _fig3, 4: _fig4, 5: _fig5, 7: _fig7, 8: _fig8}


def plot_result(result, path: str | os.PathLike) -> Path:
    """Write the PNG of a :class:`~sigprop.sde.experiments.ExperimentResult` (its figure's panels) to ``path``."""
    if result.figure not in _PLOTS:
        raise ValueError(f"no plot for figure {result.figure!r}; figures are {tuple(_PLOTS)}")
    return save_figure(_PLOTS[result.figure](result, pyplot()), path)
