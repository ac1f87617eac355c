"""Figures of whole-model profiles: per-layer theory lines against measured points, like Kedia et al. Figs. 1–4,
7 and 8 (forward variance, gradient variance, token correlations)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..core.figures import pyplot, save_figure
from ..core.profile import Profile
from ..measurement.spread import heavy_tails
from ..theory.spread import BAND_LEVEL, profile_bands

__all__ = ["plot_profiles"]


def _series(profile: Profile | None, q: str, site: str = "layer"):
    """(x, y, standard error) of quantity ``q`` at ``site`` over the layers; with ``site="layer"`` the embedding
    output (x = −1) and an encoder–decoder's decoder input (x = first decoder layer − ½, after a NaN that breaks
    the line between the two stacks) are included."""
    if profile is None:
        return None, None, None
    rows = ([r for r in profile.rows if r.site == "input"] if site == "layer" else []) + profile.site(site)
    dec = profile.site("dec_input") if site == "layer" else []
    x = [float(r.layer) for r in rows]
    y = [float(getattr(r, q)) for r in rows]
    se = profile.meta.get("stderr", {})
    e = [se.get(f"{r.layer}:{r.site}", {}).get(q, np.nan) for r in rows]
    if dec:
        at = next(i for i, r in enumerate(rows) if r.layer >= dec[0].layer)
        extra = ([np.nan, dec[0].layer - 0.5], [np.nan, float(getattr(dec[0], q))],
                 [np.nan, se.get(f"{dec[0].layer}:dec_input", {}).get(q, np.nan)])
        x, y, e = (v[:at] + ins + v[at:] for v, ins in zip((x, y, e), extra, strict=True))
    return tuple(np.array(v, dtype=float) for v in (x, y, e))


def _mark_decoder(ax, profile: Profile | None) -> None:
    """A dashed line where an encoder–decoder's decoder starts."""
    dec = profile.site("dec_input") if profile is not None else []
    if dec:
        ax.axvline(dec[0].layer - 0.5, color="grey", ls="--", lw=1)
        ax.text(dec[0].layer, 0.98, " decoder", transform=ax.get_xaxis_transform(), fontsize=7, va="top",
                color="grey")


def plot_profiles(path: str | os.PathLike, predicted: Profile | None = None, measured: Profile | None = None,
                  title: str | None = None, summary: dict | None = None) -> Path:
    """Write a PNG with three panels over the layers (−1 = embedding output; an encoder–decoder's decoder follows
    its encoder, marked by a dashed line): forward variance, gradient variance (log axis when it spans more than a
    decade) and the token correlations of activations and gradients. Theory is a line, measurement points with ±1
    standard error bars (over seeds) where known, hollow where the seed mean is heavy-tailed
    (:func:`sigprop.measurement.spread.heavy_tails`: that error bar understates it). A prediction with spread draws
    its band around the theory's line: where one model falls (predicted alone), or the measurement's K-seed mean
    (:func:`~sigprop.theory.spread.profile_bands`). ``summary`` (per quantity, from
    :func:`sigprop.compare`) is printed in each panel's corner."""
    plt = pyplot()

    if predicted is None and measured is None:
        raise ValueError("plot_profiles needs a predicted or a measured profile")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    tails = {note.quantity: note.layers for note in heavy_tails(measured)} if measured is not None else {}
    seeds = max(1, len(measured.meta.get("seeds") or ())) if measured is not None else 1
    bands = profile_bands(predicted, seeds) if predicted is not None and predicted.has_spread else {}
    panels = (("fwd_var", "forward variance σ²_x"), ("grad_var", "gradient variance σ²_g"),
              (("fwd_corr", "grad_corr"), "token correlation r"))
    for ax, (qs, label) in zip(axes, panels, strict=True):
        qs = (qs,) if isinstance(qs, str) else qs
        spans = []
        for q, colour in zip(qs, ("tab:blue", "tab:red"), strict=False):
            name = {"fwd_corr": "activations", "grad_corr": "gradients"}.get(q, "")
            x, y, _ = _series(predicted, q)
            if x is not None:
                ax.plot(x, y, "-", color=colour, lw=1.6, label=f"theory {name}".strip())
                spans.append(y)
            if q in bands:
                keys = sorted(k for k in bands[q] if k[1] in ("input", "layer"))
                low, high = (np.array([bands[q][k][i] for k in keys]) for i in (0, 1))
                what = "one model" if seeds == 1 else f"the mean of {seeds} seeds"
                ax.fill_between([k[0] for k in keys], low, high, color=colour, alpha=0.15, lw=0,
                                label=f"predicted {100 * BAND_LEVEL:g}% band of {what}")
                spans += [low, high]
            x, y, e = _series(measured, q)
            if x is not None:
                flagged = np.isin(x, tails.get(q, ()))
                keep = np.zeros(len(x), dtype=bool)
                keep[::max(1, len(x) // 64)] = True  # ~64 points; a few flagged layers are shown wherever they are
                if flagged.sum() <= 8:
                    keep |= flagged
                x, y, e, heavy = x[keep], y[keep], np.where(np.isfinite(e), e, 0.0)[keep], flagged[keep]
                for pick, hollow in ((~heavy, False), (heavy, True)):
                    if pick.any():
                        tag = f"measured {name}".strip() + (", seed mean skewed" if hollow else "")
                        ax.errorbar(x[pick], y[pick], yerr=e[pick], fmt="o", ms=3, color=colour, alpha=0.75,
                                    elinewidth=0.8, mfc="none" if hollow else colour, label=tag)
                spans.append(y)
        vals = np.concatenate([s[np.isfinite(s)] for s in spans]) if spans else np.array([])
        if qs[0] != "fwd_corr" and vals.size and vals.min() > 0 and vals.max() / vals.min() > 10:
            ax.set_yscale("log")
        _mark_decoder(ax, predicted if predicted is not None else measured)
        ax.set_xlabel("layer")
        ax.set_title(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        if summary:
            lines = []
            for q in qs:
                s = summary.get(q)
                if s and s.get("n"):
                    r2 = "n/a" if s.get("r2") is None else f"{s['r2']:.4f}" + (" (log)" if s.get("r2_log") else "")
                    lines.append(f"{q}: median {100 * s['median_rel']:.1f}%, R² {r2}")
            if lines:
                ax.text(0.02, 0.02, "\n".join(lines), transform=ax.transAxes, fontsize=7, va="bottom",
                        bbox=dict(facecolor="white", alpha=0.8, lw=0))
    if title:
        fig.suptitle(title)
    return save_figure(fig, path, dpi=110)
