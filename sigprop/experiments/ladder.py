"""The shape ladder: deep-thin against shallow-wide at equal N·d², rung by rung, from d = 64 to d = 512.

At a rung of width d every model has the non-embedding parameters of 2 layers of width d (N·d² held, Kedia et al.
Sec. 4.2): 2 × d Xavier Pre-LN (shallow-wide), 8 × d/2 DeepScaleLM Pre-LN (deep-thin), 8 × d/2 Xavier Pre-LN (the
control: depth without DSLM) and, from d = 256 on, 32 × d/4 DeepScaleLM Pre-LN (deeper). Heads have 64 dimensions
where the width allows, never fewer than 32 (:func:`heads_for`). Every model of a rung trains the same number of
steps on batches of the same size, so a seed gives both shapes the same batches (the data are functions of
(seed, step)): the runs of one seed are paired. The batch grows with the rung so that a run sees ~20 tokens per
non-embedding parameter in :data:`LADDER_STEPS` steps (:func:`rung_batch`).

A model's name starts with its rung (``d=64: 2x64 xavier pre-LN``); :func:`ladder_model` reads its rung and role back
from the table built here, and :func:`rung_model_names` selects the models of some rungs (``--rungs``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from .spec import ModelSpec, lattice_rate

__all__ = ["Role", "LadderModel", "RUNGS", "LADDER_STEPS", "LR_STEP", "heads_for", "rung_batch", "ladder_models",
           "ladder_model", "rung_model_names"]

#: The widths d of the rungs.
RUNGS = (64, 96, 128, 192, 256, 384, 512)
#: Steps of every run at every rung (the batch grows with the rung instead).
LADDER_STEPS = 2000
#: The learning-rate grids' spacing: rates 10⁻³·√2^k.
LR_STEP = math.sqrt(2.0)
#: The first rung with the 32-layer model (its width d/4 ≥ 64).
DEEPER_FROM = 256


class Role(Enum):
    """What a model is at its rung."""

    SHALLOW_WIDE = "shallow-wide"  # 2 × d, Xavier
    DEEP_THIN = "deep-thin"        # 8 × d/2, DSLM
    CONTROL = "control"            # 8 × d/2, Xavier
    DEEPER = "deeper"              # 32 × d/4, DSLM


#: Each role's shape (layers, width divisor, initialisation) and the centre of its first grid, as k of 10⁻³·√2^k:
#: the best rates of `depth` at ~0.4 M parameters (2 × 128 Xavier 4e-3, 8 × 64 Xavier 8e-3, DSLM 1.6e-2, 32 × 32
#: DSLM 3.2e-2); the grids grow past an edge until every best rate is interior.
_ROLES = {Role.SHALLOW_WIDE: (2, 1, "xavier", 4), Role.DEEP_THIN: (8, 2, "dslm", 8),
          Role.CONTROL: (8, 2, "xavier", 6), Role.DEEPER: (32, 4, "dslm", 10)}


@dataclass(frozen=True)
class LadderModel:
    """One model of the ladder: its rung (the shallow-wide width d), role, and its :class:`ModelSpec`."""

    rung: int
    role: Role
    spec: ModelSpec


def heads_for(width: int, head_dim: int = 64, smallest: int = 32) -> int:
    """The number of attention heads of a layer of ``width``: heads of ``head_dim`` where the width allows, else the
    head size that divides the width closest to ``head_dim`` (the larger on a tie) and is at least ``smallest``; one
    head of the whole width where none is.

    Example:
        >>> [heads_for(d) for d in (32, 48, 64, 96, 128, 192, 512)]
        [1, 1, 1, 2, 2, 3, 8]
    """
    sizes = [width // h for h in range(1, width + 1) if width % h == 0 and width // h >= smallest]
    if not sizes:
        return 1
    best = min(sizes, key=lambda s: (abs(s - head_dim), -s))
    return width // best


def rung_batch(width: int, base_model: dict, steps: int = LADDER_STEPS, tokens_per_parameter: float = 20.0) -> int:
    """Sequences per step at the rung of ``width``: ``tokens_per_parameter`` tokens per non-embedding parameter of
    its shallow-wide model in ``steps`` steps, rounded to the nearest whole sequence (at least one).

    Example:
        >>> rung_batch(128, dict(arch="decoder", vocab_size=2048, seq_len=128, max_len=128))
        31
    """
    from ..model.config import config_from_dict
    from .spec import non_embedding_parameters

    shape = dict(n_layers=2, d_model=width, n_heads=heads_for(width), init="xavier", norm_position="pre")
    parameters = non_embedding_parameters(config_from_dict({**base_model, **shape}))
    return max(1, round(tokens_per_parameter * parameters / (steps * base_model["seq_len"])))


def _grid(centre: int, points: int) -> tuple[float, ...]:
    half = (points - 1) // 2
    return tuple(lattice_rate(k, LR_STEP) for k in range(centre - half, centre - half + points))


def ladder_models(rungs, base_model: dict, steps: int = LADDER_STEPS, tokens_per_parameter: float = 20.0,
                  grid_points: int = 3, head_dim: int = 64, smallest_head: int = 32,
                  deeper_from: int = DEEPER_FROM) -> tuple[LadderModel, ...]:
    """The models of ``rungs`` (widths d), rung by rung in the order shallow-wide, deep-thin, control, deeper: each
    a Pre-LN model over its role's first grid (``grid_points`` rates of the √2 lattice), with its rung's batch.

    Example:
        >>> base = dict(arch="decoder", vocab_size=2048, seq_len=128, max_len=128)
        >>> [m.spec.name for m in ladder_models((64,), base)]
        ['d=64: 2x64 xavier pre-LN', 'd=64: 8x32 dslm pre-LN', 'd=64: 8x32 xavier pre-LN']
    """
    models = []
    for d in rungs:
        batch = rung_batch(d, base_model, steps, tokens_per_parameter)
        for role, (layers, divisor, init, centre) in _ROLES.items():
            if role is Role.DEEPER and d < deeper_from:
                continue
            width = d // divisor
            shape = dict(n_layers=layers, d_model=width, n_heads=heads_for(width, head_dim, smallest_head),
                         init=init, norm_position="pre")
            name = f"d={d}: {layers}x{width} {init} pre-LN"
            models.append(LadderModel(d, role, ModelSpec(name, shape, _grid(centre, grid_points),
                                                         dict(batch_size=batch), group=d)))
            _KNOWN[name] = models[-1]
    return tuple(models)


#: Every ladder model built so far, by name (the catalog's scales build them at import).
_KNOWN: dict[str, LadderModel] = {}


def ladder_model(name: str) -> LadderModel | None:
    """The ladder model called ``name`` (its rung and role), or None for a model of another experiment."""
    return _KNOWN.get(name)


def rung_model_names(models, rungs) -> tuple[str, ...]:
    """The names of the models among ``models`` (:class:`ModelSpec`) that sit at one of ``rungs``.

    Args:
        models: a scale's models.
        rungs: widths d.

    Returns:
        Their names, in the scale's order.

    Raises:
        ValueError: naming a rung the scale does not have (and the rungs it has).
    """
    have = sorted({m.rung for s in models if (m := ladder_model(s.name)) is not None})
    if not have:
        raise ValueError("--rungs selects rungs of a shape ladder (sigprop experiment shape-ladder)")
    missing = [r for r in rungs if r not in have]
    if missing:
        raise ValueError(f"--rungs: no rung {', '.join(map(str, missing))}; the rungs are {', '.join(map(str, have))}")
    return tuple(s.name for s in models if (m := ladder_model(s.name)) is not None and m.rung in rungs)
