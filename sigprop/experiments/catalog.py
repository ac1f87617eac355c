"""The experiments: each tests a training claim of the papers at the largest scale this project can honestly reach
(Kedia et al. arXiv section and table numbers)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

from ..model.init_schemes import scheme_info
from .spec import Experiment, ModelSpec, Scale

__all__ = ["EXPERIMENTS", "get_experiment", "RESULTS_DIR", "stored_best_rates"]

#: The stored results of the experiments: one folder per experiment, its CPU-scale summary in ``NAME/results.json``
#: and another scale's in ``NAME/SCALE/results.json`` (:mod:`sigprop.experiments.summary`).
RESULTS_DIR = Path(__file__).resolve().parents[2] / "docs" / "results" / "experiments"


def stored_best_rates(experiment: str, scale: str = "cpu") -> dict[str, float]:
    """The best learning rate of each model of ``experiment`` at ``scale``, as its stored summary records it.

    Args:
        experiment: an experiment's name (a folder of :data:`RESULTS_DIR`).
        scale: the scale it ran at.

    Returns:
        Model name → best rate, for every model that has one (a model that stalled or diverged at every rate it
        tried has none and is left out).

    Raises:
        ValueError: the summary is missing (its path named) or is of another experiment or scale.

    Example:
        >>> stored_best_rates("depth")["8x64 xavier pre-LN"]  # doctest: +SKIP
        0.008
    """
    path = RESULTS_DIR / experiment / ("results.json" if scale == "cpu" else f"{scale}/results.json")
    if not path.is_file():
        raise ValueError(f"the stored results of experiment {experiment!r} at {scale} scale are missing: {path} "
                         f"(`sigprop experiment {experiment}` writes them; a source checkout has them)")
    summary = json.loads(path.read_text())
    if (summary.get("experiment"), summary.get("scale")) != (experiment, scale):
        raise ValueError(f"{path} holds experiment {summary.get('experiment')!r} at {summary.get('scale')!r} scale, "
                         f"not {experiment!r} at {scale!r}")
    return {row["model"]: float(row["best_lr"]) for row in summary["rows"] if row["best_lr"] is not None}


def _depth_models(shapes, heads, lrs, dslm_lrs, base_name=""):
    """Every shape under Xavier (rates ``lrs``) and DeepScaleLM (``dslm_lrs``), Pre-LN and Post-LN.

    DeepScaleLM's grid sits higher: its branches enter the residual stream scaled by β = √(2/N) and its embedding
    entries are ~25× Xavier's, so under Adam (updates of ~lr per entry whatever the entry's size) a DSLM model moves
    its function more slowly at one rate. Kedia et al. tune the rate per model and report that their deeper-narrower
    models needed higher ones (Sec. 4.1). DSLM at N ≤ 2 layers is left out: β² = 2/N ≥ 1 there gives λ = 0, blocks
    without a skip connection, a model the paper never trains (its shallowest DSLM has 12 layers)."""
    models = []
    for norm in ("pre", "post"):
        for init, grid in (("xavier", lrs), ("dslm", dslm_lrs)):
            for (n, d), h in zip(shapes, heads, strict=True):
                if scheme_info(init).bounds_depth and n <= 2:  # β² = 2/N ≥ 1: λ = 0, no skip
                    continue
                models.append(ModelSpec(f"{n}x{d} {init} {norm}-LN{base_name}",
                                        dict(n_layers=n, d_model=d, n_heads=h, norm_position=norm, init=init), grid))
    return tuple(models)


# ``data="python"``: the standard library and the installed packages (~22 M tokens at a vocabulary of 2048), so a run
# of 20 tokens per parameter (~8 M tokens) sees each training token at most once; the standard library alone
# (~2.6 M tokens) would be repeated three times, and repetition, not depth, would decide the comparison.
_CPU_TRAIN = dict(data="python", batch_size=32, warmup_steps=100, schedule="cosine", final_lr_fraction=0.1, clip=1.0,
                  weight_decay=0.01, eval_every=200, eval_batches=8, checkpoint_every=200, keep_checkpoints=1)

# ``--scale gpu``: twice the CPU widths (~1.6 M non-embedding parameters; heads of 64, 64 and 32 dimensions) and four
# times the batch, so that a run takes the CPU scale's ~1,900 steps to its 20 tokens per parameter (~31 M tokens):
# the same optimisation, 16 times the tokens. Runs this small leave a GPU idle between kernel launches, so several
# share one (``--workers``).
_GPU_TRAIN = {**_CPU_TRAIN, "batch_size": 128}
_GPU_NOTE = ("one GPU shared by several runs at a time (`--workers`); ~1.6 M non-embedding parameters per model (twice "
             "the CPU widths), batches of 128 × 128 tokens, 20 tokens per parameter (~1,900 steps, as at the CPU "
             "scale); `data=python` is the machine's own Python sources (~22 M tokens at a vocabulary of 2048 here), "
             "seen about 1.5 times (H200: 21.2 M training tokens).")

# ``--scale paper``: Kedia et al. App. N, Table 25 (BERT pre-training): batches of 256 sequences of 256 tokens, 100 k
# steps (~40 tokens per non-embedding parameter of their ~160 M-parameter models), warmup over the first 1%, linear
# decay, dropout 0.1, clipping 1.0, the rate grid {1, 3, 5, 7, 10}·10⁻⁴, BERT's lower-cased WordPiece vocabulary
# (30,522). Their minimum rate, 10⁻⁵, is 10% of the grid's top here. Documented, not run here: the corpus is the
# user's (``--train-set data=...``; Wikipedia and books in the paper).
_PAPER_LRS = (1e-4, 3e-4, 5e-4, 7e-4, 1e-3)
_PAPER_TRAIN = {**{k: v for k, v in _CPU_TRAIN.items() if k != "data"}, "batch_size": 256, "warmup_steps": 1000,
                "schedule": "linear", "eval_every": 2000, "checkpoint_every": 2000}
_PAPER_BASE = dict(arch="encoder", vocab_size=30522, seq_len=256, max_len=256, dropout=0.1)
_PAPER_NOTE = ("Kedia et al.'s BERT pre-training (App. N, Table 25): batches of 256 × 256 tokens, ~40 tokens per "
               "non-embedding parameter, warmup 1%, linear decay, dropout 0.1, rates {1, 3, 5, 7, 10}·10⁻⁴; "
               "documented, not run here: pass a corpus with `--train-set data=...`.")

DEPTH = Experiment(
    name="depth",
    question="At a constant number of non-embedding parameters (N·d²), does a deep-thin DeepScaleLM model reach a "
             "lower validation loss than the shallow-wide baseline at the same tokens, and do the Xavier baselines "
             "train at depth?",
    reference="Kedia et al. Sec. 4.1–4.2, Tables 4 and 8: shapes at equal N·d² (causal LM here; masked LM in "
              "`depth-mlm`); Table 5 compares DSLM with the baseline at each Pre-LN shape",
    scales={
        "cpu": Scale(
            models=_depth_models(((2, 128), (8, 64), (32, 32)), (4, 2, 2), (1e-3, 2e-3, 4e-3), (2e-3, 4e-3, 8e-3)),
            base_model=dict(arch="decoder", vocab_size=2048, seq_len=128, max_len=128, dropout=0.0),
            train=_CPU_TRAIN, tokens_per_parameter=20.0, seeds=2, grid_extensions=3,
            note="2 CPU cores, one single-thread run per core; ~0.4 M non-embedding parameters per model, 20 tokens "
                 "per parameter (the paper: ~40); attention heads of 32, 32 and 16 dimensions. A model whose best "
                 "rate sits at an edge of its grid tries up to three more rates past that edge."),
        "gpu": Scale(
            models=_depth_models(((2, 256), (8, 128), (32, 64)), (4, 2, 2), (1e-3, 2e-3, 4e-3), (2e-3, 4e-3, 8e-3)),
            base_model=dict(arch="decoder", vocab_size=2048, seq_len=128, max_len=128, dropout=0.0),
            train=_GPU_TRAIN, tokens_per_parameter=20.0, seeds=2, grid_extensions=1,
            note=_GPU_NOTE),
        "paper": Scale(
            models=_depth_models(((12, 1024), (48, 512), (192, 256)), (16, 8, 4), _PAPER_LRS, _PAPER_LRS),
            base_model=dict(_PAPER_BASE, arch="decoder"), train=_PAPER_TRAIN, tokens_per_parameter=40.0, seeds=1,
            note="the paper's shapes (~150 M non-embedding parameters); " + _PAPER_NOTE),
    },
    evaluation="init-theory",
)

def _centred_on(models: tuple[ModelSpec, ...], best: dict[str, float]) -> tuple[ModelSpec, ...]:
    """``models`` with each named in ``best`` tuned over half, once and twice its rate there; the others unchanged."""
    return tuple(replace(m, lrs=(best[m.name] / 2, best[m.name], best[m.name] * 2)) if m.name in best else m
                 for m in models)


def _masked(scale: Scale) -> Scale:
    """``scale`` with every model an encoder trained as a masked LM."""
    return replace(scale, base_model={**scale.base_model, "arch": "encoder"})


def _depth_mlm_cpu() -> Scale:
    """``depth``'s CPU scale as masked LMs, each model's grid centred on the best rate of its stored ``depth``
    results (a model that stalled at every rate there keeps its grid)."""
    return replace(
        _masked(DEPTH.scale("cpu")), models=_centred_on(DEPTH.scale("cpu").models, stored_best_rates("depth")),
        note=DEPTH.scale("cpu").note + " Each model's grid is centred on the rate at which `depth` (causal LM) "
             "trained it best: half, once and twice that rate (32 × 32 Xavier Post-LN, which stalled at every "
             "rate there, keeps depth's grid).")


DEPTH_MLM = Experiment(
    name="depth-mlm",
    question=DEPTH.question.replace("validation loss", "masked-LM validation loss"),
    reference="Kedia et al. Sec. 4.1 (BERT, masked LM): Table 4, shapes at equal N·d² (Post-LN); Table 5, DSLM "
              "against the baseline at each Pre-LN shape",
    scales={
        "cpu": _depth_mlm_cpu,
        "gpu": _masked(DEPTH.scale("gpu")),
        "paper": _masked(DEPTH.scale("paper")),
    },
    evaluation="init-theory",
)

# `depth`'s headline pair at ~0.4 M non-embedding parameters as the shape ladder's rung d = 128 retrained it (pinned
# corpus, dropout 0.1), and the non-scale differences from the paper's training that could flip the sign of its gap
# (sigprop.experiments.budget): each a row of two models. Built when asked for: the ladder's constants come first.
def _depth_budget_cpu() -> Scale:
    from .budget import budget_models
    from .ladder import LR_STEP

    return Scale(
        models=budget_models(_LADDER_BASE, _LADDER_TRAIN), base_model=_LADDER_BASE, train=_LADDER_TRAIN,
        tokens_per_parameter=None, seeds=3, tuning_seeds=2, grid_extensions=4, lr_step=LR_STEP, lr_anchor=1e-3,
        note="the shape ladder's training at rung d = 128 (causal LM on the pinned corpus `pinned:python-v1`, 2,000 "
             "steps of 31 × 128 tokens, ~20 tokens per parameter, 100 warmup steps, cosine to 10%, dropout 0.1, 64 "
             "validation batches) for the pair, whose runs are the ladder's; each row's one change; two seeds at "
             "each of three rates √2 apart around the model's best rate at the ladder's rung, the best on their "
             "mean, a grid extended past an edge (four times at most), then a third seed at the best.")


DEPTH_BUDGET = Experiment(
    name="depth-budget",
    question="At ~0.4 M non-embedding parameters, does any of the non-scale differences between the ladder's "
             "training and the paper's (~4× the steps on as many tokens, 40 tokens per parameter instead of 20, a "
             "1% warmup with linear decay) flip the sign of the gap between deep-thin DSLM (8 × 64) and shallow-wide "
             "Xavier (2 × 128)? Pre-registered: a row flips the sign where its paired 95% interval lies below 0 "
             "while the pair's does not; otherwise it narrows (widens) the gap where the 95% interval of its change "
             "Δ(row) − Δ(pair), paired by seed, lies below (above) 0.",
    reference="Kedia et al. Sec. 4.1, App. N Table 25 (~40 tokens per parameter, 1% warmup, linear decay); `depth`'s "
              "headline pair, as the shape ladder's rung d = 128",
    scales={"cpu": _depth_budget_cpu},
    evaluation="depth-budget",
)


FP8 = Experiment(
    name="fp8",
    question="Do the trained DeepScaleLM models lose less validation loss than the Xavier baselines when cast "
             "directly (no scaling factor) to FP8, E4M3 and E5M2?",
    reference="Kedia et al. Sec. 4.6, Table 12 (FP8 direct casting of the trained models)",
    scales=DEPTH.scales, runs_from="depth", evaluation="fp8",
)


def _residual(beta2: float) -> dict:
    """Fixed residual scales λ·x + β·f(x) with β² = ``beta2`` and λ² = 1 − β² in every block (Sec. 3.5)."""
    return dict(lam=(1.0 - beta2) ** 0.5, beta=beta2**0.5)


_DEEP = dict(n_layers=32, d_model=32, n_heads=2)  # the deepest ~0.4 M-parameter shape with two heads of 16
_PAPER_192 = dict(n_layers=192, d_model=256, n_heads=4)  # Kedia et al.'s deepest BERT (Tables 11, 14)
_PAPER_96 = dict(n_layers=96, d_model=512, n_heads=8)  # Tables 4, 11, 13, 14
_CPU_BASE = dict(arch="decoder", vocab_size=2048, seq_len=128, max_len=128, dropout=0.0)
_CPU_NOTE = ("2 CPU cores, one single-thread run per core; 32 × 32 (two heads of 16) is the deepest shape of ~0.4 M "
             "non-embedding parameters; 20 tokens per parameter.")

_DEEP_GPU = dict(n_layers=32, d_model=64, n_heads=2)  # the deepest shape of `depth` at --scale gpu


def _divergence_models(deep: dict, lrs: tuple[float, ...] = (1e-3, 4e-3)) -> tuple[ModelSpec, ...]:
    """The Post-LN baselines at the deepest shape ``deep`` (Xavier; without warmup; with β² = 0.5) and DSLM with and
    without warmup, each over ``lrs``: 1e-3 and 4e-3 bracket the baselines' best at 32 × 32 in `depth`."""
    shape = f"{deep['n_layers']}x{deep['d_model']}"
    post = dict(deep, norm_position="post")
    return (ModelSpec(f"{shape} xavier post-LN", dict(post, init="xavier"), lrs),
            ModelSpec(f"{shape} xavier post-LN, no warmup", dict(post, init="xavier"), lrs, dict(warmup_steps=0)),
            ModelSpec(f"{shape} xavier post-LN, beta^2=0.5", dict(post, init="xavier", **_residual(0.5)), lrs),
            ModelSpec(f"{shape} dslm post-LN", dict(post, init="dslm"), lrs),
            ModelSpec(f"{shape} dslm post-LN, no warmup", dict(post, init="dslm"), lrs, dict(warmup_steps=0)))


