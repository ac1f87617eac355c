"""The predicted seed-to-seed spread (``predict(..., spread=True)``) against the spread measured over many seeds.

For each cell (a model family at one width and depth) it measures, for every seed, log σ²_g(l)/σ²_g(top) and
log σ²_x(l)/σ²_x(input) at every layer (one model per seed, train mode, dropout 0.1, a real batch of the default
corpus, masked-LM loss), and compares their standard deviation across seeds at the first layer with the
prediction's ``grad_var_log_sd`` and ``fwd_var_log_sd``.

Criterion, stated before any run: in every cell whose measured sd exceeds 0.1, the predicted sd lies within 20 %
(relative) or 2.5 standard errors of the measured one, whichever is larger; the standard error of an sd from n seeds
is sd/√(2(n − 1)).

    python bench/spread_validation.py measure [--cells NAME ...] [--seeds 64]   # resumable: a line per seed
    python bench/spread_validation.py predict                                   # the predictions, per cell
    python bench/spread_validation.py report                                    # table (markdown) and figure
    python bench/spread_validation.py coverage   # the doctor's 90% interval of one model's gradient ratio, per cell
    python bench/spread_validation.py states     # the token correlations' own spread, measured against predicted
    python bench/spread_validation.py additivity # a seed's layers move together: Var S_0 against its layers' sum
    python bench/spread_validation.py ablation [--cells NAME ...]   # without the gradient correlation's channel
    python bench/spread_validation.py anchors --cells NAME [--anchors 10 20 40]   # the noise anchors' effect
    python bench/spread_validation.py interpolation [--cells NAME ...]   # the anchors' interpolation error
    python bench/spread_validation.py correlations   # token correlations within / across sequences (Post-LN)

Every seed's numbers are appended to docs/results/spread/cells/CELL.jsonl as soon as they are measured, so an
interrupted run resumes where it stopped. One thread per process; run two processes on disjoint ``--cells``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np

from sigprop.core.figures import save_figure
from sigprop.core.jsonio import write_text_atomic

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results" / "spread"
SEQUENCES, LENGTH = 2, 32
#: family → (norm position, init, architecture): encoders with the masked-LM loss, whose gradient starts on the ~15%
#: labelled tokens; the "-dec" families are causal decoders whose loss labels every token (the control of the page's
#: "which tokens carry the gradient")
FAMILIES = {"postln-xavier": ("post", "xavier", "encoder"), "dslm-post": ("post", "dslm", "encoder"),
            "preln-xavier": ("pre", "xavier", "encoder"), "postln-xavier-dec": ("post", "xavier", "decoder"),
            "dslm-post-dec": ("post", "dslm", "decoder"), "preln-xavier-dec": ("pre", "xavier", "decoder")}
CELLS = [("postln-xavier", 64, 24), ("postln-xavier", 64, 96), ("postln-xavier", 64, 192),
         ("postln-xavier", 128, 96), ("postln-xavier", 256, 96), ("postln-xavier", 512, 24),
         ("dslm-post", 64, 24), ("dslm-post", 64, 96), ("dslm-post", 64, 192), ("dslm-post", 128, 96),
         ("dslm-post", 256, 96),
         ("preln-xavier", 64, 24), ("preln-xavier", 64, 96), ("preln-xavier", 64, 192), ("preln-xavier", 128, 96),
         ("preln-xavier", 256, 24),
         ("postln-xavier-dec", 64, 24), ("dslm-post-dec", 64, 24), ("preln-xavier-dec", 64, 24)]
RELATIVE, STANDARD_ERRORS, FLOOR = 0.20, 2.5, 0.1


def cell_name(family: str, width: int, depth: int) -> str:
    return f"{family}-d{width}-n{depth}"


def config_of(family: str, width: int, depth: int):
    from sigprop.model.config import TransformerConfig

    norm, init, arch = FAMILIES[family]
    return TransformerConfig(arch=arch, norm_position=norm, init=init, n_layers=depth, d_model=width,
                             n_heads=max(1, width // 64), seq_len=LENGTH, max_len=LENGTH)


def batch_of(config):
    from sigprop.model.batches import token_batch

    return token_batch(config, batch_size=SEQUENCES)


def measure_cell(family: str, width: int, depth: int, seeds: int) -> None:
    import torch

    from sigprop.measurement.hooks import measure
    from sigprop.model.transformer import Transformer

    config = config_of(family, width, depth)
    batch = batch_of(config)
    path = OUT / "cells" / f"{cell_name(family, width, depth)}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    done = {json.loads(line)["seed"] for line in path.read_text().splitlines()} if path.exists() else set()
    top = depth - 1
    for s in range(seeds):
        if s in done:
            continue
        t = time.time()
        model = Transformer(config, generator=torch.Generator().manual_seed(s))
        model.train()
        torch.manual_seed(10_000 + s)  # dropout masks, as sigprop.measurement.seeds.measure_seeds
        rows = measure(model, batch).lookup()
        del model
        grad = [math.log(rows[(k, "layer")].grad_var / rows[(top, "layer")].grad_var) for k in range(depth)]
        fwd = [math.log(rows[(k, "layer")].fwd_var / rows[(-1, "input")].fwd_var) for k in range(depth)]
        with path.open("a") as f:
            f.write(json.dumps({"seed": s, "grad_log_ratio": grad, "fwd_log_ratio": fwd,
                                "seconds": round(time.time() - t, 2)}) + "\n")
        print(f"{cell_name(family, width, depth)} seed {s}: {time.time() - t:.1f} s", flush=True)


def predict_cell(family: str, width: int, depth: int) -> dict:
    from sigprop.analysis.experiment import batch_prediction

    config = config_of(family, width, depth)
    t = time.time()
    prediction = batch_prediction(config, batch_of(config), SEQUENCES)
    prediction.profile()
    plain = time.time() - t
    t = time.time()
    profile = prediction.profile(spread=True)
    spread = time.time() - t
    rows = profile.site("layer")
    return {"grad_var_log_sd": [r.grad_var_log_sd for r in rows], "fwd_var_log_sd": [r.fwd_var_log_sd for r in rows],
            "seconds_plain": round(plain, 2), "seconds_spread": round(spread, 2), "meta": profile.meta["spread"]}


def verdict(predicted: float, measured: float, n: int) -> tuple[str, float]:
    """("pass" / "FAIL" / "n/a", the allowed difference) by the pre-stated criterion."""
    se = measured / math.sqrt(2 * (n - 1))
    allowed = max(RELATIVE * measured, STANDARD_ERRORS * se)
    if measured <= FLOOR:
        return "n/a", allowed
    return ("pass" if abs(predicted - measured) <= allowed else "FAIL"), allowed


def report() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    predictions: dict = {}
    for path in sorted(OUT.glob("predictions*.json")):
        predictions.update(json.loads(path.read_text()))
    lines = ["| family | d | layers | seeds | quantity | measured sd ± SE | predicted | ratio | allowed | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    points = []
    for family, width, depth in CELLS:
        name = cell_name(family, width, depth)
        path = OUT / "cells" / f"{name}.jsonl"
        if not path.exists() or name not in predictions:
            continue
        records = [json.loads(line) for line in path.read_text().splitlines()]
        n = len(records)
        if n < 3:
            continue
        quantities = [("grad", "grad_log_ratio", "grad_var_log_sd")]
        if family.startswith("preln-xavier"):
            quantities.append(("fwd", "fwd_log_ratio", "fwd_var_log_sd"))
        for label, key, column in quantities:
            layer = 0 if label == "grad" else depth - 1
            x = np.array([r[key][layer] for r in records])
            sd = float(x.std(ddof=1))
            pred = predictions[name][column][layer]
            v, allowed = verdict(pred, sd, n)
            se = sd / math.sqrt(2 * (n - 1))
            where = "layer 0 / top" if label == "grad" else f"layer {layer} / input"
            lines.append(f"| {family} | {width} | {depth} | {n} | {label} ({where}) | {sd:.3f} ± {se:.3f} | "
                         f"{pred:.3f} | {pred / sd:.2f} | {allowed:.3f} | {v} |")
            points.append((family, label, sd, se, pred))
    write_text_atomic(OUT / "table.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    fig, ax = plt.subplots(figsize=(5.5, 5))
    markers = {"postln-xavier": "o", "dslm-post": "s", "preln-xavier": "^", "postln-xavier-dec": "P",
               "dslm-post-dec": "D", "preln-xavier-dec": "v"}
    for family, label, sd, se, pred in points:
        ax.errorbar(sd, pred, xerr=se, fmt=markers[family], color="C0" if label == "grad" else "C1",
                    label=f"{family}, {label}")
    top = max([p[2] for p in points] + [p[4] for p in points]) * 1.2
    grid = np.linspace(0, top, 50)
    ax.plot(grid, grid, "k-", lw=0.8)
    ax.fill_between(grid, 0.8 * grid, 1.2 * grid, color="0.9")
    ax.set_xlabel("measured sd across seeds (log variance)")
    ax.set_ylabel("predicted sd (spread=True)")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), fontsize=7)
    ax.set_title("seed-to-seed spread: predicted vs measured", fontsize=9)
    fig.tight_layout()
    save_figure(fig, OUT / "spread.png", dpi=120)


def expected_ratio(family: str, width: int, depth: int) -> float:
    """The predicted expectation of σ²_g(0)/σ²_g(top) of a cell, on the cell's batch (as ``predict`` makes it)."""
    from sigprop.analysis.experiment import batch_prediction

    config = config_of(family, width, depth)
    rows = {r.layer: r for r in batch_prediction(config, batch_of(config), SEQUENCES).profile().site("layer")}
    return rows[0].grad_var / rows[depth - 1].grad_var


