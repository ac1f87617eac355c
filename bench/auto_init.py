"""init="auto" against init="dslm" at 192 layers, measured: four families (GELU Pre-LN encoder, Llama-style decoder,
Derf encoder, causal Pre-LN decoder), each measured over --seeds models on the default corpus (sigprop measure).

For each: the stream's forward variance at every layer (min and max over the input and the 192 layer outputs), the
output's (the last layer's, before the final norm), the gradient variance's change from the last layer to the
first, and the time the calibration took. Writes the table (stdout), every measurement (--out/*.json) and a figure.

    python bench/auto_init.py --seeds 4 --out docs/results/auto-init > docs/results/auto-init.md
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from sigprop.core.figures import save_figure
from sigprop.core.profile import Profile
from sigprop.model.presets import resolve_config
from sigprop.model.transformer import plan_for
from sigprop.report.runs import Request, run_measure

FAMILIES = {
    "GELU Pre-LN encoder": ("fig1-preln", ["activation=gelu"]),
    "Llama-style decoder (RMSNorm, SwiGLU, RoPE, GQA)": ("llama-preln", ["n_layers=192"]),
    "Derf encoder (no norm)": ("fig1-preln", ["norm=derf"]),
    "causal Pre-LN decoder": ("decoder-preln", []),
}
INITS = ("auto", "dslm")


def summary(profile: Profile) -> dict:
    layers = profile.site("layer")
    stream = [profile.site("input")[0].fwd_var] + [r.fwd_var for r in layers]
    grad_first, grad_last = layers[0].grad_var, layers[-1].grad_var
    return {"fwd_min": float(np.min(stream)), "fwd_max": float(np.max(stream)), "output_var": layers[-1].fwd_var,
            "grad_change": grad_first / grad_last, "last_corr": layers[-1].fwd_corr,
            "fwd": stream, "grad": [r.grad_var for r in layers]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path("docs/results/auto-init"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    print(f"Measured over {args.seeds} seeds on the default corpus (`sigprop measure --seeds {args.seeds}`), 192 "
          "layers each; forward variance of the stream, input and every layer's output; gradient change = gradient "
          "variance at the first layer's output over the last's.\n")
    print("| model | init | forward variance, min – max over layers | output variance | gradient change, last → "
          "first | last-layer token correlation | in [0.8, 1.25] and [0.5, 2] | calibration |")
    print("|---|---|---:|---:|---:|---:|---|---:|")
    for family, (preset, overrides) in FAMILIES.items():
        for init in INITS:
            sets = [*overrides, f"init={init}"]
            config, _ = resolve_config(preset, None, sets)
            t0 = time.perf_counter()
            plan_for(config)
            calibration = time.perf_counter() - t0
            slug = f"{preset}-{'-'.join(s.replace('=', '_') for s in sets)}"
            run = run_measure(Request(preset=preset, overrides=tuple(sets), seeds=args.seeds,
                                      json=args.out / f"{slug}.json"))
            s = summary(run.profile)
            results[(family, init)] = s
            ok = 0.8 <= s["output_var"] <= 1.25 and s["fwd_min"] >= 0.5 and s["fwd_max"] <= 2.0
            print(f"| {family} | {init} | {s['fwd_min']:.3f} – {s['fwd_max']:.3f} | {s['output_var']:.3f} | "
                  f"×{s['grad_change']:.3g} | {s['last_corr']:.3f} | {'yes' if ok else 'no'} | "
                  f"{calibration:.1f} s |" if init == "auto" else
                  f"| {family} | {init} | {s['fwd_min']:.3f} – {s['fwd_max']:.3f} | {s['output_var']:.3f} | "
                  f"×{s['grad_change']:.3g} | {s['last_corr']:.3f} | {'yes' if ok else 'no'} | – |", flush=True)
    figure(results, args.out / "figure.png")
    (args.out / "summary.json").write_text(json.dumps({f"{f} | {i}": v for (f, i), v in results.items()}, indent=1))


def figure(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(FAMILIES), figsize=(4 * len(FAMILIES), 6.5), sharex=True)
    for j, family in enumerate(FAMILIES):
        for init, color in zip(INITS, ("C0", "C1"), strict=True):
            s = results[(family, init)]
            axes[0, j].plot(np.arange(-1, len(s["fwd"]) - 1), s["fwd"], color=color, label=init)
            axes[1, j].plot(np.arange(len(s["grad"])), s["grad"], color=color, label=init)
        axes[0, j].set_title(family, fontsize=9)
        axes[0, j].axhspan(0.5, 2.0, color="0.9", zorder=0)
        axes[1, j].set_yscale("log")
        axes[1, j].set_xlabel("layer")
    axes[0, 0].set_ylabel("forward variance (measured)")
    axes[1, 0].set_ylabel("gradient variance (measured)")
    axes[0, 0].legend()
    save_figure(fig, path, dpi=100, crop=True)


if __name__ == "__main__":
    main()
