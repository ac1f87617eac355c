"""Figures of ``sigprop apjn``: APJN per block, theory lines against measured points (Alekseev Figs. 1(a), 2, 9, 10),
the GMFE per third of the depth (Fig. 1(b)), and the ζ / λ⁻¹ maps over (σ_21, σ_OV) (Fig. 3)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..core.figures import pyplot, save_figure
from .asymptotics import PhaseMap
from .experiment import ApjnCurve

__all__ = ["plot_apjn", "plot_phase"]

_THIRDS = ("early", "middle", "deep")


def plot_apjn(path: str | os.PathLike, curves: Sequence[ApjnCurve], title: str | None = None) -> Path:
    """Two panels: (left) the APJN against the block b on a log axis, per curve the full theory (solid), the
    simplified theory (dashed), the large-depth law (dotted, backward only) and the measurement (points, ±1 SE over
    weight seeds); (right) the GMFE of the full theory per third of the depth, one point per input, with the 1.10
    line of the acceptance target. Curves of the same model on several inputs (digits) share a colour."""
    if not curves:
        raise ValueError("plot_apjn needs at least one curve")
    plt = pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.6), gridspec_kw={"width_ratios": [1.6, 1]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    groups: dict[str, list[ApjnCurve]] = {}
    for c in curves:
        groups.setdefault(c.setup.label, []).append(c)
    kind = curves[0].setup.kind
    for i, (label, members) in enumerate(groups.items()):
        col = colors[i % len(colors)]
        many = len(members) > 1
        for j, c in enumerate(members):
            b = np.arange(c.full.size)
            name = (f"{label} ({len(members)} inputs)" if many else label) if j == 0 else None
            ax.plot(b, c.full, color=col, lw=1.4 if not many else 0.9, label=name)
            ax.plot(b, c.simplified, color=col, lw=0.8, ls="--")
            if np.isfinite(c.asymptotic).any() and j == 0:
                ax.plot(b, c.asymptotic, color=col, lw=1.0, ls=":")
            ax.errorbar(c.blocks, c.measured, yerr=c.se, fmt="o", ms=3 if not many else 2, color=col, ecolor=col,
                        elinewidth=0.8, capsize=0, alpha=1.0 if not many else 0.6)
        offset = (i - (len(groups) - 1) / 2) * 0.8 / len(groups)
        for k, third in enumerate(_THIRDS):
            vals = np.array([c.gmfe["full"].get(third, np.nan) for c in members])
            vals = vals[np.isfinite(vals)]
            if vals.size:
                bx.plot(np.full(vals.size, k + offset), vals, "o", ms=4, color=col, alpha=0.8,
                        label=label if k == 0 else None)
                bx.plot([k + offset - 0.06, k + offset + 0.06], [np.median(vals)] * 2, color=col, lw=2)
    ax.set_yscale("log")
    ax.set_xlabel("block b")
    sym = r"$\mathcal{J}^{B,b}$" if kind == "backward" else r"$\mathcal{J}^{b,0}$"
    ax.set_ylabel(f"{kind} APJN {sym}")
    ax.set_title("theory (solid: full, dashed: simplified, dotted: large-depth law) vs measured (points ±1 SE)",
                 fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    bx.axhline(1.10, color="k", lw=0.8, ls="--")
    bx.axhline(1.0, color="k", lw=0.5)
    bx.set_xticks(np.arange(3), _THIRDS)
    bx.set_xlim(-0.6, 2.6)
    top = max([1.2] + [v for c in curves for v in c.gmfe["full"].values() if np.isfinite(v)])
    bx.set_ylim(0.98, top * 1.03)
    bx.set_ylabel("GMFE (Eq. 20), full theory")
    bx.set_title("typical fold error per third of the depth (dashed: 1.10; bar: median)", fontsize=9)
    bx.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)


def plot_phase(path: str | os.PathLike, maps: Sequence[tuple[str, PhaseMap]],
               mark: tuple[float, float] | None = None) -> Path:
    """Fig. 3: λ⁻¹ of each tanh-like norm in ``maps`` ((label, map) pairs, e.g. Derf at several α) and the pre-LN
    exponent ζ (last panel) over the (σ_21, σ_OV) grid, with contours; ``mark`` = (σ_21, σ_OV) of a configuration
    to show (e.g. the ViT's (0.61, 0.31))."""
    if not maps:
        raise ValueError("plot_phase needs at least one map")
    plt = pyplot()
    panels = [(m.lambda_inv, f"scale λ⁻¹ (Eq. 19), {label}", m) for label, m in maps]
    panels.append((maps[0][1].zeta, "critical exponent ζ (Eq. 17), pre-LN", maps[0][1]))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.4), squeeze=False)
    for ax, (z, name, m) in zip(axes[0], panels, strict=True):
        im = ax.pcolormesh(m.sigma_ov, m.sigma_21, z, shading="auto", cmap="viridis")
        cs = ax.contour(m.sigma_ov, m.sigma_21, z, colors="w", linewidths=0.6, levels=8)
        ax.clabel(cs, fontsize=7, fmt="%.2g")
        fig.colorbar(im, ax=ax)
        if mark is not None:
            ax.plot(mark[1], mark[0], "r*", ms=10)
        ax.set_xlabel("σ_OV")
        ax.set_ylabel("σ_21")
        ax.set_title(name, fontsize=10)
    return save_figure(fig, path)