def _dropout_variants(deep: dict, lrs: tuple[float, ...] = (1e-3, 4e-3)) -> tuple[ModelSpec, ...]:
    """Post-LN Xavier and DSLM at ``deep`` with dropout 0.1, the paper's (App. N, Table 25), over ``lrs``: the other
    models train without dropout, and Kedia et al. (Sec. 3.4) show dropout keeping ρ < 1, the rank collapse that the
    dropout-free Xavier model is predicted to reach."""
    shape = f"{deep['n_layers']}x{deep['d_model']}"
    post = dict(deep, norm_position="post", dropout=0.1)
    return (ModelSpec(f"{shape} xavier post-LN, dropout 0.1", dict(post, init="xavier"), lrs),
            ModelSpec(f"{shape} dslm post-LN, dropout 0.1", dict(post, init="dslm"), lrs))


DIVERGENCE = Experiment(
    name="divergence",
    question="At the deepest shape, which Post-LN baselines fail (diverge, or stall at the unigram loss within the "
             "run's steps) where DeepScaleLM trains: Xavier with and without warmup, with β² = 0.5, and with "
             "dropout 0.1 (the paper's; the other models train without dropout)?",
    reference="Kedia et al. Sec. 4, Table 4 (Post-LN baselines diverging at 96 × 512 and 768 × 128) and Table 13",
    scales={"cpu": Scale(models=_divergence_models(_DEEP) + _dropout_variants(_DEEP), base_model=_CPU_BASE,
                         train=_CPU_TRAIN, tokens_per_parameter=20.0, seeds=2,
                         note=_CPU_NOTE + " Dropout 0, but 0.1 in the two 'dropout 0.1' models (the paper's)."),
            "gpu": Scale(models=_divergence_models(_DEEP_GPU), base_model=_CPU_BASE, train=_GPU_TRAIN,
                         tokens_per_parameter=20.0, seeds=2, note=_GPU_NOTE),
            "paper": Scale(models=_divergence_models(_PAPER_96, _PAPER_LRS), base_model=_PAPER_BASE,
                           train=_PAPER_TRAIN, tokens_per_parameter=40.0, seeds=1,
                           note="Table 4's and Table 13's 96 × 512 Post-LN BERT; " + _PAPER_NOTE)},
    evaluation="init-theory",
)