def coverage(level: float = 0.9) -> None:
    """Per cell, how many of the measured seeds' ratios σ²_g(0)/σ²_g(top) fall in the interval the doctor gives for
    one model (:class:`sigprop.analysis.doctor.GradientInterval`: log-normal with the predicted sd, mean-matched to
    the predicted expectation), with a Wilson 95% interval of the coverage. The expectations are cached in
    docs/results/spread/expected.json (a prediction per cell)."""
    from statistics import NormalDist

    from sigprop.core.profile import Profile, Row
    from sigprop.theory.spread import gradient_ratio_interval

    predictions: dict = {}
    for path in sorted(OUT.glob("predictions*.json")):
        predictions.update(json.loads(path.read_text()))
    cache = OUT / "expected.json"
    expected = json.loads(cache.read_text()) if cache.exists() else {}
    z = NormalDist().inv_cdf(0.975)
    lines = [f"| family | d | layers | seeds | predicted sd | interval ({100 * level:g}%) | inside | coverage "
             "(Wilson 95%) |", "|---|---|---|---|---|---|---|---|"]
    for family, width, depth in CELLS:
        name = cell_name(family, width, depth)
        path = OUT / "cells" / f"{name}.jsonl"
        if not path.exists() or name not in predictions:
            continue
        if name not in expected:
            expected[name] = expected_ratio(family, width, depth)
            write_text_atomic(cache, json.dumps(expected, indent=1))
        records = [json.loads(line) for line in path.read_text().splitlines()]
        n, sd = len(records), predictions[name]["grad_var_log_sd"][0]
        rows = (Row(0, "layer", grad_var=expected[name], grad_var_log_sd=sd), Row(1, "layer", grad_var=1.0,
                                                                                    grad_var_log_sd=0.0))
        low, high = gradient_ratio_interval(Profile("predicted", {}, rows), 0, level)
        inside = sum(low <= math.exp(r["grad_log_ratio"][0]) <= high for r in records)
        p = inside / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        lines.append(f"| {family} | {width} | {depth} | {n} | {sd:.3f} | {low:.3g} – {high:.3g} | {inside} | "
                     f"{100 * p:.0f}% ({100 * (centre - half):.0f}–{100 * (centre + half):.0f}%) |")
        print(lines[-1], flush=True)
    write_text_atomic(OUT / "coverage.md", "\n".join(lines) + "\n")


