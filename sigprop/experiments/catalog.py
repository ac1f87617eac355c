"""The experiments: each reproduces a training claim of the papers at the largest scale this project can honestly
reach (Kedia et al. arXiv section and table numbers)."""

from __future__ import annotations

from dataclasses import replace

from .spec import Experiment, ModelSpec, Scale

__all__ = ["EXPERIMENTS", "get_experiment"]


def _depth_models(shapes, heads, lrs, dslm_lrs, base_name=""):
    """Every shape under Xavier (rates ``lrs``) and DeepScaleLM (``dslm_lrs``), Pre-LN and Post-LN.

    DeepScaleLM's grid sits higher: its branches enter the residual stream scaled by β = √(2/N) and its embedding
    entries are ~25× Xavier's, so under Adam (updates of ~lr per entry whatever the entry's size) a DSLM model moves
    its function more slowly at one rate. Kedia et al. tune the rate per model and report that deeper models needed
    higher ones (Sec. 4.2). DSLM at N ≤ 2 layers is left out: β² = 2/N ≥ 1 there gives λ = 0, blocks without a skip
    connection, a model the paper never trains (its shallowest DSLM has 12 layers)."""
    models = []
    for norm in ("pre", "post"):
        for init, grid in (("xavier", lrs), ("dslm", dslm_lrs)):
            for (n, d), h in zip(shapes, heads, strict=True):
                if init == "dslm" and n <= 2:
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

DEPTH = Experiment(
    name="depth",
    question="At a constant number of non-embedding parameters (N·d²), does a deep-thin DeepScaleLM model reach a "
             "lower validation loss than the shallow-wide baseline at the same tokens, and do the Xavier baselines "
             "train at depth?",
    reference="Kedia et al. Sec. 4.2, Tables 4, 5 and 8 (causal LM here; masked LM in `depth-mlm`)",
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
            models=_depth_models(((12, 1024), (48, 512), (192, 256)), (16, 8, 4), (1e-4, 3e-4, 5e-4, 7e-4, 1e-3),
                                 (1e-4, 3e-4, 5e-4, 7e-4, 1e-3)),
            base_model=dict(arch="decoder", vocab_size=32768, seq_len=512, max_len=512, dropout=0.1),
            train={**_CPU_TRAIN, "batch_size": 256, "warmup_steps": 2000, "eval_every": 2000,
                   "checkpoint_every": 2000},
            tokens_per_parameter=40.0, seeds=1,
            note="the paper's shapes (~150 M non-embedding parameters, ~40 tokens per parameter): documented, not "
                 "run here."),
    },
    evaluation="init-theory",
)

