"""What an experiment is: models (each a set of config fields and a learning-rate grid), the training every run
shares, the tokens each run sees (per non-embedding parameter), the seeds, and the runs that follow from them.

The learning rate is tuned per model as Kedia et al. Sec. 4 did ("deeper-thinner models needed higher LR"): every
rate of the grid trains with the first seed (the tuning runs; the first ``tuning_seeds`` seeds where a scale says
so); the rate whose runs end at the lowest validation loss (the mean over the tuning seeds, among the rates at which
every tuning run trained) trains the other seeds. A model is reported at its best rate, the grid beside it.
A best rate at an edge of the grid says only that the optimum lies at or beyond it: a scale with ``grid_extensions``
then tries the next rate past that edge (:func:`edge_rates`), up to that many times per edge, before the seeds.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Literal, get_args

__all__ = ["ModelSpec", "Scale", "Experiment", "RunSpec", "non_embedding_parameters", "SCALES"]

#: The scales an experiment runs at: the CPU here, one GPU, the paper's configuration (documented, not run here), and
#: a check of an experiment's machinery at a tiny size (seconds a run).
ScaleName = Literal["cpu", "gpu", "paper", "smoke"]
SCALES: tuple[ScaleName, ...] = get_args(ScaleName)


@dataclass(frozen=True)
class ModelSpec:
    """One model of an experiment: its ``name`` (a row of the table), its :class:`TransformerConfig` fields over
    the scale's, its learning-rate grid, :class:`TrainConfig` fields of its own over the scale's (e.g. no
    warmup), and where set the tokens its runs see per non-embedding parameter instead of the scale's (more steps at
    the same batch). ``group``: runs of a lower group start first (a shape ladder's rung, its width d, so that the
    cheapest rungs settle first; :class:`~sigprop.experiments.schedule.Schedule`); it is not part of a run's id."""

    name: str
    model: dict
    lrs: tuple[float, ...]
    train: dict = field(default_factory=dict)
    tokens_per_parameter: float | None = None
    group: int = 0

    def tokens_per_parameter_at(self, scale: Scale) -> float | None:
        """The tokens per non-embedding parameter this model's runs see at ``scale`` (None: the train's steps)."""
        return self.tokens_per_parameter if self.tokens_per_parameter is not None else scale.tokens_per_parameter


@dataclass(frozen=True)
class Scale:
    """An experiment at one scale: the models, the config fields every model shares (``base_model``), the
    :class:`TrainConfig` fields every run shares (``train``), the tokens each run sees per non-embedding parameter
    (``tokens_per_parameter``; None: every run takes the ``steps`` of ``train``, as an experiment that trains every
    model for the same number of epochs does), the default number of seeds, a note on what the scale is, and how
    many times a model's grid may grow past an edge where its best rate sits (``grid_extensions``; 0: never).

    ``tuning_seeds``: how many seeds train at every rate of the grid (the best rate is chosen on their mean; the
    remaining ``seeds - tuning_seeds`` train at it). ``lr_step``: where set, a grid extension steps to the next
    point of the lattice ``lr_anchor · lr_step**k`` (each rate rounded to 3 significant figures) instead of
    multiplying the edge rate by the grid's outer ratio, so that rounding never accumulates.

    ``lower_when_none_trains``: where a model trains at no rate of its grid (every rate scored as stalled or
    diverged), its grid grows below its lowest rate, up to ``grid_extensions`` times (too high a rate is what keeps
    a model from leaving the unigram plateau, or makes it diverge); a model that trains at none of those rates either
    is settled without a best rate, "trained at no rate tried" being its measured outcome. Off: such a model is
    never settled, and its grid stays as it is."""

    models: tuple[ModelSpec, ...]
    base_model: dict
    train: dict
    tokens_per_parameter: float | None
    seeds: int = 2
    note: str = ""
    grid_extensions: int = 0
    tuning_seeds: int = 1
    lr_step: float | None = None
    lr_anchor: float = 1e-3
    lower_when_none_trains: bool = False


@dataclass(frozen=True)
class Experiment:
    """A named experiment: its question, the paper's tables it reproduces, how a run's end is judged (``stall_margin``:
    a run that ends less than this many nats below the unigram loss of the validation text learned nothing beyond
    token frequencies: "stalled"), and its scales.

    An experiment that studies the trained models of another (``runs_from``, e.g. FP8 casting of the ``depth``
    models) trains nothing of its own: it completes that experiment (in its folder) and then applies ``evaluation``
    (a name of :data:`sigprop.experiments.evaluations.EVALUATIONS`) to every model's runs at its best rate."""

    name: str
    question: str
    reference: str
    #: scale name → :class:`Scale`, or a function building it where it reads stored results (built when asked for)
    scales: dict = field(default_factory=dict)
    stall_margin: float = 0.1
    runs_from: str | None = None
    evaluation: str | None = None

    def scale(self, name: str) -> Scale:
        if name not in SCALES:
            raise ValueError(f"--scale must be one of {', '.join(SCALES)} (got {name!r})")
        if name not in self.scales:
            raise ValueError(f"experiment {self.name!r} has no {name} scale; it has: {', '.join(self.scales)}")
        scale = self.scales[name]
        return scale() if callable(scale) else scale