#: The cells whose token correlations' seed-to-seed spread ``states`` measures (the two families whose gradient
#: spread the correlations carry, at the shallowest and the deepest Pre-LN cell).
STATE_CELLS = [("preln-xavier", 64, 24), ("preln-xavier", 64, 192), ("dslm-post", 64, 24)]


def states(seeds: int) -> None:
    """The correlations the spread carries, checked on their own: per cell of :data:`STATE_CELLS`, the measured
    seed-to-seed standard deviation of the stream's and the gradient's token correlation after each layer (one model
    per seed, as ``measure``; resumable, a line per seed in spread/states/CELL.jsonl) against the prediction's
    ``fwd_corr_sd`` / ``grad_corr_sd`` (the ``predict`` files' meta); the table goes to spread/states.md."""
    import torch

    from sigprop.measurement.hooks import measure
    from sigprop.model.transformer import Transformer

    predictions: dict = {}
    for path in sorted(OUT.glob("predictions*.json")):
        predictions.update(json.loads(path.read_text()))
    lines = ["| cell | layer | stream: measured sd ± SE | predicted | gradient: measured sd ± SE | predicted |",
             "|---|---|---|---|---|---|"]
    for family, width, depth in STATE_CELLS:
        name = cell_name(family, width, depth)
        config = config_of(family, width, depth)
        batch = batch_of(config)
        path = OUT / "states" / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        done = {json.loads(line)["seed"] for line in path.read_text().splitlines()} if path.exists() else set()
        for s in range(seeds):
            if s in done:
                continue
            model = Transformer(config, generator=torch.Generator().manual_seed(s))
            model.train()
            torch.manual_seed(10_000 + s)
            rows = measure(model, batch).lookup()
            with path.open("a") as f:
                f.write(json.dumps({"seed": s, "fwd_corr": [rows[(k, "layer")].fwd_corr for k in range(depth)],
                                    "grad_corr": [rows[(k, "layer")].grad_corr for k in range(depth)]}) + "\n")
            print(f"{name} seed {s}", flush=True)
        records = [json.loads(line) for line in path.read_text().splitlines()]
        fwd = np.array([r["fwd_corr"] for r in records])
        grad = np.array([r["grad_corr"] for r in records])
        n = len(records)
        meta = predictions[name]["meta"]
        for k in sorted({0, 1, 2, 6, depth // 4, depth // 2, depth - 2}):
            mf, mg = fwd[:, k].std(ddof=1), grad[:, k].std(ddof=1)
            se = 1 / math.sqrt(2 * (n - 1))
            lines.append(f"| {name} | {k} | {mf:.4f} ± {mf * se:.4f} | {meta['fwd_corr_sd'][k + 1]:.4f} | "
                         f"{mg:.4f} ± {mg * se:.4f} | {meta['grad_corr_sd'][k + 1]:.4f} |")
            print(lines[-1], flush=True)
    write_text_atomic(OUT / "states.md", "\n".join(lines) + "\n")


def additivity() -> None:
    """Per cell, the measured variance of log σ²_g(0)/σ²_g(top) across seeds against the sum of its layers' own
    variances (each layer's log gain S_{k−1} − S_k): a ratio above 1 says that one seed's layers move together."""
    print("| cell | Var S_0 | Σ_k Var(layer k's log gain) | ratio |")
    print("|---|---|---|---|")
    for family, width, depth in CELLS:
        name = cell_name(family, width, depth)
        path = OUT / "cells" / f"{name}.jsonl"
        if not path.exists():
            continue
        S = np.array([json.loads(line)["grad_log_ratio"] for line in path.read_text().splitlines()])
        total, parts = S[:, 0].var(ddof=1), np.diff(S, axis=1).var(axis=0, ddof=1).sum()
        print(f"| {name} | {total:.3f} | {parts:.3f} | {total / parts:.2f} |", flush=True)


def ablation(cells: list) -> None:
    """The predicted sd of log σ²_g(0)/σ²_g(top) without the gradient correlation's channel (the stream's variance
    and token correlation carried only), per cell: what that channel adds."""
    from sigprop.analysis.experiment import batch_prediction
    from sigprop.theory.spread import predict_spread

    for family, width, depth in cells:
        config = config_of(family, width, depth)
        prediction = batch_prediction(config, batch_of(config), SEQUENCES)
        columns = predict_spread(prediction.model, prediction.profile(), prediction.context, prediction.sequences,
                                 prediction.L, gradient_correlation=False)
        print(f"{cell_name(family, width, depth)}: {columns.grad[0]:.3f} without the gradient correlation", flush=True)


def anchors(cells: list, counts: list[int], sampling_seeds: int) -> None:
    """The predicted sd of log σ²_g(0)/σ²_g(top) per cell with the noise sampled at ``counts`` Chebyshev anchors
    without refinement, with the default's refinement (sigprop.theory.spread.NoiseSampling) and at every layer, each
    under ``sampling_seeds`` seeds of the Monte Carlo: how much the interpolation between anchors moves it, beside
    the Monte Carlo's own noise."""
    from sigprop.analysis.experiment import batch_prediction
    from sigprop.theory.spread import NoiseSampling, predict_spread

    for family, width, depth in cells:
        config = config_of(family, width, depth)
        prediction = batch_prediction(config, batch_of(config), SEQUENCES)
        profile = prediction.profile()
        designs = [(f"{c} anchors", NoiseSampling(anchors=c, most_anchors=c)) for c in counts]
        designs += [("the default (refined)", NoiseSampling()),
                    ("every layer", NoiseSampling(anchors=depth, most_anchors=depth))]
        for label, design in designs:
            values, sampled, t = [], 0, time.time()
            for seed in range(sampling_seeds):
                columns = predict_spread(prediction.model, profile, prediction.context, prediction.sequences,
                                         prediction.L, dataclasses.replace(design, seed=seed))
                values.append(columns.grad[0])
                sampled = len(columns.meta["anchor_layers"])
            mean = float(np.mean(values))
            spread = f" ± {np.std(values, ddof=1) / math.sqrt(len(values)):.3f}" if len(values) > 1 else ""
            print(f"{cell_name(family, width, depth)}: {mean:.3f}{spread} with {label} ({sampled} sampled; "
                  f"{' '.join(f'{v:.3f}' for v in values)}; {time.time() - t:.0f} s)", flush=True)


def _every_layer_noise(family: str, width: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """The fresh noise sampled at every layer (N, 4, 4) and the responses (N, 4, 3) of one cell, as predict_spread
    hands them to accumulate_state (taken from that call)."""
    import sigprop.theory.spread as spread
    from sigprop.analysis.experiment import batch_prediction

    config = config_of(family, width, depth)
    prediction = batch_prediction(config, batch_of(config), SEQUENCES)
    accumulate_state, taken = spread.accumulate_state, {}

    def take(noise, J):
        taken.update(noise=noise.copy(), J=J.copy())
        return accumulate_state(noise, J)

    spread.accumulate_state = take
    try:
        spread.predict_spread(prediction.model, prediction.profile(), prediction.context, prediction.sequences,
                              prediction.L, spread.NoiseSampling(anchors=depth, most_anchors=depth),
                              gradient_correlation="dec" not in family)
    finally:
        spread.accumulate_state = accumulate_state
    return taken["noise"], taken["J"]


def _refined_anchors(noise: np.ndarray, ratio: float) -> list[int]:
    """The anchors predict_spread's refinement picks at ``ratio`` when each anchor's noise is ``noise``'s row."""
    from sigprop.theory.spread import NoiseSampling, anchor_layers, refined_anchors

    return sorted(refined_anchors(anchor_layers(len(noise)), lambda k: noise[k], NoiseSampling().most_anchors, ratio))


def interpolation(cells: list) -> None:
    """How far the noise anchors' interpolation moves the predicted sd of log σ²_g(0)/σ²_g(top), on one Monte Carlo
    draw: the noise is sampled at every layer once, then accumulated from the rows of each anchor design only,
    interpolated as predict_spread interpolates them. Printed: each design's sd over the every-layer sd, and its
    anchor count. This is how the refinement's ratio (sigprop.theory.spread.REFINE_RATIO) was chosen: by the
    interpolation's error, not by measurement."""
    from sigprop.theory.spread import _interpolated, accumulate_state, anchor_layers

    for family, width, depth in cells:
        noise, J = _every_layer_noise(family, width, depth)
        every = math.sqrt(accumulate_state(noise, J)[1][1])
        line = []
        for label, at in [("10 Chebyshev", anchor_layers(depth)), ("refined at 2", _refined_anchors(noise, 2.0)),
                          ("refined at 1.5", _refined_anchors(noise, 1.5))]:
            rows = _interpolated(at, noise[at].reshape(len(at), -1), depth).reshape(depth, 4, 4)
            line.append(f"{label}: {math.sqrt(accumulate_state(rows, J)[1][1]) / every:.3f} ({len(at)})")
        print(f"{cell_name(family, width, depth)}: every layer {every:.3f}; " + "; ".join(line), flush=True)


def correlations(family: str = "postln-xavier", width: int = 64, depth: int = 24, seeds: int = 3) -> None:
    """Token correlations of the stream and of its gradient within a sequence and across the batch's sequences, at a
    few layers of a few seeds (why the one-layer Monte Carlo shares the forward rows' common part across the batch
    and not the gradient's: sigprop.theory.layer_noise)."""
    import torch

    from sigprop.model.transformer import Transformer

    config = config_of(family, width, depth)
    batch = batch_of(config)

    def within_across(t: torch.Tensor) -> tuple[float, float]:
        t = t - t.mean()
        b, length, _ = t.shape
        gram = torch.einsum("btd,csd->btcs", t, t)
        var = t.pow(2).sum() / (b * length)
        off = ~torch.eye(length, dtype=torch.bool)
        within = torch.stack([gram[i, :, i, :][off].mean() for i in range(b)]).mean() / var
        across = torch.stack([gram[i, :, j, :].mean() for i in range(b) for j in range(b) if i != j]).mean() / var
        return float(within), float(across)

    layers = [0, depth // 4, depth // 2, 3 * depth // 4, depth - 1]
    print(f"{cell_name(family, width, depth)}, {SEQUENCES} x {LENGTH} tokens: correlation within a sequence / "
          "across sequences, of the stream x and of its gradient g")
    for s in range(seeds):
        model = Transformer(config, generator=torch.Generator().manual_seed(s))
        model.train()
        torch.manual_seed(10_000 + s)
        store: dict[int, torch.Tensor] = {}

        def keep(k: int, into: dict[int, torch.Tensor]):
            def hook(module, args, out):
                out.retain_grad()
                into[k] = out
            return hook

        hooks = [model.layers[k].register_forward_hook(keep(k, store)) for k in layers]
        model.loss(batch).backward()
        for h in hooks:
            h.remove()
        cells = []
        for k in layers:
            (xw, xa), (gw, ga) = within_across(store[k].detach()), within_across(store[k].grad)
            cells.append(f"layer {k}: x {xw:.2f}/{xa:.2f} g {gw:.2f}/{ga:+.2f}")
        print(f"seed {s}: " + "; ".join(cells), flush=True)


def main() -> None:
    import torch

    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["measure", "predict", "report", "coverage", "states", "additivity", "ablation",
                                        "anchors", "interpolation", "correlations"])
    ap.add_argument("--anchors", type=int, nargs="*", default=[10, 20, 40],
                    help="anchors: the numbers of Chebyshev noise anchors (unrefined) to predict with")
    ap.add_argument("--sampling-seeds", type=int, default=4,
                    help="anchors: the Monte Carlo's seeds per design (a mean and its standard error)")
    ap.add_argument("--cells", nargs="*", help="cell names (default: all)")
    ap.add_argument("--seeds", type=int, default=64)
    ap.add_argument("--file", help="predict: the file under docs/results/spread/ to add to (default predictions.json; "
                    "report reads every predictions*.json), for predict processes run side by side")
    args = ap.parse_args()
    cells = [c for c in CELLS if not args.cells or cell_name(*c) in args.cells]
    if args.action == "measure":
        for c in cells:
            measure_cell(*c, args.seeds)
    elif args.action == "predict":
        path = OUT / (args.file or "predictions.json")
        stored = json.loads(path.read_text()) if path.exists() else {}
        for c in cells:
            stored[cell_name(*c)] = predict_cell(*c)
            print(cell_name(*c), stored[cell_name(*c)]["grad_var_log_sd"][0], stored[cell_name(*c)]["seconds_plain"],
                  stored[cell_name(*c)]["seconds_spread"], flush=True)
            OUT.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps(stored, indent=1))
    elif args.action == "correlations":
        correlations()
    elif args.action == "coverage":
        coverage()
    elif args.action == "states":
        states(args.seeds)
    elif args.action == "additivity":
        additivity()
    elif args.action == "ablation":
        ablation(cells)
    elif args.action == "interpolation":
        interpolation(cells)
    elif args.action == "anchors":
        anchors(cells, args.anchors, args.sampling_seeds)
    else:
        report()


if __name__ == "__main__":
    main()
