"""The doctor's fixes and the training evidence behind them: each kind of model the doctor flags and fixes, at a
shape the `doctor-fixes` experiment trains beside its fixed twin, and what that training measured.

The doctor's recommendation (:func:`sigprop.analysis.doctor.recommend`) is derived from the theory at
initialisation: DeepScaleLM keeps the variances bounded (Kedia et al. Sec. 3.5, App. E.3–E.4), Q/K at their scheme's
std keep the softmax's gradient from exploding (Sec. 3.3). Whether the fixed model then *trains* better is a separate,
empirical question. Each :class:`FixCase` is one kind of fix at one flagged configuration; `sigprop experiment
doctor-fixes` trains the flagged model and its twin with the fix applied, at the same budget, each at its best
learning rate (chosen on the mean of two seeds). ``bench/fix_outcomes.py`` keeps the table's losses and fates in
``fix_outcomes.json`` beside this file (package data, so an installed sigprop reads it too), and the doctor cites
them, or says that a kind of fix is not measured.

A recommendation is of a case's kind when it sets every field the case's fix sets, to the same value, and the model
has the case's normalisation position (:meth:`FixCase.matches`): a 96-layer Post-LN BERT-initialised model moved to
DeepScaleLM is of the kind "post-LN xavier → dslm" measured at 64 × 64 Xavier. A fix whose value the doctor computes
for each model (a DyT/Derf α, from the model's own stream) is of the kind when it sets that field at all
(:attr:`FixCase.computed`). The evidence is of that kind at the experiment's size, not of the user's model.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from ..model.config import TransformerConfig

__all__ = ["BASE_MODEL", "FixCase", "FixOutcome", "FixReading", "FIX_CASES", "OUTCOMES_FILE", "load_outcomes",
           "fix_evidence", "fates_said", "outcomes_markdown", "NOT_MEASURED"]

#: The measured outcomes, package data written by ``bench/fix_outcomes.py`` from the experiment's stored results.
OUTCOMES_FILE = Path(__file__).with_name("fix_outcomes.json")

#: What the doctor says of a kind of fix that no training has measured.
NOT_MEASURED = "not measured in training"

#: What every case's models share: causal LMs of 64-token sequences at vocabulary 2048, dropout 0.1 (the base model
#: of the `doctor-fixes` experiment).
BASE_MODEL = dict(arch="decoder", vocab_size=2048, seq_len=64, max_len=64, dropout=0.1)
_LLAMA = dict(BASE_MODEL, n_heads=4, n_kv_heads=2, activation="swiglu", norm="rmsnorm", norm_eps=1e-6,
              position="rope", tie_head=False, init="bert", initializer_range=0.02)


@dataclass(frozen=True)
class FixCase:
    """One kind of fix: its ``name``, the flagged model's :class:`TransformerConfig` fields (``flagged``), the
    doctor's ``fix`` on it (the config changes :func:`~sigprop.analysis.doctor.recommend` makes, None meaning "the
    scheme's default"), the learning-rate grids of the flagged model and of its fixed twin, and the fields of the fix
    whose value the doctor computes for each model (``computed``: a recommendation sets them to its own value), and
    the flagged model's fields a model must share for the case to speak of it (``shared``: its normalisation position;
    the Derf case its norm too, since a DyT model's α fix is another one)."""

    name: str
    flagged: dict
    fix: dict
    flagged_lrs: tuple[float, ...]
    fixed_lrs: tuple[float, ...]
    computed: tuple[str, ...] = ()
    shared: tuple[str, ...] = ("norm_position",)

    @property
    def fixed(self) -> dict:
        """The fixed twin's fields: the flagged model's with the fix applied."""
        return {**self.flagged, **self.fix}

    def matches(self, config: TransformerConfig, changes: dict) -> bool:
        """Whether a recommendation of ``changes`` for ``config`` is of this case's kind (module docstring).

        Args:
            config: the flagged model's configuration.
            changes: the recommendation's config changes.

        Returns:
            True when ``changes`` sets each field this case's fix sets to a value (not None) to that value (a
            :attr:`computed` field to any value), and ``config`` has the flagged model's :attr:`shared` fields.

        Example:
            >>> FIX_CASES[0].matches(TransformerConfig(norm_position="post", init="bert", n_layers=96),
            ...                      {"init": "dslm"})
            True
        """
        if any(getattr(config, key) != self.flagged.get(key, getattr(config, key)) for key in self.shared):
            return False
        return all(changes.get(key) is not None if key in self.computed else changes.get(key) == value
                   for key, value in self.fix.items() if value is not None)