# The rates at 32 × 32, from `depth` at that shape: Pre-LN models train best at 1.6e-2 (Xavier) and 3.2e-2 (DSLM),
# 2e-3 leaving them 0.4–1.0 nats short; Post-LN DSLM at 2e-3, stalling from 4e-3. A model's grid is centred on its
# normalisation's (the runner tries every model's middle rate first), and a best rate at an edge tries one more.
_PRE_LN_LRS = (8e-3, 1.6e-2, 3.2e-2)
_POST_LN_LRS = (1e-3, 2e-3, 4e-3)
# At --scale gpu (32 × 64) the same grids: `depth` found Pre-LN DSLM best at 8e-3 there, the top of its lower grid.


def _row_maker(show_shape: bool):
    """A function naming a model ``name`` at ``shape`` (with the shape in the name where an experiment's rows sit at
    several shapes) and building its :class:`ModelSpec`."""

    def row(name: str, shape: dict, fields: dict, lrs: tuple[float, ...]) -> ModelSpec:
        label = f"{name}, {shape['n_layers']}x{shape['d_model']}" if show_shape else name
        return ModelSpec(label, dict(shape, **fields), lrs)

    return row


def _ablation_models(post: dict, pre: dict, sigma: dict, post_lrs, pre_lrs) -> tuple[ModelSpec, ...]:
    """Table 13's rows in Post-LN at shape ``post`` (DSLM's initialisation without the residual scaling, with
    β² = 0.5, with β² = 2/N fixed and learnable) and Table 14's in Pre-LN with the scaling λ² + β² = 1, β² = 2/N, at
    ``pre`` (Xavier, DSLM, DSLM-simple) and ``sigma`` (σ = 0.02, with DSLM beside it where that is another shape)."""
    row = _row_maker(not post == pre == sigma)

    def scaling(shape):
        return _residual(2 / shape["n_layers"])

    models = [row("post-LN dslm-init, no scaling", post, dict(norm_position="post", init="dslm", lam=1.0, beta=1.0),
                  post_lrs),
              row("post-LN dslm-init, beta^2=0.5", post, dict(norm_position="post", init="dslm", beta_k=0.5,
                                                              beta_alpha=0.0), post_lrs),
              row("post-LN dslm, beta^2=2/N fixed", post, dict(norm_position="post", init="dslm"), post_lrs),
              row("post-LN dslm, beta^2=2/N learnable", post, dict(norm_position="post", init="dslm",
                                                                   learnable_beta=True), post_lrs),
              row("pre-LN xavier-init + scaling", pre, dict(norm_position="pre", init="xavier", **scaling(pre)),
                  pre_lrs),
              row("pre-LN sigma=0.02 + scaling", sigma, dict(norm_position="pre", init="bert", **scaling(sigma)),
                  pre_lrs),
              row("pre-LN dslm", pre, dict(norm_position="pre", init="dslm"), pre_lrs),
              row("pre-LN dslm-simple", pre, dict(norm_position="pre", init="dslm_simple"), pre_lrs)]
    if sigma != pre:
        models.append(row("pre-LN dslm", sigma, dict(norm_position="pre", init="dslm"), pre_lrs))
    return tuple(models)