DEPTH_MLM = Experiment(
    name="depth-mlm",
    question=DEPTH.question.replace("validation loss", "masked-LM validation loss"),
    reference="Kedia et al. Sec. 4.1, Tables 4 and 5 (BERT, masked LM)",
    scales={name: replace(s, base_model={**s.base_model, "arch": "encoder"}) for name, s in DEPTH.scales.items()},
    evaluation="init-theory",
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
_BASELINE = dict(n_layers=2, d_model=128, n_heads=4)
_CPU_BASE = dict(arch="decoder", vocab_size=2048, seq_len=128, max_len=128, dropout=0.0)
_CPU_NOTE = ("2 CPU cores, one single-thread run per core; 32 × 32 (two heads of 16) is the deepest shape of ~0.4 M "
             "non-embedding parameters; 20 tokens per parameter.")

_DEEP_GPU = dict(n_layers=32, d_model=64, n_heads=2)  # the deepest shape of `depth` at --scale gpu


def _divergence_models(deep: dict) -> tuple[ModelSpec, ...]:
    """The Post-LN baselines at the deepest shape ``deep`` (Xavier; without warmup; with β² = 0.5) and DSLM with and
    without warmup, each at 1e-3 and 4e-3: the rates bracket the baselines' best at that shape in `depth`."""
    shape = f"{deep['n_layers']}x{deep['d_model']}"
    post = dict(deep, norm_position="post")
    return (ModelSpec(f"{shape} xavier post-LN", dict(post, init="xavier"), (1e-3, 4e-3)),
            ModelSpec(f"{shape} xavier post-LN, no warmup", dict(post, init="xavier"), (1e-3, 4e-3),
                      dict(warmup_steps=0)),
            ModelSpec(f"{shape} xavier post-LN, beta^2=0.5", dict(post, init="xavier", **_residual(0.5)),
                      (1e-3, 4e-3)),
            ModelSpec(f"{shape} dslm post-LN", dict(post, init="dslm"), (1e-3, 4e-3)),
            ModelSpec(f"{shape} dslm post-LN, no warmup", dict(post, init="dslm"), (1e-3, 4e-3),
                      dict(warmup_steps=0)))


DIVERGENCE = Experiment(
    name="divergence",
    question="At the deepest shape, which baselines fail (diverge, or stall at the unigram loss) where DeepScaleLM "
             "trains: Post-LN with Xavier, with and without warmup, and with β² = 0.5?",
    reference="Kedia et al. Sec. 4, Table 4 (Post-LN baselines diverging at 96 × 512 and 768 × 128) and Table 13",
    scales={"cpu": Scale(models=_divergence_models(_DEEP), base_model=_CPU_BASE, train=_CPU_TRAIN,
                         tokens_per_parameter=20.0, seeds=2, note=_CPU_NOTE),
            "gpu": Scale(models=_divergence_models(_DEEP_GPU), base_model=_CPU_BASE, train=_GPU_TRAIN,
                         tokens_per_parameter=20.0, seeds=2, note=_GPU_NOTE)},
    evaluation="init-theory",
)

# The rates at 32 × 32, from `depth` at that shape: Pre-LN models train best at 1.6e-2 (Xavier) and 3.2e-2 (DSLM),
# 2e-3 leaving them 0.4–1.0 nats short; Post-LN DSLM at 2e-3, stalling from 4e-3. A model's grid is centred on its
# normalisation's (the runner tries every model's middle rate first), and a best rate at an edge tries one more.
_PRE_LN_LRS = (8e-3, 1.6e-2, 3.2e-2)
_POST_LN_LRS = (1e-3, 2e-3, 4e-3)

ABLATIONS = Experiment(
    name="ablations",
    question="Which parts of DeepScaleLM matter: the residual scaling (β² = 2/N against 0.5 and none; fixed "
             "against learnable β) in Post-LN, and the initialisation (Xavier, σ = 0.02, DSLM, DSLM-simple) in "
             "Pre-LN with the scaling?",
    reference="Kedia et al. Sec. 4.5, Tables 13 (Post-LN, 96 × 512) and 14 (Pre-LN, 192 × 256 and 96 × 512)",
    scales={"cpu": Scale(
        models=(ModelSpec("post-LN dslm-init, no scaling", dict(_DEEP, norm_position="post", init="dslm",
                                                               lam=1.0, beta=1.0), _POST_LN_LRS),
                ModelSpec("post-LN dslm-init, beta^2=0.5", dict(_DEEP, norm_position="post", init="dslm",
                                                               beta_k=0.5, beta_alpha=0.0), _POST_LN_LRS),
                ModelSpec("post-LN dslm, beta^2=2/N fixed", dict(_DEEP, norm_position="post", init="dslm"),
                          _POST_LN_LRS),
                ModelSpec("post-LN dslm, beta^2=2/N learnable", dict(_DEEP, norm_position="post", init="dslm",
                                                                    learnable_beta=True), _POST_LN_LRS),
                ModelSpec("pre-LN xavier-init + scaling", dict(_DEEP, norm_position="pre", init="xavier",
                                                              **_residual(2 / 32)), _PRE_LN_LRS),
                ModelSpec("pre-LN sigma=0.02 + scaling", dict(_DEEP, norm_position="pre", init="bert",
                                                             **_residual(2 / 32)), _PRE_LN_LRS),
                ModelSpec("pre-LN dslm", dict(_DEEP, norm_position="pre", init="dslm"), _PRE_LN_LRS),
                ModelSpec("pre-LN dslm-simple", dict(_DEEP, norm_position="pre", init="dslm_simple"), _PRE_LN_LRS)),
        base_model=_CPU_BASE, train=_CPU_TRAIN, tokens_per_parameter=20.0, seeds=2, grid_extensions=1,
        note=_CPU_NOTE)},
    evaluation="init-theory",
)


PRIOR_METHODS = Experiment(
    name="prior-methods",
    question="At the deepest shape, how do the prior methods for deep Transformers train against DeepScaleLM: "
             "DSInit, DeepNet, LayerScale, SkipInit, ReZero, Value-SkipInit, Bamboo (a vanilla Pre-LN model), "
             "µP-style and Noci et al. 2022's initialisation?",
    reference="Kedia et al. Sec. 4.5, Table 11 (192 × 256 and 96 × 512; ADMIN, which needs a profiling pass, is not "
              "built here)",
    scales={"cpu": Scale(
        models=(ModelSpec("dslm (pre-LN)", dict(_DEEP, norm_position="pre", init="dslm"), _PRE_LN_LRS),
                ModelSpec("dslm (post-LN)", dict(_DEEP, norm_position="post", init="dslm"), _POST_LN_LRS),
                ModelSpec("dsinit (pre-LN)", dict(_DEEP, norm_position="pre", init="dsinit"), _PRE_LN_LRS),
                ModelSpec("deepnet (post-LN)", dict(_DEEP, norm_position="post", init="deepnorm"), _POST_LN_LRS),
                ModelSpec("layerscale (pre-LN)", dict(_DEEP, norm_position="pre", init="layerscale"), _PRE_LN_LRS),
                ModelSpec("skipinit (pre-LN)", dict(_DEEP, norm_position="pre", init="skipinit"), _PRE_LN_LRS),
                ModelSpec("rezero (no norm)", dict(_DEEP, norm_position="none", init="rezero"), _PRE_LN_LRS),
                ModelSpec("value-skipinit (pre-LN)", dict(_DEEP, norm_position="pre", init="xavier",
                                                          attention="value_skipinit"), _PRE_LN_LRS),
                ModelSpec("bamboo (pre-LN, sigma=0.02)", dict(_DEEP, norm_position="pre", init="bert"), _PRE_LN_LRS),
                ModelSpec("mup-style (pre-LN)", dict(_DEEP, norm_position="pre", init="mup"), _PRE_LN_LRS),
                ModelSpec("noci2022 (pre-LN)", dict(_DEEP, norm_position="pre", init="noci2022"), _PRE_LN_LRS)),
        base_model=_CPU_BASE, train=_CPU_TRAIN, tokens_per_parameter=20.0, seeds=2, grid_extensions=1,
        note=_CPU_NOTE + " Each method in the normalisation it was designed for (DeepNet Post-LN, ReZero none, the "
                         "rest Pre-LN); DSLM in both.")},
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

SHAPED = Experiment(
    name="shaped",
    question="Does shaped attention keep a masked-LM Transformer trainable where the Pre-LN baseline's attention "
             "entropy collapses at a high learning rate, and do the 'recover' (annealed back to standard attention) "
             "and 'learn' schedules train as well as the fixed one?",
    reference="Noci et al. 2023 App. D (BERT masked LM: shaped attention, fixed / learn / recover, against Pre-LN), "
              "Sec. 4 (entropy collapse)",
    scales={"cpu": Scale(
        models=(ModelSpec("pre-LN", dict(norm_position="pre", init="xavier"), _SHAPED_LRS),
                ModelSpec("shaped, fixed", dict(_SHAPED), _SHAPED_LRS),
                ModelSpec("shaped, learn", dict(_SHAPED, shaped_mode="learn"), _SHAPED_LRS),
                ModelSpec("shaped, recover", dict(_SHAPED, shaped_mode="recover", shaped_anneal_steps=1000),
                          _SHAPED_LRS)),
        base_model=dict(arch="encoder", n_layers=16, d_model=64, n_heads=2, vocab_size=2048, seq_len=128,
                        max_len=128, dropout=0.0),
        train={**_CPU_TRAIN, "steps": 1500, "track_every": 250, "checkpoint_every": 250},
        tokens_per_parameter=None, seeds=2,
        note="16 layers of d = 64 (two heads of 32), masked LM (15%) on `data=python`, 1,500 steps of 32 × 128 tokens "
             "(6.1 M tokens, ~8 per non-embedding parameter); shaped models unnormalised with γ = 0.2 residual "
             "branches (App. D: 0.05–0.2), 'recover' annealed to standard attention over the first 1,000 steps; "
             "every layer's attention entropy tracked every 250 steps (track.png in each run's folder).")},
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

EXPERIMENTS = {e.name: e for e in (DEPTH, DEPTH_MLM, DIVERGENCE, PRIOR_METHODS, ABLATIONS, FP8, DERF, SHAPED,
                                   SMOKE)}


def get_experiment(name: str) -> Experiment:
    """The experiment called ``name``; ``ValueError`` listing them otherwise."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; experiments: {', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]
