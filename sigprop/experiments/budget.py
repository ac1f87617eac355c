"""`depth-budget`'s rows: the shape ladder's pair at d = 128 (~0.4 M non-embedding parameters) trained as the ladder
trains it, and three rows that each change one aspect of that training towards the paper's (Kedia et al. App. N,
Table 25).

The pair is `depth`'s headline pair, 2 × 128 Xavier Pre-LN (shallow-wide) against 8 × 64 DeepScaleLM Pre-LN
(deep-thin), as the ladder's rung d = 128 retrained it: on the pinned corpus (``pinned:python-v1``, so every run
records the same data fingerprint wherever it trains), dropout 0.1, 64 validation batches, 2,000 steps of 31 × 128
tokens. Its runs are the ladder's own (same configs, so the same run-id digests: ``--runs-dir`` copies them in from
the ladder's kept records). The rows:

- (a) ~4× the steps on as many tokens: batches of 8 sequences, the steps that give the pair's number of training
  sequences (drawn as the pair's are: each step's windows are a function of (seed, step)), the warmup over the same
  share of the steps (so the same tokens), and the validation batches that give the pair's validation windows
  (``eval_batches × batch_size`` is what :meth:`~sigprop.train.data.TextData.val_batches` spreads over the held-out
  stream);
- (b) 40 tokens per parameter: twice the pair's steps at its batch (the warmup unchanged in steps);
- (c) the paper's schedule: warmup over the first hundredth of the steps, linear decay to 0.

Each model's grid is three rates of the lattice 10⁻³·√2^k around its best rate at the ladder's rung (extended past an
edge, four times at most), two seeds at each rate, the best on their mean, then a third seed there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .ladder import LR_STEP, Role, ladder_models
from .spec import ModelSpec, lattice_rate

__all__ = ["BUDGET_RUNG", "BEST_K", "ROW_KEYS", "BudgetRow", "budget_rows", "budget_models", "budget_model"]

#: The ladder's rung whose pair the rows change: d = 128, the `depth` headline pair's shapes.
BUDGET_RUNG = 128
#: The pair's models by role, as the experiment names them (the ladder's names without their rung).
PAIR_NAMES = {Role.SHALLOW_WIDE: "2x128 xavier pre-LN", Role.DEEP_THIN: "8x64 dslm pre-LN"}
#: Each role's best rate at the ladder's rung d = 128, as k of 10⁻³·√2^k (the ladder's page gives the rates;
#: ``tests/experiments/test_depth_budget.py`` reads them from its stored ``ladder.json``); a row's grid is k ± 1.
BEST_K = {Role.SHALLOW_WIDE: 5, Role.DEEP_THIN: 8}
#: The sequences per step of row (a).
SMALL_BATCH = 8
#: The rows in order: (key, what changes, the suffix of its models' names).
ROW_KEYS = (("pair", "the pair as the ladder trains it", ""),
            ("a", f"~4× the steps on as many tokens (batch {SMALL_BATCH})", f", 4x steps (batch {SMALL_BATCH})"),
            ("b", "40 tokens per parameter (twice the steps)", ", 40 tokens/param"),
            ("c", "warmup 1% of the steps, linear decay to 0", ", warmup 1% + linear decay"))


@dataclass(frozen=True)
class BudgetRow:
    """One row of `depth-budget`.

    Attributes:
        key: ``pair``, ``a``, ``b`` or ``c``.
        label: what the row changes, in words.
        suffix: what its models' names add to the pair's.
        train: its :class:`~sigprop.train.config.TrainConfig` fields over the pair's.
    """

    key: str
    label: str
    suffix: str
    train: dict


def budget_rows(pair_train: dict) -> tuple[BudgetRow, ...]:
    """The pair and its three rows, for a pair trained by ``pair_train``.

    Args:
        pair_train: the pair's training fields: ``steps``, ``batch_size``, ``warmup_steps``, ``eval_every``,
            ``eval_batches``, ``checkpoint_every`` (the ladder's at d = 128).

    Returns:
        The pair (no change), then rows (a), (b), (c), in the order of :data:`ROW_KEYS`.

    Raises:
        ValueError: where row (a)'s small batch cannot keep the pair's number of sequences or validation windows.

    Example:
        >>> pair = dict(steps=2000, batch_size=31, warmup_steps=100, eval_every=250, eval_batches=64,
        ...             checkpoint_every=250)
        >>> [(r.key, r.train.get("steps")) for r in budget_rows(pair)]
        [('pair', None), ('a', 7750), ('b', 4000), ('c', None)]
    """
    steps, batch = pair_train["steps"], pair_train["batch_size"]
    sequences, windows = steps * batch, pair_train["eval_batches"] * batch
    if sequences % SMALL_BATCH or windows % SMALL_BATCH:
        raise ValueError(f"row (a): {steps} × {batch} training sequences and {pair_train['eval_batches']} × {batch} "
                         f"validation windows must divide into batches of {SMALL_BATCH}")
    small_steps = sequences // SMALL_BATCH
    evaluations = steps // pair_train["eval_every"]
    every = math.ceil(small_steps / evaluations)  # as many evaluations as the pair's, the last at the end
    changes = {
        "pair": {},
        "a": dict(batch_size=SMALL_BATCH, steps=small_steps, warmup_steps=round(pair_train["warmup_steps"] *
                                                                                small_steps / steps),
                  eval_batches=windows // SMALL_BATCH, eval_every=every,
                  checkpoint_every=math.ceil(pair_train["checkpoint_every"] * small_steps / steps)),
        "b": dict(steps=2 * steps),
        "c": dict(warmup_steps=round(0.01 * steps), schedule="linear", final_lr_fraction=0.0),
    }
    return tuple(BudgetRow(key, label, suffix, changes[key]) for key, label, suffix in ROW_KEYS)


def budget_models(base_model: dict, train: dict) -> tuple[ModelSpec, ...]:
    """The models of `depth-budget`: per row, the ladder's shallow-wide and deep-thin models at d = 128 under the
    names of :data:`PAIR_NAMES` (and the row's suffix) with the row's training changes, each over its grid.

    Args:
        base_model: the config fields every model shares (the ladder's).
        train: the training fields every run shares (the ladder's).

    Returns:
        Two models per row, the pair first.

    Example:
        >>> base = dict(arch="decoder", vocab_size=2048, seq_len=128, max_len=128, dropout=0.1)
        >>> train = dict(steps=2000, warmup_steps=100, eval_every=250, eval_batches=64, checkpoint_every=250)
        >>> [m.name for m in budget_models(base, train)][:3]
        ['2x128 xavier pre-LN', '8x64 dslm pre-LN', '2x128 xavier pre-LN, 4x steps (batch 8)']
    """
    ladder = {m.role: m.spec for m in ladder_models((BUDGET_RUNG,), base_model, train["steps"]) if m.role in BEST_K}
    models = []
    for row in budget_rows({**train, **ladder[Role.SHALLOW_WIDE].train}):
        for role, spec in ladder.items():
            k = BEST_K[role]
            grid = tuple(lattice_rate(i, LR_STEP) for i in (k - 1, k, k + 1))
            models.append(ModelSpec(PAIR_NAMES[role] + row.suffix, spec.model, grid, {**spec.train, **row.train}))
    return tuple(models)


def budget_model(name: str) -> tuple[str, Role] | None:
    """The row key and role of a model named as `depth-budget` names its models.

    Args:
        name: a model's name.

    Returns:
        (its row's key of :data:`ROW_KEYS`, its :class:`~sigprop.experiments.ladder.Role`), or None for a name of
        another form. (`depth`'s models of the same shapes carry the pair's names.)

    Example:
        >>> budget_model("8x64 dslm pre-LN, 40 tokens/param")
        ('b', <Role.DEEP_THIN: 'deep-thin'>)
    """
    for key, _, suffix in ROW_KEYS:
        for role, pair_name in PAIR_NAMES.items():
            if name == pair_name + suffix:
                return key, role
    return None
