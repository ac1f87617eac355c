"""The model-level laws from the comparison JSONs that `sigprop compare --preset NAME --json
docs/results/compare-NAME.json` writes: growth laws (Kedia et al. App. E), the Post-LN per-layer factor, DeepScaleLM's
bounds, rank collapse (App. F) and the Q/K blow-up (Sec. 3.3), measured and predicted side by side.

    python bench/model_laws.py --docs docs/results --markdown docs/results/model-laws.md

The first-to-last gradient ratio against depth reads ``compare-NAME-N.json`` for the depths N that exist beside the
192-layer ``compare-NAME.json``, written by ``sigprop compare --preset NAME --set n_layers=N --json ...``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import sigprop.laws as laws


def load(folder: Path, name: str):
    path = folder / f"compare-{name}.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    rows = data["per_layer"]
    get = lambda key: np.array([r[key] for r in rows], dtype=float)  # noqa: E731
    return data, get


def fit_log_slope(layers, values, lo, hi):
    keep = (layers >= lo) & (layers <= hi)
    slope, icpt = np.polyfit(layers[keep], np.log(values[keep]), 1)
    res = np.log(values[keep]) - (slope * layers[keep] + icpt)
    r2 = 1.0 - float(res @ res) / float(((np.log(values[keep]) - np.log(values[keep]).mean()) ** 2).sum())
    return slope, r2


def depth_series(folder: Path, name: str) -> list[tuple[int, float, float]]:
    """(layers, predicted, measured first-to-last gradient variance ratio) for every depth of preset ``name`` with a
    comparison JSON, shallowest first."""
    series = []
    for path in folder.glob(f"compare-{name}*.json"):
        if path.stem != f"compare-{name}" and not path.stem.removeprefix(f"compare-{name}-").isdigit():
            continue
        rows = json.loads(path.read_text())["per_layer"]
        first, last = rows[0], rows[-1]
        series.append((len(rows), first["pred_grad_var"] / last["pred_grad_var"],
                       first["meas_grad_var"] / last["meas_grad_var"]))
    return sorted(series)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default="docs/results")
    ap.add_argument("--markdown")
    args = ap.parse_args()
    folder = Path(args.docs)
    out = ["| check | predicted | measured | target |", "|---|---:|---:|---|"]

    pre = load(folder, "fig1-preln")
    if pre:
        data, get = pre
        c = data["config"]
        layers, fv_m, fv_p = get("layer"), get("meas_fwd_var"), get("pred_fwd_var")
        gv_m, gv_p = get("meas_grad_var"), get("pred_grad_var")
        n = layers + 1.0
        slope_m, icpt_m = np.polyfit(n, fv_m, 1)
        slope_p, _ = np.polyfit(n, fv_p, 1)
        res = fv_m - (slope_m * n + icpt_m)
        r2_lin = 1.0 - float(res @ res) / float(((fv_m - fv_m.mean()) ** 2).sum())
        C1, C2 = laws.xavier_block_constants(c["d_model"], c["dropout"])
        r_deep = float(np.mean(get("meas_fwd_corr")[len(layers) // 2:]))
        out.append(f"| Pre-LN Xavier: forward variance per layer (linear growth, App. E.1; C3 = C1·r + C2 = "
                   f"{C1 * r_deep + C2:.3f} with the measured deep r) | {slope_p:.3f} | {slope_m:.3f} "
                   f"(linear R² {r2_lin:.4f}) | linear |")
        N = len(layers)
        ratio_m, ratio_p = gv_m[0] / gv_m[-1], gv_p[0] / gv_p[-1]
        k = (layers >= 8) & (layers <= N - 8)
        expo_m = np.polyfit(np.log(N / n[k]), np.log(gv_m[k] / gv_m[-1]), 1)[0]
        expo_p = np.polyfit(np.log(N / n[k]), np.log(gv_p[k] / gv_p[-1]), 1)[0]
        out.append(f"| Pre-LN Xavier: gradient σ²_g(n)/σ²_g(N) ∝ (N/n)^C (hyperbolic for C = 1, App. E.1); "
                   f"first/last ratio | C = {expo_p:.3f}; {ratio_p:.2f} | C = {expo_m:.3f}; {ratio_m:.2f} | "
                   "hyperbolic |")

    post = load(folder, "fig3-postln")
    if post:
        _, get = post
        layers, gm, gp = get("layer"), get("meas_grad_var"), get("pred_grad_var")
        lo, hi = 16, layers.max() - 16
        sm, r2m = fit_log_slope(layers, gm, lo, hi)
        sp, _ = fit_log_slope(layers, gp, lo, hi)
        out.append(f"| Post-LN Xavier: per-layer gradient factor exp(slope of log σ²_g), layers {lo:.0f}–{hi:.0f} "
                   f"(App. E.2) | {np.exp(sp):.4f} | {np.exp(sm):.4f} (R² of log fit {r2m:.4f}) | within 1% |")

    for name in ("fig4-dslm-pre", "fig4-dslm-post", "vit-dslm"):
        d = load(folder, name)
        if d:
            _, get = d
            fm, fp = get("meas_fwd_var"), get("pred_fwd_var")
            gm, gp = get("meas_grad_var"), get("pred_grad_var")
            out.append(f"| {name}: output variance (last layer); forward variance range | {fp[-1]:.3f}; "
                       f"[{fp.min():.3f}, {fp.max():.3f}] | {fm[-1]:.3f}; [{fm.min():.3f}, {fm.max():.3f}] | "
                       "[0.8, 1.25] |")
            out.append(f"| {name}: first-to-last gradient variance ratio | {gp[0] / gp[-1]:.3f} | "
                       f"{gm[0] / gm[-1]:.3f} | [0.5, 2] |")
            if d[0]["config"]["norm_position"] == "pre":
                c = d[0]["config"]
                c6 = float(np.mean(get("meas_grad_corr") / get("meas_fwd_corr")))
                law = float(np.exp(-c["beta_k"] * (1.0 - c6)))
                out.append(f"| {name}: App. E.3's gradient change e^(−k(1−C6)) with the measured mean C6 = r_g/r_x "
                           f"= {c6:.3f} (the paper assumes C6 ≈ 1) | {law:.3f} | {gm[0] / gm[-1]:.3f} | — |")

    for name, label, target in (("fig1-preln", "Pre-LN Xavier", "grows with N"),
                                ("fig4-dslm-pre", "DeepScaleLM Pre-LN", "bounded in N (App. E.3)")):
        series = depth_series(folder, name)
        if len(series) > 1:
            depths = ", ".join(str(n) for n, _, _ in series)
            pred = "; ".join(f"{p:.3g}" for _, p, _ in series)
            meas = "; ".join(f"{m:.3g}" for _, _, m in series)
            out.append(f"| {label}: first-to-last gradient variance ratio at N = {depths} layers | {pred} | {meas} | "
                       f"{target} |")

    vit = load(folder, "vit-preln")
    if vit:
        _, get = vit
        cells = [f"{get(f'{k}_fwd_var')[-1]:.4g}; {get(f'{k}_grad_var')[0] / get(f'{k}_grad_var')[-1]:.4g}"
                 for k in ("pred", "meas")]
        out.append(f"| vit-preln (Xavier ViT, App. H's baseline): output variance (last layer); first-to-last gradient "
                   f"variance ratio | {cells[0]} | {cells[1]} | grow |")

    qk, base = load(folder, "qk-2x-xavier"), pre
    if qk and base:
        _, get = qk
        _, get0 = base
        cells = []
        for kind in ("pred", "meas"):
            g, g0 = get(f"{kind}_grad_var"), get0(f"{kind}_grad_var")
            cells.append(f"{g[0] / g[-1]:.3g}; ×{(g[0] / g[-1]) / (g0[0] / g0[-1]):.3g}")
        out.append(f"| Q/K at 2× Xavier (Sec. 3.3): first/last gradient variance; vs Xavier | {cells[0]} | "
                   f"{cells[1]} | explodes |")

    for name, label in (("fig3-postln", "Xavier, p = 0.1"), ("rank-collapse-noci", "no dropout, V at 1/fan_out")):
        d = load(folder, name)
        if d:
            data, get = d
            c = data["config"]
            half = len(get("layer")) // 2
            rm, rp = float(np.mean(get("meas_fwd_corr")[half:])), float(np.mean(get("pred_fwd_corr")[half:]))
            heads = c["n_heads"]
            C1, C2 = laws.xavier_block_constants(c["d_model"], c["dropout"],
                                                 n_heads=heads if c["v_init"] == "noci" else None)
            closed = laws.r_max(C1, C2, c["dropout"])
            out.append(f"| rank collapse ({label}): deep-layer token correlation (App. F r_max = {closed:.3f}) | "
                       f"{rp:.4f} | {rm:.4f} | {'< 1, at r_max' if c['dropout'] > 0 else '→ 1'} |")
    text = "\n".join(out)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")


if __name__ == "__main__":
    main()