#: The doctor's fixes, each at a shape where the doctor flags it (a test checks that it still does, and that its
#: recommendation is the case's fix). Rates on the √2 lattice 10⁻³·√2^k, centred on `depth`'s best at a nearby shape.
FIX_CASES: tuple[FixCase, ...] = (
    FixCase("post-LN xavier -> dslm", dict(BASE_MODEL, n_layers=64, d_model=64, n_heads=2, norm_position="post",
                                            init="xavier"),
            {"init": "dslm"}, (7.07e-4, 1e-3, 1.41e-3), (1.41e-3, 2e-3, 2.83e-3)),
    FixCase("pre-LN xavier -> dslm", dict(BASE_MODEL, n_layers=32, d_model=32, n_heads=2, norm_position="pre",
                                           init="xavier"),
            {"init": "dslm"}, (8e-3, 1.13e-2, 1.6e-2), (1.6e-2, 2.26e-2, 3.2e-2)),
    FixCase("llama N(0, 0.02^2) -> auto", dict(_LLAMA, n_layers=32, d_model=64, d_ff=192, norm_position="pre"),
            {"init": "auto"}, (2.83e-3, 4e-3, 5.66e-3), (2.83e-3, 4e-3, 5.66e-3)),
    FixCase("Q/K at 2x -> 1x", dict(BASE_MODEL, n_layers=32, d_model=32, n_heads=2, norm_position="pre", init="dslm",
                                    qk_gain=2.0),
            {"qk_gain": 1.0}, (1.6e-2, 2.26e-2, 3.2e-2), (1.6e-2, 2.26e-2, 3.2e-2)),
    # DeepScaleLM bounds the depth laws, so the α check is the only finding: α√q ≥ 2 at every layer (saturated)
    FixCase("Derf alpha 4 -> smaller alpha", dict(BASE_MODEL, n_layers=32, d_model=32, n_heads=2, norm_position="pre",
                                                  init="dslm", norm="derf", norm_alpha=4.0),
            {"norm_alpha": 0.786}, (1.6e-2, 2.26e-2, 3.2e-2), (1.6e-2, 2.26e-2, 3.2e-2), computed=("norm_alpha",),
            shared=("norm_position", "norm")),
    # at dropout 0 the tokens' correlation is the only finding at this depth (App. F's rank collapse); dropout 0.1 is
    # the fix, the initialisation left as it is
    FixCase("rank collapse -> dropout 0.1", dict(BASE_MODEL, n_layers=32, d_model=32, n_heads=2, norm_position="post",
                                                 init="xavier", dropout=0.0),
            {"dropout": 0.1}, (7.07e-4, 1e-3, 1.41e-3), (7.07e-4, 1e-3, 1.41e-3)),
)


class FixReading(Enum):
    """A case's outcome by the rule fixed before the runs (docs/results/experiments/doctor-fixes.md): the fixed
    twin's final validation loss lower than the flagged model's at every seed both trained at their best rates
    (*supported*), higher at every one (*contradicted*), or neither (*not separated*). Amended on 2026-11-30, after
    the first grids of one case had stalled on both sides: a model that trained at no rate tried loses to one that
    trained, and where neither trained the budget does not separate them."""

    SUPPORTED = "supported"
    CONTRADICTED = "contradicted"
    NOT_SEPARATED = "not separated"