_GPU_DEEP_NOTE = _GPU_NOTE + " 32 × 64 (two heads of 32) is the deepest shape of `depth` at this scale."

ABLATIONS = Experiment(
    name="ablations",
    question="Which parts of DeepScaleLM matter: the residual scaling (β² = 2/N against 0.5 and none; fixed "
             "against learnable β) in Post-LN, and the initialisation (Xavier, σ = 0.02, DSLM, DSLM-simple) in "
             "Pre-LN with the scaling?",
    reference="Kedia et al. Sec. 4.5, Tables 13 (Post-LN, 96 × 512) and 14 (Pre-LN, 192 × 256 and 96 × 512)",
    scales={"cpu": Scale(models=_ablation_models(_DEEP, _DEEP, _DEEP, _POST_LN_LRS, _PRE_LN_LRS), base_model=_CPU_BASE,
                         train=_CPU_TRAIN, tokens_per_parameter=20.0, seeds=2, grid_extensions=1, note=_CPU_NOTE),
            "gpu": Scale(models=_ablation_models(_DEEP_GPU, _DEEP_GPU, _DEEP_GPU, _POST_LN_LRS, _PRE_LN_LRS),
                         base_model=_CPU_BASE, train=_GPU_TRAIN, tokens_per_parameter=20.0, seeds=2, grid_extensions=1,
                         note=_GPU_DEEP_NOTE),
            "paper": Scale(models=_ablation_models(_PAPER_96, _PAPER_192, _PAPER_96, _PAPER_LRS, _PAPER_LRS),
                           base_model=_PAPER_BASE, train=_PAPER_TRAIN, tokens_per_parameter=40.0, seeds=1,
                           note="the paper's shapes: Table 13 at 96 × 512 (Post-LN), Table 14 at 192 × 256 and "
                                "σ = 0.02 against DSLM at 96 × 512 (Pre-LN); " + _PAPER_NOTE)},
    evaluation="init-theory",
)


