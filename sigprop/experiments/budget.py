"""`depth-budget`'s rows: the shape ladder's pair at d = 128 (~0.4 M non-embedding parameters) trained as the ladder
trains it, and three rows that each change one aspect of that training towards the paper's (Kedia et al. App. N,
Table 25).

The pair is `depth`'s headline pair, 2 × 128 Xavier Pre-LN (shallow-wide) against 8 × 64 DeepScaleLM Pre-LN
(deep-thin), as the ladder's rung d = 128 retrained it: on the pinned corpus (``pinned:python-v1``, so every run
records the same data fingerprint wherever it trains), dropout 0.1, 64 validation batches, 2,000 steps of 31 × 128
tokens. Its runs are the ladder's own (same configs, so the same run-id digests: ``--runs-dir`` copies them in from
the ladder's kept records). The rows:

- (a) 4× the steps on the same tokens: batches of 8 sequences, the steps that give the pair's tokens, and the
  validation batches that give the pair's validation windows (``eval_batches × batch_size`` is what
  :meth:`~sigprop.train.data.TextData.val_batches` spreads over the held-out stream);
- (b) 40 tokens per parameter: twice the pair's steps at its batch;
- (c) the paper's schedule: warmup over the first hundredth of the steps, linear decay to 0.

Each model's grid is three rates of the lattice 10⁻³·√2^k around its best rate at the ladder's rung (extended past an
edge, twice at most), two seeds at each rate, the best on their mean, then a third seed there.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ladder import LADDER_STEPS, LR_STEP, Role, ladder_models
from .spec import ModelSpec, lattice_rate

__all__ = ["BUDGET_RUNG", "BEST_K", "BudgetRow", "budget_rows", "budget_models", "budget_model"]

#: The ladder's rung whose pair the rows change: d = 128, the `depth` headline pair's shapes.
BUDGET_RUNG = 128
#: Each compared role's best rate at the ladder's rung d = 128, as k of 10⁻³·√2^k (5.66e-3 and 1.6e-2: the ladder's
#: kept records, ``docs/results/experiments/shape-ladder/ladder.json``); each row's grid is k − 1, k, k + 1.
BEST_K = {Role.SHALLOW_WIDE: 5, Role.DEEP_THIN: 8}
#: The sequences per step of row (a).
SMALL_BATCH = 8


@dataclass(frozen=True)
class BudgetRow:
    """One row of `depth-budget`: its ``key`` (``pair``, ``a``, ``b``, ``c``), what it changes (``label``), the
    suffix its models' names carry, and its :class:`~sigprop.train.config.TrainConfig` fields over the ladder's."""

    key: str
    label: str
    suffix: str
    train: dict


def budget_rows(batch: int, steps: int = LADDER_STEPS, eval_batches: int = 64) -> tuple[BudgetRow, ...]:
    """The pair and its three rows, for a pair that trains ``steps`` steps of ``batch`` sequences and validates on
    ``eval_batches`` batches.

    Args:
        batch: the pair's sequences per step (the ladder's at d = 128: 31).
        steps: the pair's steps.
        eval_batches: the pair's validation batches.

    Returns:
        The pair (no change), then rows (a), (b), (c).

    Raises:
        ValueError: where row (a)'s small batch cannot reproduce the pair's tokens or validation windows exactly.

    Example:
        >>> [(r.key, r.train.get("steps")) for r in budget_rows(31)]
        [('pair', None), ('a', 7750), ('b', 4000), ('c', None)]
    """
    sequences, windows = steps * batch, eval_batches * batch
    if sequences % SMALL_BATCH or windows % SMALL_BATCH:
        raise ValueError(f"row (a): {steps} × {batch} sequences and {eval_batches} × {batch} validation windows must "
                         f"divide into batches of {SMALL_BATCH}")
    small_steps = sequences // SMALL_BATCH
    every = small_steps // (steps // 250) if steps >= 250 else small_steps  # as many evaluations as the pair's
    return (
        BudgetRow("pair", "the pair as the ladder trains it", "", {}),
        BudgetRow("a", f"4× the steps on the same tokens (batch {SMALL_BATCH})", f", 4x steps (batch {SMALL_BATCH})",
                  dict(batch_size=SMALL_BATCH, steps=small_steps, eval_batches=windows // SMALL_BATCH,
                       eval_every=every, checkpoint_every=every)),
        BudgetRow("b", "40 tokens per parameter (twice the steps)", ", 40 tokens/param", dict(steps=2 * steps)),
        BudgetRow("c", "warmup 1% of the steps, linear decay to 0", ", warmup 1% + linear decay",
                  dict(warmup_steps=round(0.01 * steps), schedule="linear", final_lr_fraction=0.0)),
    )


#: Model name → (its row, its role), for the models :func:`budget_models` built.
_KNOWN: dict[str, tuple[BudgetRow, Role]] = {}


def budget_models(base_model: dict, steps: int = LADDER_STEPS) -> tuple[ModelSpec, ...]:
    """The models of `depth-budget`: per row, the ladder's shallow-wide and deep-thin models at d = 128 under their
    own names (``2x128 xavier pre-LN`` and the row's suffix) with the row's training changes, each over its grid.

    Args:
        base_model: the config fields every model shares (the ladder's).
        steps: the pair's steps (the ladder's).

    Returns:
        Two models per row, the pair first.

    Example:
        >>> base = dict(arch="decoder", vocab_size=2048, seq_len=128, max_len=128, dropout=0.1)
        >>> [m.name for m in budget_models(base)][:3]
        ['2x128 xavier pre-LN', '8x64 dslm pre-LN', '2x128 xavier pre-LN, 4x steps (batch 8)']
    """
    ladder = {m.role: m.spec for m in ladder_models((BUDGET_RUNG,), base_model, steps) if m.role in BEST_K}
    batch = ladder[Role.SHALLOW_WIDE].train["batch_size"]
    models = []
    for row in budget_rows(batch, steps):
        for role, spec in ladder.items():
            k = BEST_K[role]
            name = spec.name.split(": ", 1)[1] + row.suffix
            grid = tuple(lattice_rate(i, LR_STEP) for i in (k - 1, k, k + 1))
            models.append(ModelSpec(name, spec.model, grid, {**spec.train, **row.train}))
            _KNOWN[name] = (row, role)
    return tuple(models)


def budget_model(name: str) -> tuple[BudgetRow, Role] | None:
    """The row and role of the `depth-budget` model called ``name`` (None for a model of another experiment)."""
    return _KNOWN.get(name)