def non_embedding_parameters(config) -> int:
    """The parameters of the layers and the final norm(s) of a model of ``config``, counted on one layer built on
    the meta device (layers of a stack have one shape): the size Kedia et al. hold fixed across shapes (N·d²)."""
    import torch

    from ..model.layer import TransformerLayer

    def count(module) -> int:
        return sum(p.numel() for p in module.parameters())

    with torch.device("meta"):
        encoder = count(TransformerLayer(config, 0, causal=config.arch == "decoder")) * config.n_layers
        decoder = 0
        if config.arch == "encoder_decoder":
            decoder = count(TransformerLayer(config, config.n_layers, causal=True, cross=True)) * \
                (config.n_decoder_layers or config.n_layers)
    norms = (2 if config.arch == "encoder_decoder" else 1) * (2 * config.d_model if config.has_final_norm else 0)
    return encoder + decoder + norms


_UNSET = object()
#: Model-config fields added after run ids were first written, with their defaults: left out of a run id's digest
#: while at the default, so that a run folder keeps its name (and an experiment resumes) across versions.
_LATER_FIELDS = {"n_kv_heads": None, "head_dim": None, "position": "learned", "rope_theta": 10000.0,
                 "initializer_range": 0.02, "embed_scale": 1.0,
                 "qk_norm": False, "rotary_fraction": 1.0, "parallel_block": False,
                 "head_transform": False, "pool": "mean", "embed_dropout": None}


@dataclass(frozen=True)
class RunSpec:
    """One training run of an experiment: the model's name, its configs as dicts, the seed, the learning rate,
    whether it is a tuning run (first seed, every rate of the grid), and its id (a readable name and a hash of the
    configs: the run directory's name, stable across invocations)."""

    model_name: str
    model_config: dict
    train_config: dict
    seed: int
    lr: float
    tuning: bool

    @property
    def run_id(self) -> str:
        model = {k: v for k, v in self.model_config.items() if _LATER_FIELDS.get(k, _UNSET) != v}
        digest = hashlib.sha256(json.dumps([model, self.train_config], sort_keys=True).encode())
        slug = "".join(ch if ch.isalnum() else "-" for ch in self.model_name).strip("-")
        return f"{slug}-lr{self.lr:g}-s{self.seed}-{digest.hexdigest()[:8]}"


def steps_for_tokens(model, batch_size: int, tokens_per_parameter: float) -> int:
    """The steps at which a run of ``model`` (a :class:`~sigprop.model.config.TransformerConfig`) at batches of
    ``batch_size`` sequences sees ``tokens_per_parameter`` tokens per non-embedding parameter
    (:func:`non_embedding_parameters`), rounded up, at least 1. An encoder–decoder's step holds its source and its
    target sequence.

    Args:
        model: the model's configuration.
        batch_size: sequences per step.
        tokens_per_parameter: tokens per non-embedding parameter the run sees.

    Returns:
        The number of steps.

    Example:
        >>> from sigprop.model.config import config_from_dict
        >>> steps_for_tokens(config_from_dict(dict(arch="decoder", n_layers=2, d_model=128, n_heads=4,
        ...                                        vocab_size=2048, seq_len=128, max_len=128)), 32, 20.0)
        1927
    """
    tokens_per_step = batch_size * model.seq_len * (2 if model.arch == "encoder_decoder" else 1)
    return max(1, math.ceil(tokens_per_parameter * non_embedding_parameters(model) / tokens_per_step))