def _prior_methods_models(shapes: tuple[dict, ...], post_lrs, pre_lrs) -> tuple[ModelSpec, ...]:
    """Table 11's methods at each of ``shapes``, each in the normalisation it was designed for (DeepNet Post-LN,
    ReZero none, the rest Pre-LN) and DeepScaleLM in both; Post-LN models over ``post_lrs``, the rest over
    ``pre_lrs``."""
    row = _row_maker(len(shapes) > 1)
    models = []
    for shape in shapes:
        pre = dict(norm_position="pre")
        models += [row("dslm (pre-LN)", shape, dict(pre, init="dslm"), pre_lrs),
                   row("dslm (post-LN)", shape, dict(norm_position="post", init="dslm"), post_lrs),
                   row("dsinit (pre-LN)", shape, dict(pre, init="dsinit"), pre_lrs),
                   row("deepnet (post-LN)", shape, dict(norm_position="post", init="deepnorm"), post_lrs),
                   row("layerscale (pre-LN)", shape, dict(pre, init="layerscale"), pre_lrs),
                   row("skipinit (pre-LN)", shape, dict(pre, init="skipinit"), pre_lrs),
                   row("rezero (no norm)", shape, dict(norm_position="none", init="rezero"), pre_lrs),
                   row("value-skipinit (pre-LN)", shape, dict(pre, init="xavier", attention="value_skipinit"),
                       pre_lrs),
                   row("bamboo (pre-LN, sigma=0.02)", shape, dict(pre, init="bert"), pre_lrs),
                   row("mup-style (pre-LN)", shape, dict(pre, init="mup"), pre_lrs),
                   row("noci2022 (pre-LN)", shape, dict(pre, init="noci2022"), pre_lrs)]
    return tuple(models)


_PRIOR_NOTE = (" Each method in the normalisation it was designed for (DeepNet Post-LN, ReZero none, the rest "
               "Pre-LN); DSLM in both.")

PRIOR_METHODS = Experiment(
    name="prior-methods",
    question="At the deepest shape, how do the prior methods for deep Transformers train against DeepScaleLM: "
             "DSInit, DeepNet, LayerScale, SkipInit, ReZero, Value-SkipInit, Bamboo (a vanilla Pre-LN model), "
             "µP-style and Noci et al. 2022's initialisation?",
    reference="Kedia et al. Sec. 4.5, Table 11 (192 × 256 and 96 × 512; ADMIN, which needs a profiling pass, is not "
              "built here)",
    scales={"cpu": Scale(models=_prior_methods_models((_DEEP,), _POST_LN_LRS, _PRE_LN_LRS), base_model=_CPU_BASE,
                         train=_CPU_TRAIN, tokens_per_parameter=20.0, seeds=2, grid_extensions=1,
                         note=_CPU_NOTE + _PRIOR_NOTE),
            "gpu": Scale(models=_prior_methods_models((_DEEP_GPU,), _POST_LN_LRS, _PRE_LN_LRS), base_model=_CPU_BASE,
                         train=_GPU_TRAIN, tokens_per_parameter=20.0, seeds=2, grid_extensions=1,
                         note=_GPU_DEEP_NOTE + _PRIOR_NOTE),
            "paper": Scale(models=_prior_methods_models((_PAPER_192, _PAPER_96), _PAPER_LRS, _PAPER_LRS),
                           base_model=_PAPER_BASE, train=_PAPER_TRAIN, tokens_per_parameter=40.0, seeds=1,
                           note="Table 11's shapes, 192 × 256 and 96 × 512; " + _PAPER_NOTE + _PRIOR_NOTE)},
    evaluation="init-theory",
)

