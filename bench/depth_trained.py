"""The `depth` and `depth-mlm` experiments' trained models, measured: what training did to the signal each shape
propagates.

For every model of a finished `sigprop experiment depth` (or `depth-mlm`) folder, its seed-0 run at the model's best
rate is loaded from its last checkpoint and measured with `sigprop.measure` on the first validation batch the run
itself was scored on (32 sequences of the held-out split), beside the same configuration freshly initialised (seed
0) on the same batch. Reported per model: the stream's forward variance at the first and the last layer, the last
layer's token correlation (rank collapse would put it near 1), the gradient variance at the first layer over the
last (how much of the loss's gradient reaches the bottom of the stack) and, for Pre-LN, the share of the last
layer's stream that is the embedding's or the first layer's output carried by the skip path alone
(:func:`skip_shares`), trained and at initialisation. The figure draws each trained model's forward and gradient
variance over relative depth.

    python bench/depth_trained.py /work/experiments/depth-cpu --out docs/results/experiments/depth/trained
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

import sigprop
from sigprop.core.figures import save_figure
from sigprop.core.jsonio import finite_or_null, write_json_atomic
from sigprop.model.transformer import Transformer
from sigprop.train.checkpoint import load_checkpoint, model_state
from sigprop.train.data import TextData
from sigprop.train.run_dir import newest_checkpoint


def best_runs(results: dict, experiment_dir: Path) -> dict:
    """Model name → the run folder of its seed-0 run at its best rate (models without one are left out), from the
    folder's ``results.json`` (``results``)."""
    out = {}
    for row in results["rows"]:
        if row["best_lr"] is None:
            continue
        for run in results["runs"]:
            if run["model_name"] == row["model"] and run["lr"] == row["best_lr"] and run["seed"] == 0:
                out[row["model"]] = experiment_dir / run["run_id"]
    return out


def summary(profile) -> dict:
    layers = profile.site("layer")
    return {"fwd_first": layers[0].fwd_var, "fwd_last": layers[-1].fwd_var, "corr_last": layers[-1].fwd_corr,
            "grad_first_over_last": layers[0].grad_var / layers[-1].grad_var,
            "fwd": [r.fwd_var for r in layers], "grad": [r.grad_var for r in layers]}


def skip_shares(model, batch) -> tuple[float, float]:
    """Pre-LN: (the embedding's, the first layer's) share of the last layer's stream x_N carried by the skip path
    alone, 1 − ‖x_N − c·y‖² / ‖x_N‖² with y the embedding output (c = Π λ over every residual add) or the first
    layer's output (c = Π λ over the adds after it); 1: the later branches added nothing to it. NaN for Post-LN (a
    norm after every add: no skip-only path)."""
    from sigprop.components.residual import Residual

    if model.config.norm_position != "pre":
        return float("nan"), float("nan")
    seen = {}
    hooks = [model.embed_drop.register_forward_hook(lambda m, a, y: seen.__setitem__("e", y.detach())),
             model.layers[0].register_forward_hook(lambda m, a, y: seen.__setitem__("x1", y.detach())),
             model.layers[-1].register_forward_hook(lambda m, a, y: seen.__setitem__("x", y.detach()))]
    with torch.no_grad():
        model.loss(batch)
    for h in hooks:
        h.remove()
    lams = [float(r.lam) for layer in model.layers for r in layer.modules() if isinstance(r, Residual)]
    first = sum(1 for r in model.layers[0].modules() if isinstance(r, Residual))
    x = seen["x"].double()

    def share(y, c):
        return float(1.0 - ((x - c * y.double()) ** 2).sum() / (x ** 2).sum())

    return share(seen["e"], float(np.prod(lams))), share(seen["x1"], float(np.prod(lams[first:])))


_CORPORA: dict = {}


def _corpus(config, train_config) -> TextData:
    """The tokenised, split corpus of a run, read once for all runs whose batches it builds alike (same objective,
    vocabulary, sequence length, data, split and seed; the shapes and rates differ)."""
    key = (config.arch, config.vocab_size, config.seq_len, train_config.data, train_config.val_fraction,
           train_config.seed)
    if key not in _CORPORA:
        _CORPORA[key] = TextData.from_corpus(config, train_config)
    return _CORPORA[key]


def measure_run(run_dir: Path) -> dict:
    """{"trained": summary, "init": summary} of one run (module docstring)."""
    config, train_config, path = newest_checkpoint(run_dir, "measure")
    batch = _corpus(config, train_config).val_batches(1, train_config.batch_size)[0]
    out = {}
    for which in ("init", "trained"):
        model = Transformer(config, generator=torch.Generator().manual_seed(0))
        if which == "trained":
            ck = load_checkpoint(path, config.to_dict(), {k: tuple(v.shape) for k, v in model.state_dict().items()})
            model.load_state_dict(model_state(ck))
            out["step"] = ck.step
        out[which] = summary(sigprop.measure(model.eval(), batch))
        out[which]["embedding_share"], out[which]["first_layer_share"] = skip_shares(model, batch)
    return out


def figure(results: dict, path: Path, experiment: str = "depth") -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, r in results.items():
        fwd, grad = np.asarray(r["trained"]["fwd"]), np.asarray(r["trained"]["grad"])
        depth = (np.arange(len(fwd)) + 1) / len(fwd)
        style = "-" if "pre-LN" in name else "--"
        axes[0].plot(depth, fwd, style, marker=".", label=name)
        axes[1].plot(depth, grad / grad[-1], style, marker=".", label=name)
    axes[0].set(yscale="log", xlabel="layer / N", ylabel="forward variance of the stream (trained)")
    axes[1].set(yscale="log", xlabel="layer / N", ylabel="gradient variance / the last layer's (trained)")
    axes[1].legend(fontsize=7)
    fig.suptitle(f"{experiment} experiment: the trained models (seed 0, best rate), validation batch")
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment_dir", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="folder for trained.json and trained.png")
    args = parser.parse_args()
    summary_file = args.experiment_dir / "results.json"
    if not summary_file.is_file():
        parser.error(f"{summary_file} not found: pass a folder of `sigprop experiment depth` or `depth-mlm`")
    experiment = json.loads(summary_file.read_text())
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    runs = best_runs(experiment, args.experiment_dir)

    def share(r):
        e, f = r["embedding_share"], r["first_layer_share"]
        return "–" if e != e else f"{e:.3f} / {f:.3f}"

    results = {}
    print("| model | step | fwd var first → last layer (init) | last layer's token corr. (init) | "
          "grad var first / last layer (init) | share of the last stream carried by the skip from the embedding / "
          "the first layer (init) |")
    print("|---|---:|---|---:|---:|---|")
    for name, run_dir in runs.items():
        r = results[name] = measure_run(run_dir)
        t, i = r["trained"], r["init"]
        print(f"| {name} | {r['step']} | {t['fwd_first']:.3g} → {t['fwd_last']:.3g} ({i['fwd_first']:.3g} → "
              f"{i['fwd_last']:.3g}) | {t['corr_last']:.3f} ({i['corr_last']:.3f}) | "
              f"{t['grad_first_over_last']:.3g} ({i['grad_first_over_last']:.3g}) | {share(t)} ({share(i)}) |",
              flush=True)
    write_json_atomic(args.out / "trained.json", finite_or_null(results))
    figure(results, args.out / "trained.png", experiment["experiment"])
    print(f"\nJSON: {args.out / 'trained.json'}; figure: {args.out / 'trained.png'}")


if __name__ == "__main__":
    main()