@dataclass(frozen=True)
class FixOutcome:
    """What training measured for one case: each model's final validation loss at its best rate (the mean over the
    ``seeds`` compared: those both models trained at their best rates, or all of one model's where the other trained
    at no rate tried; None where the model trained at no rate tried), the fates of all its runs, where it was
    trained, and each model's best rate and its losses per seed there (seed as text, as JSON keys are)."""

    case: str
    flagged_loss: float | None
    fixed_loss: float | None
    flagged_fates: dict
    fixed_fates: dict
    seeds: int
    where: str
    flagged_lr: float | None = None
    fixed_lr: float | None = None
    flagged_by_seed: dict = field(default_factory=dict)
    fixed_by_seed: dict = field(default_factory=dict)

    @property
    def differences(self) -> dict[str, float]:
        """Seed → fixed − flagged final validation loss, over the seeds both have (negative: the fix helped)."""
        return {seed: self.fixed_by_seed[seed] - loss for seed, loss in self.flagged_by_seed.items()
                if seed in self.fixed_by_seed}

    @property
    def reading(self) -> FixReading:
        """The outcome by the rule fixed before the runs (:class:`FixReading`).

        Example:
            >>> FixOutcome("c", 4.0, 3.9, {}, {}, 2, "", 1e-3, 1e-3, {"0": 4.0, "1": 4.1}, {"0": 3.9, "1": 4.0}).reading
            <FixReading.SUPPORTED: 'supported'>
        """
        if self.flagged_loss is None or self.fixed_loss is None:
            if self.flagged_loss is None and self.fixed_loss is not None:
                return FixReading.SUPPORTED
            if self.fixed_loss is None and self.flagged_loss is not None:
                return FixReading.CONTRADICTED
            return FixReading.NOT_SEPARATED
        differences = list(self.differences.values())
        if differences and all(d < 0 for d in differences):
            return FixReading.SUPPORTED
        if differences and all(d > 0 for d in differences):
            return FixReading.CONTRADICTED
        return FixReading.NOT_SEPARATED

    def sentence(self) -> str:
        """The outcome in one sentence, e.g. "training evidence (doctor-fixes, …): flagged 4.210 (trained 6), fixed
        3.950 (trained 6) …; the fix lowered the final loss by 0.260 nats at every seed: supported"."""

        def one(loss, fates):
            said = fates_said(fates)
            return (("trained at no rate on both seeds" if loss is None else f"{loss:.3f}")
                    + (f" ({said})" if said else ""))

        seeds = f", {self.seeds} seeds at each model's best rate" if self.seeds else ""
        head = (f"training evidence ({self.where}{seeds}): flagged {one(self.flagged_loss, self.flagged_fates)}, "
                f"fixed {one(self.fixed_loss, self.fixed_fates)}")
        reading = f": {self.reading.value}"
        if self.flagged_loss is None and self.fixed_loss is None:
            return (head + "; neither model trained on both seeds at any rate tried, so this budget does not compare "
                    "them" + reading)
        if self.flagged_loss is None:
            return head + "; the fixed model trained where the flagged one did not" + reading
        if self.fixed_loss is None:
            return head + "; the fixed model did not train where the flagged one did" + reading
        if not self.differences:
            return head + "; the two models share no seed at their best rates, so they are not compared" + reading
        gap = self.flagged_loss - self.fixed_loss
        said = (f"; the fix lowered the final loss by {gap:.3f} nats" if gap > 0 else
                f"; the fix did not lower the final loss (it rose by {-gap:.3f} nats)")
        if self.reading is FixReading.NOT_SEPARATED and self.differences:
            said += ", not at every seed"
        return head + said + reading


def fates_said(fates: dict[str, int]) -> str:
    """A model's run fates in words, in the fates' alphabetical order.

    Args:
        fates: fate → number of runs.

    Returns:
        E.g. "4 stalled, 6 trained" ("" for no runs).

    Example:
        >>> fates_said({"trained": 6, "stalled": 4})
        '4 stalled, 6 trained'
    """
    return ", ".join(f"{n} {fate}" for fate, n in sorted(fates.items()))


def load_outcomes(path: Path = OUTCOMES_FILE) -> dict[str, FixOutcome]:
    """The measured outcomes by case name, read from ``path`` (JSON written by ``bench/fix_outcomes.py``); empty
    when the file does not exist (nothing measured yet).

    Args:
        path: the outcomes file.

    Returns:
        Case name → :class:`FixOutcome`.

    Raises:
        ValueError: the file is not a list of outcomes, holds a loss that is not finite, or a mean loss without
            its losses per seed (or the reverse).

    Example:
        >>> isinstance(load_outcomes(), dict)
        True
    """
    if not path.is_file():
        return {}
    rows = json.loads(path.read_text())
    if not isinstance(rows, list):
        raise ValueError(f"{path} must hold a list of outcomes")
    outcomes = {}
    for row in rows:
        outcome = FixOutcome(**row)
        for loss in (outcome.flagged_loss, outcome.fixed_loss, *outcome.flagged_by_seed.values(),
                     *outcome.fixed_by_seed.values()):
            if loss is not None and not math.isfinite(loss):
                raise ValueError(f"{path}: case {outcome.case!r} holds a loss that is not finite")
        for loss, by_seed in ((outcome.flagged_loss, outcome.flagged_by_seed), (outcome.fixed_loss,
                                                                                 outcome.fixed_by_seed)):
            if (loss is None) != (not by_seed):
                raise ValueError(f"{path}: case {outcome.case!r} has a mean loss without its losses per seed, or "
                                 "the reverse (rewrite it with bench/fix_outcomes.py)")
        outcomes[outcome.case] = outcome
    return outcomes