def _derf_models() -> tuple[ModelSpec, ...]:
    """Alekseev Sec. 4 on digits: depth × {Pre-LN, Derf α = 0.5, 1, 2} (Fig. 4a); the weight-std scale at 16 blocks
    (Fig. 4b: σ_OV and σ_21 scale with the std squared); warmup at 16 blocks for the largest α (Fig. 5a); every model
    over the learning-rate grid (Fig. 5b reads off the grid)."""
    lrs = (3e-4, 1e-3, 3e-3)
    kinds = (("pre-LN", dict(norm="layernorm")),) + tuple(
        (f"derf a={a:g}", dict(norm="derf", norm_alpha=a)) for a in (0.5, 1.0, 2.0))
    models = [ModelSpec(f"{name} N={n}", dict(kind, n_layers=n), lrs) for n in (4, 16, 64) for name, kind in kinds]
    for scale in (0.5, 2.0):
        for name, kind in (kinds[0], kinds[2]):
            models.append(ModelSpec(f"{name} N=16 std x{scale:g}",
                                    dict(kind, n_layers=16, sigma_ov=0.31 * scale**2, sigma_21=0.61 * scale**2), lrs))
    for warmup in (0, 240):
        models.append(ModelSpec(f"derf a=2 N=16 warmup {warmup}", dict(kinds[3][1], n_layers=16), lrs,
                                dict(warmup_steps=warmup)))
    return tuple(models)


DERF = Experiment(
    name="derf",
    question="Does a Derf ViT stop training beyond a critical depth that a smaller α pushes deeper, while Pre-LN "
             "trains at every depth; how do the weight scale, the learning rate and the warmup move it; and does the "
             "APJN theory's depth scale λ⁻¹ predict the boundary?",
    reference="Alekseev 2026 Sec. 4, Figs. 4–5 (ViT on CIFAR-100; digits here), theory Results 3.1–3.5",
    scales={"cpu": Scale(
        models=_derf_models(),
        base_model=dict(arch="encoder", input="patches", image_size=16, patch_size=4, channels=1, n_classes=10,
                        seq_len=16, d_model=64, n_heads=2, dropout=0.0, norm_position="pre", init="alekseev",
                        sigma_ov=0.31, sigma_21=0.61),
        train=dict(steps=600, batch_size=64, warmup_steps=80, schedule="constant", clip=None, weight_decay=0.05,
                   adam_beta2=0.999, eval_every=100, eval_batches=4, checkpoint_every=300, keep_checkpoints=1),
        tokens_per_parameter=None, seeds=2,
        note="scikit-learn's digits (16 × 16, 16 patches of 4 × 4), d = 64, two heads, the paper's σ_OV = 0.31 and "
             "σ_21 = 0.61, AdamW (β₂ = 0.999, weight decay 0.05), linear warmup then a constant rate, no clipping, "
             "600 steps of 64 images (~22 epochs; the paper: 20 on CIFAR-100).")},
    evaluation="apjn",
)

_SHAPED = dict(attention="shaped", activation="shaped_relu", init="shaped", norm_position="none", shaped_gamma=0.2)
_SHAPED_LRS = (1e-3, 3e-3, 1e-2)


def _shaped_models(lrs: tuple[float, ...], anneal_steps: int) -> tuple[ModelSpec, ...]:
    """The Pre-LN baseline and shaped attention fixed, learned and recovered (annealed to standard attention over
    ``anneal_steps``), each over ``lrs`` (Noci et al. App. D)."""
    return (ModelSpec("pre-LN", dict(norm_position="pre", init="xavier"), lrs),
            ModelSpec("shaped, fixed", dict(_SHAPED), lrs),
            ModelSpec("shaped, learn", dict(_SHAPED, shaped_mode="learn"), lrs),
            ModelSpec("shaped, recover", dict(_SHAPED, shaped_mode="recover", shaped_anneal_steps=anneal_steps), lrs))


_SHAPED_CPU = Scale(
    models=_shaped_models(_SHAPED_LRS, anneal_steps=1000),
    base_model=dict(arch="encoder", n_layers=16, d_model=64, n_heads=2, vocab_size=2048, seq_len=128,
                    max_len=128, dropout=0.0),
    train={**_CPU_TRAIN, "steps": 1500, "track_every": 250, "checkpoint_every": 250},
    tokens_per_parameter=None, seeds=2,
    note="16 layers of d = 64 (two heads of 32), masked LM (15%) on `data=python`, 1,500 steps of 32 × 128 tokens "
         "(6.1 M tokens, ~8 per non-embedding parameter); shaped models unnormalised with γ = 0.2 residual "
         "branches (App. D: 0.05–0.2), 'recover' annealed to standard attention over the first 1,000 steps; "
         "every layer's attention entropy tracked every 250 steps (track.png in each run's folder).")