def plan_runs(experiment: Experiment, scale_name: str, seeds: int | None = None,
              best_lr: dict | None = None, extra_lrs: dict | None = None) -> list[RunSpec]:
    """The runs of ``experiment`` at ``scale_name``: without ``best_lr`` the tuning runs (seed 0, or the scale's
    ``tuning_seeds`` first seeds, at every rate of each model's grid, or with ``extra_lrs`` (model name → rates) at
    those rates only, for the models named); with ``best_lr`` (model name → chosen rate) the other seeds
    ``tuning_seeds`` … ``seeds`` − 1 at that rate. Steps are set so that a run sees ``tokens_per_parameter`` tokens
    per non-embedding parameter."""
    from ..model.config import config_from_dict
    from ..train.config import train_config_from_dict

    scale = experiment.scale(scale_name)
    seeds = scale.seeds if seeds is None else seeds
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < scale.tuning_seeds:
        raise ValueError(f"--seeds must be an integer >= {scale.tuning_seeds} (got {seeds!r})")
    tuning_seeds = range(scale.tuning_seeds)
    runs = []
    for spec in scale.models:
        model = config_from_dict({**scale.base_model, **spec.model})
        base = train_config_from_dict({**scale.train, **spec.train})
        per_parameter = spec.tokens_per_parameter_at(scale)
        steps = base.steps if per_parameter is None else steps_for_tokens(model, base.batch_size, per_parameter)
        if extra_lrs is not None:
            chosen = [(s, lr, True) for lr in extra_lrs.get(spec.name, ()) for s in tuning_seeds]
        elif best_lr is None:
            chosen = [(s, lr, True) for lr in spec.lrs for s in tuning_seeds]
        elif spec.name in best_lr and best_lr[spec.name] is not None:
            chosen = [(s, best_lr[spec.name], False) for s in range(scale.tuning_seeds, seeds)]
        else:
            chosen = []
        for seed, lr, tuning in chosen:
            train = base.replace(steps=steps, seed=seed, lr=lr, warmup_steps=min(base.warmup_steps, max(steps - 1, 0)),
                                 eval_every=max(1, min(base.eval_every, steps)),
                                 checkpoint_every=max(1, min(base.checkpoint_every, steps)))
            runs.append(RunSpec(spec.name, model.to_dict(), train.to_dict(), seed, lr, tuning))
    if best_lr is None and extra_lrs is None:  # every model at the middle rate of its grid first, then the rates
        # next to it: an experiment stopped early has one run of every model
        runs.sort(key=lambda r: _distance_from_middle(r.lr, scale.models, r.model_name))
    return runs


def _distance_from_middle(lr: float, models, name: str) -> int:
    grid = next(m.lrs for m in models if m.name == name)
    return abs(grid.index(lr) - (len(grid) - 1) // 2) * 2 + (grid.index(lr) < (len(grid) - 1) // 2)


def edge_rates(scale: Scale, results) -> dict:
    """Model name → the one rate to try next because the model's best tuning rate so far sits at an edge of the rates
    tried: above the top by the grid's top step (its two highest rates' ratio), or below the bottom by its bottom
    step (with ``scale.lr_step``: the next point of its lattice); at most ``scale.grid_extensions`` rates past each
    edge of the original grid. A model that trained at no rate tried counts as best at its lowest rate where the scale
    lowers such grids (``scale.lower_when_none_trains``), else it proposes nothing. Empty when every model's best rate
    is inside its grid (or none trained, or the extensions are spent): the tuning is complete."""
    from .summary import best_learning_rates

    best = best_learning_rates(results)
    proposals = {}
    for spec in scale.models:
        tried = sorted({r.lr for r in results if r.tuning and r.model_name == spec.name})
        lr = best.get(spec.name)
        none_trained = lr is None and scale.lower_when_none_trains and bool(tried)
        if (lr is None and not none_trained) or scale.grid_extensions <= 0:
            continue
        grid = sorted(spec.lrs)
        up = grid[-1] / grid[-2] if len(grid) > 1 else 2.0
        down = grid[1] / grid[0] if len(grid) > 1 else 2.0
        if none_trained:
            lr = tried[0]  # nothing trained: the next rate to try is below the lowest
        elif lr == tried[-1] and sum(t > grid[-1] for t in tried) < scale.grid_extensions:
            proposals[spec.name] = (_next_rate(scale, lr, +1) if scale.lr_step else float(f"{lr * up:.3g}"),)
            continue
        if lr == tried[0] and sum(t < grid[0] for t in tried) < scale.grid_extensions:
            proposals[spec.name] = (_next_rate(scale, lr, -1) if scale.lr_step else float(f"{lr / down:.3g}"),)
    return proposals


def lattice_rate(k: int, step: float, anchor: float = 1e-3) -> float:
    """The ``k``-th rate of the lattice ``anchor · step**k``, rounded to 3 significant figures.

    Example:
        >>> [lattice_rate(k, 2 ** 0.5) for k in range(4)]
        [0.001, 0.00141, 0.002, 0.00283]
    """
    return float(f"{anchor * step ** k:.3g}")


def _next_rate(scale: Scale, lr: float, direction: int) -> float:
    """The lattice point next to ``lr`` (itself a lattice point, perhaps rounded) in ``direction`` (+1 up, −1 down)."""
    k = round(math.log(lr / scale.lr_anchor) / math.log(scale.lr_step))
    return lattice_rate(k + direction, scale.lr_step, scale.lr_anchor)


__all__ += ["steps_for_tokens", "plan_runs", "edge_rates", "lattice_rate"]