def fix_evidence(config: TransformerConfig, changes: dict,
                 outcomes: dict[str, FixOutcome] | None = None) -> tuple[str, ...]:
    """What training says of a recommendation of ``changes`` for ``config``: a sentence per matching case (its
    measured outcome, or that it is not measured), and one saying the whole was not measured where the recommendation
    changes more than a matching case's fix (each case trained its one change alone); or one sentence saying no case
    of its kind was trained.

    Args:
        config: the flagged model's configuration.
        changes: the recommendation's config changes.
        outcomes: the measured outcomes (:func:`load_outcomes` when None).

    Returns:
        Sentences, each naming its case.

    Example:
        >>> fix_evidence(TransformerConfig(norm_position="pre", init="dslm", qk_gain=2.0), {"qk_gain": 1.0}, {})
        ('Q/K at 2x -> 1x: not measured in training',)
    """
    outcomes = load_outcomes() if outcomes is None else outcomes
    matched = [case for case in FIX_CASES if case.matches(config, changes)]
    said = [f"{case.name}: " + (outcomes[case.name].sentence() if case.name in outcomes else NOT_MEASURED)
            for case in matched]
    changed = {key: value for key, value in changes.items() if value is not None}
    if matched and all(set(changed) - set(case.fix) for case in matched):  # more than any one case trained
        said.append("the recommendation as a whole (" + ", ".join(f"{k}={v}" for k, v in changed.items()) + "): "
                    f"{NOT_MEASURED} (each case above trained its own change alone)")
    return tuple(said) or (f"a fix of this kind: {NOT_MEASURED}",)


def outcomes_markdown(outcomes: dict[str, FixOutcome]) -> str:
    """The table "flagged → fixed" of every case, in :data:`FIX_CASES`' order: each model's best rate and final
    validation loss per seed (their mean), the paired differences and the reading; a case with no outcome yet is
    "not measured in training". ``bench/fix_outcomes.py`` writes it beside the experiment's page from the same
    outcomes the doctor reads.

    Args:
        outcomes: the measured outcomes by case name (:func:`load_outcomes`).

    Returns:
        A markdown page.

    Example:
        >>> outcomes_markdown({}).count(NOT_MEASURED) == len(FIX_CASES)
        True
    """

    def side(lr, mean, by_seed, fates) -> str:
        said = fates_said(fates)
        if mean is None:
            return f"trained at no rate tried ({said})"
        seeds = ", ".join(f"{v:.3f}" for _, v in sorted(by_seed.items(), key=lambda kv: int(kv[0])))
        return f"{lr:g}: {seeds} (mean {mean:.3f})"

    lines = ["# doctor-fixes: flagged → fixed", "",
             "Each case's flagged model and its twin with the doctor's fix, each at its own best learning rate: final "
             "validation loss per seed (mean), the fixed − flagged difference per seed, and the reading by the rule "
             "fixed before the runs (supported: the fixed twin lower at every seed; contradicted: higher at every "
             "seed; otherwise not separated); amended on 2026-11-30: a model that trained at no rate tried loses to "
             "one that trained, and where neither trained the case is not separated. Written by "
             "`bench/fix_outcomes.py` from the outcomes the doctor cites (`sigprop/analysis/fix_outcomes.json`).", "",
             "| case | flagged: best rate: final val per seed | fixed: best rate: final val per seed | fixed − flagged "
             "per seed | reading |", "|---|---|---|---|---|"]
    for case in FIX_CASES:
        o = outcomes.get(case.name)
        if o is None:
            lines.append(f"| {case.name} | – | – | – | {NOT_MEASURED} |")
            continue
        gaps = ", ".join(f"{d:+.3f}" for _, d in sorted(o.differences.items(), key=lambda kv: int(kv[0]))) or "–"
        lines.append(f"| {case.name} | {side(o.flagged_lr, o.flagged_loss, o.flagged_by_seed, o.flagged_fates)} | "
                     f"{side(o.fixed_lr, o.fixed_loss, o.fixed_by_seed, o.fixed_fates)} | {gaps} | "
                     f"{o.reading.value} |")
    return "\n".join(lines) + "\n"