_SHAPED_GPU = replace(
    _SHAPED_CPU, base_model={**_SHAPED_CPU.base_model, "d_model": 128}, train={**_SHAPED_CPU.train, "batch_size": 128},
    note="16 layers of d = 128 (two heads of 64: twice the CPU width), batches of 128 × 128 tokens, the CPU scale's "
         "1,500 steps (24.6 M tokens, ~8 per non-embedding parameter, `data=python` seen about once); otherwise as "
         "at the CPU scale. Runs this small share one GPU (`--workers`).")

SHAPED = Experiment(
    name="shaped",
    question="Does shaped attention keep a masked-LM Transformer trainable where the Pre-LN baseline's attention "
             "entropy collapses at a high learning rate, and do the 'recover' (annealed back to standard attention) "
             "and 'learn' schedules train as well as the fixed one?",
    reference="Noci et al. 2023 App. D (BERT masked LM: shaped attention, fixed / learn / recover, against Pre-LN), "
              "Sec. 4 (entropy collapse)",
    scales={
        "cpu": _SHAPED_CPU,
        "gpu": _SHAPED_GPU,
        "paper": Scale(
            models=_shaped_models((1e-4, 5e-4, 1e-3, 5e-3), anneal_steps=4000),
            base_model=dict(arch="encoder", n_layers=18, d_model=768, n_heads=8, vocab_size=32000, seq_len=128,
                            max_len=128, dropout=0.0),
            train=dict(batch_size=32, steps=100_000, warmup_steps=4000, schedule="cosine", weight_decay=0.0,
                       adam_beta2=0.999, clip=1.0, eval_every=2000, eval_batches=8, track_every=2000,
                       checkpoint_every=2000, keep_checkpoints=1),
            tokens_per_parameter=None, seeds=4,
            note="Noci et al. App. D.1: 18 layers of d = 768 (8 heads, FFN 3,072), a vocabulary of 32,000, 128 tokens "
                 "a sequence, batches of 32, Adam (0.9, 0.999) without weight decay, 4,000 warmup steps ('recover' "
                 "annealed over the same 4,000), 100 k steps, rates {1, 5, 10, 50}·10⁻⁴, 4 seeds. The paper states "
                 "no schedule after the warmup (cosine here), no dropout and no clipping (none and 1.0 here). "
                 "Documented, not run here: pass a corpus with `--train-set data=...` (Wikipedia and books in the "
                 "paper).")},
    evaluation="entropy",
)

SMOKE = Experiment(
    name="smoke",
    question="Does the experiment runner work on this machine (a minute: two tiny decoders, two rates, two seeds)?",
    reference="none: a check of the runner",
    scales={"cpu": Scale(
        models=(ModelSpec("2x32", dict(n_layers=2, d_model=32, n_heads=2), (3e-3, 1e-2)),
                ModelSpec("8x16", dict(n_layers=8, d_model=16, n_heads=1), (3e-3, 1e-2))),
        base_model=dict(arch="decoder", vocab_size=300, seq_len=16, max_len=16, dropout=0.0, init="dslm"),
        train=dict(batch_size=8, warmup_steps=4, eval_every=10, eval_batches=2, checkpoint_every=10),
        tokens_per_parameter=8.0, seeds=2, note="tiny models, seconds a run.")},
)

EXPERIMENTS = {e.name: e for e in (DEPTH, DEPTH_BUDGET, DEPTH_MLM, DIVERGENCE, PRIOR_METHODS, ABLATIONS, FP8, DERF,
                                   SHAPED, SMOKE)}


