"""The theory's profile of the model being monitored, at the first point: what every layer's statistics should be
for the model as it is (its weights' standard deviations) on the probe batch.

Available for a sigprop model (its own config and :meth:`InitPlan.from_model <sigprop.model.init.InitPlan.from_model>`)
and for a Hugging Face model of a mapped family (:func:`sigprop.hf.config_map.from_hf` and the plan its weights show,
:func:`sigprop.hf.weights.read_hf_plan`); any other model has no theory, and :class:`TheoryResult` says why. Where
the backward sweep fails (logits of variance ~1e10 in a model without normalisation overflow the head's gradient
formula) the forward profile is kept alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .point import Columns, columns_of

__all__ = ["TheoryResult", "initial_theory"]

_FAILURES = (ValueError, FloatingPointError, OverflowError)


@dataclass(frozen=True)
class TheoryResult:
    """The theory's columns (``None``: no theory) and ``note``, what it could not give (``None``: everything)."""

    columns: Columns | None
    note: str | None


def _first_line(err: Exception) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _sweeps(prediction, mapped: str | None = None) -> TheoryResult:
    """The profile of ``prediction()``, both sweeps, or the forward one where the backward fails; ``mapped``: what
    the model's mapping leaves out, kept in the note."""
    forward_only = None
    with np.errstate(over="ignore", invalid="ignore"):
        try:
            profile = prediction().profile()
        except _FAILURES as exc:
            forward_only = f"gradient theory unavailable: {_first_line(exc)}; forward theory only"
            try:
                profile = prediction().profile(gradients=False)
            except _FAILURES as exc2:
                return TheoryResult(None, f"no theory: {_first_line(exc2)}")
    columns = columns_of(profile)
    if forward_only is not None:  # no gradient theory: nothing to draw, rather than the zeros of a skipped sweep
        columns = Columns(columns.layers, columns.fwd_var, columns.fwd_corr, None, None)
    return TheoryResult(columns, "; ".join(n for n in (mapped, forward_only) if n) or None)


def _hf_prediction(model, batch):
    """(a callable giving the Prediction of a mapped Hugging Face model on its probe batch, what the mapping and the
    plan leave out), or why there is none."""
    import warnings

    from ..analysis.experiment import batch_prediction
    from ..data.mlm import causal_lm_labels
    from ..hf.config_map import from_hf
    from ..hf.weights import read_hf_plan
    from ..measurement.adapters import head_of
    from ..model.batch import Batch

    try:
        with warnings.catch_warnings(record=True) as said:  # what the mapping leaves out: the theory's note
            warnings.simplefilter("always")
            config = from_hf(model)
        plan = read_hf_plan(model, config)
        probe = Batch.from_any(batch, causal=head_of(model) == "causal_lm")
    except (ValueError, NotImplementedError, ImportError) as err:
        return f"no theory: {_first_line(err)}"
    if probe.padding_mask is not None and not bool(probe.padding_mask.all()):
        return "no theory: the theory of a Hugging Face model reads unpadded probe batches"
    if probe.labels is None:
        if head_of(model) != "causal_lm":
            return "no theory: the probe batch has no labels"
        probe = probe.with_labels(causal_lm_labels(probe.inputs))
    data = {k: v.cpu() for k, v in probe.to_dict().items() if k != "padding_mask"}
    notes = [str(w.message) for w in said] + list(plan.notes.get("approximations", ()))
    return (lambda: batch_prediction(config, data, plan=plan)), "; ".join(notes) or None


def initial_theory(model, batch) -> TheoryResult:
    """The theory's columns of ``model`` on ``batch`` (module docstring).

    Args:
        model: the monitored model (unwrapped).
        batch: its probe batch, on the CPU (a :class:`~sigprop.model.batch.Batch` or sigprop's dict for a sigprop
            model; any batch :meth:`Batch.from_any <sigprop.model.batch.Batch.from_any>` reads for a Hugging Face
            model).

    Returns:
        The columns, or ``None`` with the reason in ``note``.
    """
    from ..analysis.experiment import batch_prediction
    from ..measurement.adapters import is_hf_model
    from ..model.batch import Batch
    from ..model.config import TransformerConfig

    if isinstance(getattr(model, "config", None), TransformerConfig) and callable(getattr(model, "sites", None)):
        if not isinstance(batch, dict | Batch):
            return TheoryResult(None, "no theory: a sigprop model's theory reads its batch (a Batch or its dict)")
        return _sweeps(lambda: batch_prediction(model, batch))
    if is_hf_model(model):
        prediction = _hf_prediction(model, batch)
        if isinstance(prediction, str):
            return TheoryResult(None, prediction)
        return _sweeps(*prediction)
    return TheoryResult(None, f"no theory: {type(model).__name__} is neither a sigprop model nor a Hugging Face "
                              "model of a mapped family")