def get_experiment(name: str) -> Experiment:
    """The experiment called ``name``; ``ValueError`` listing them otherwise."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; experiments: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]


# The shape ladder: deep-thin against shallow-wide at equal N·d² over widths 64 … 512 (sigprop.experiments.ladder).
_LADDER_BASE = dict(arch="decoder", vocab_size=2048, seq_len=128, max_len=128, dropout=0.1)
_LADDER_TRAIN = dict(data="pinned:python-v1", steps=2000, warmup_steps=100, schedule="cosine", final_lr_fraction=0.1,
                     clip=1.0, weight_decay=0.01, eval_every=250, eval_batches=64, checkpoint_every=250,
                     keep_checkpoints=1)
_LADDER_QUESTION = (
    "Over a ladder of sizes at equal N·d² (d = 64 … 512, one pinned corpus and tokenizer, 20 tokens per "
    "non-embedding parameter), on which side of a crossover is deep-thin DeepScaleLM (8 × d/2) against shallow-wide "
    "Xavier (2 × d), with 8 × d/2 Xavier as the control and 32 × d/4 DSLM from d = 256? Pre-registered: deep-thin "
    "wins at a rung only if the paired 95% interval of Δ = loss(deep-thin) − loss(shallow-wide) lies below 0; the "
    "paper's claim is 'reproduced at ≥ P' if deep-thin wins at P and every larger rung run, 'not reproduced up to "
    "P' if it wins at no rung (P the largest run), otherwise 'mixed'; the least-squares trend of Δ against log₁₀ P "
    "(the seeds' variance pooled over the rungs) 'points to a crossover near P*' (Fieller 95% interval) when its "
    "slope is negative and the interval bounded.")


def _ladder_scale(rungs, base: dict, train: dict, note: str, grid_extensions: int = 6, **ladder) -> Scale:
    from .ladder import LR_STEP, ladder_models

    models = tuple(m.spec for m in ladder_models(rungs, base, train["steps"], **ladder))
    return Scale(models=models, base_model=base, train=train, tokens_per_parameter=None, seeds=3, tuning_seeds=2,
                 grid_extensions=grid_extensions, lr_step=LR_STEP, lr_anchor=1e-3, note=note)


SHAPE_LADDER = Experiment(
    name="shape-ladder",
    question=_LADDER_QUESTION,
    reference="Kedia et al. Sec. 4.1–4.2, Tables 4 and 8 (deep-thin wins at 160–185 M parameters); `depth` at one "
              "size",
    scales={
        "cpu": _ladder_scale(
            (64, 96, 128, 192, 256, 384, 512), _LADDER_BASE, _LADDER_TRAIN,
            "every rung, whatever the device (`--rungs` picks them: 64, 96, 128 on CPU cores, the rest on a GPU); "
            "causal LM on the pinned corpus `pinned:python-v1`, 2,000 steps of 128-token sequences at every rung, "
            "the batch grown with the rung to 20 tokens per non-embedding parameter; dropout 0.1; rates on the √2 "
            "lattice 10⁻³·√2^k, two seeds at each, a grid extended past an edge until the best (mean of the two) is "
            "interior, then a third seed at it; 64 validation batches."),
        "smoke": _ladder_scale(
            (16,), dict(_LADDER_BASE, seq_len=16, max_len=16), dict(_LADDER_TRAIN, steps=40, warmup_steps=4,
                                                                    eval_every=20, eval_batches=2, checkpoint_every=20),
            "a check of the ladder's machinery: one rung of d = 16 with all four roles (heads of 8), 40 steps, one "
            "rate per model, on the pinned corpus; seconds a run.",
            grid_extensions=0, tokens_per_parameter=2.0, grid_points=1, head_dim=8, smallest_head=8, deeper_from=16),
    },
    evaluation="shape-ladder",
)
EXPERIMENTS[SHAPE_LADDER.name] = SHAPE_LADDER


# The doctor's fixes trained (sigprop.analysis.fix_cases): each flagged model beside its twin with the fix applied.
_FIX_TRAIN = dict(data="pinned:python-v1", steps=600, batch_size=16, warmup_steps=60, schedule="cosine",
                  final_lr_fraction=0.1, clip=1.0, weight_decay=0.01, eval_every=150, eval_batches=64,
                  checkpoint_every=150, keep_checkpoints=1)


def _fix_models() -> tuple[ModelSpec, ...]:
    """Each of :data:`~sigprop.analysis.fix_cases.FIX_CASES` as two models, "CASE: flagged" and "CASE: fixed"."""
    from ..analysis.fix_cases import FIX_CASES

    return tuple(model for case in FIX_CASES for model in (
        ModelSpec(f"{case.name}: flagged", case.flagged, case.flagged_lrs),
        ModelSpec(f"{case.name}: fixed", case.fixed, case.fixed_lrs)))


def _fix_base_model() -> dict:
    """The fix cases' shared fields (:data:`~sigprop.analysis.fix_cases.BASE_MODEL`)."""
    from ..analysis.fix_cases import BASE_MODEL

    return dict(BASE_MODEL)


DOCTOR_FIXES = Experiment(
    name="doctor-fixes",
    question="For each kind of model the doctor flags and fixes (Post-LN Xavier at depth -> DeepScaleLM, Pre-LN "
             "Xavier -> DeepScaleLM, a Llama-style N(0, 0.02²) model -> init=auto, Q/K at 2× -> 1×, a saturated Derf "
             "model -> the smaller α, rank collapse -> dropout 0.1), does the fixed twin reach a lower validation "
             "loss than the flagged model at the same budget, each at its best rate?",
    reference="Kedia et al. Sec. 3.3 (Q/K), Sec. 3.5 and Tables 4, 13 (DeepScaleLM against Post-LN and Pre-LN "
              "baselines), App. F (dropout against rank collapse); the doctor's recommendations "
              "(sigprop.analysis.doctor.recommend)",
    scales={"cpu": Scale(
        models=_fix_models(), base_model=_fix_base_model(),
        train=_FIX_TRAIN, tokens_per_parameter=None, seeds=2, tuning_seeds=2, grid_extensions=2,
        lr_step=math.sqrt(2.0), lr_anchor=1e-3, lower_when_none_trains=True,
        note="causal LM on the pinned corpus `pinned:python-v1`, 600 steps of 16 × 64 tokens for every model (the "
             "same budget for a flagged model and its twin), dropout 0.1; rates on the √2 lattice 10⁻³·√2^k, two "
             "seeds at each, the grid extended past an edge (twice at most) until the best (mean of the two) is "
             "interior; a model that trains at no rate of its grid (both seeds) tries up to two rates below it, and "
             "one that trains at none of those either is settled as trained at no rate tried.")},
)
EXPERIMENTS[DOCTOR_FIXES.name] = DOCTOR_FIXES
