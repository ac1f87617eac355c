"""One track point: every layer's statistics on the probe batch at one training step, and their diagnosis.

The columns are the stream after each layer (the profile's ``"layer"`` rows, in layer order): forward variance and
token correlation, gradient variance and gradient correlation (:mod:`sigprop.measurement.hooks` for the
definitions), and for a sigprop model each layer's normalised attention entropy. A point is written as one JSON line
(:meth:`TrackPoint.to_json`), a value that is not finite as ``null``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.jsonio import finite_or_null

__all__ = ["QUANTITIES", "Columns", "DiagnosisSummary", "TrackPoint", "columns_of"]

#: The statistics of every point, in the order they are written and drawn.
QUANTITIES = ("fwd_var", "fwd_corr", "grad_var", "grad_corr")


@dataclass(frozen=True)
class Columns:
    """Every layer's statistics: ``layers`` and, per quantity of :data:`QUANTITIES`, a value per layer (``None`` for
    a quantity that is not available, e.g. the gradient where the theory gives only the forward sweep)."""

    layers: tuple[int, ...]
    fwd_var: tuple[float, ...] | None
    fwd_corr: tuple[float, ...] | None
    grad_var: tuple[float, ...] | None
    grad_corr: tuple[float, ...] | None

    def to_dict(self) -> dict:
        """``{"layers": [...], "fwd_var": [...], ...}`` as lists (JSON's order of the line format)."""
        out: dict = {"layers": list(self.layers)}
        for q in QUANTITIES:
            values = getattr(self, q)
            out[q] = None if values is None else list(values)
        return out

    def scalars(self, prefix: str = "sigprop", extra: dict | None = None) -> dict[str, float]:
        """Every value as a named scalar, ``<prefix>/<quantity>/layer_07`` (layers zero-padded to two digits or the
        width of the deepest); ``extra`` maps more quantities to a value per layer; NaN kept.

        Example:
            >>> Columns((0, 1), (1.0, 2.0), None, None, None).scalars()
            {'sigprop/fwd_var/layer_00': 1.0, 'sigprop/fwd_var/layer_01': 2.0}
        """
        width = max(2, len(str(max(self.layers, default=0))))
        named = [(q, getattr(self, q)) for q in QUANTITIES] + list((extra or {}).items())
        return {f"{prefix}/{q}/layer_{layer:0{width}d}": float(v) for q, values in named if values is not None
                for layer, v in zip(self.layers, values, strict=True)}

    @classmethod
    def from_dict(cls, data: dict) -> Columns:
        """The columns of a JSON line or prediction file (``null`` read back as NaN)."""
        def floats(values):
            return None if values is None else tuple(float("nan") if v is None else float(v) for v in values)

        return cls(tuple(int(x) for x in data["layers"]), *(floats(data.get(q)) for q in QUANTITIES))


def columns_of(profile) -> Columns:
    """The ``"layer"`` rows of a :class:`~sigprop.core.profile.Profile` as :class:`Columns`, in layer order.

    Args:
        profile: a measured or predicted profile.

    Returns:
        Every layer's four statistics.

    Example:
        >>> from sigprop.core.profile import Profile, Row
        >>> rows = (Row(1, "layer", 0, 2.0, 0.5, 1e-3, 0.1), Row(0, "layer", 0, 1.0, 0.4, 2e-3, 0.2))
        >>> columns_of(Profile("measured", {}, rows)).fwd_var
        (1.0, 2.0)
    """
    rows = sorted(profile.site("layer"), key=lambda r: r.layer)
    return Columns(tuple(r.layer for r in rows), *(tuple(float(getattr(r, q)) for r in rows) for q in QUANTITIES))


@dataclass(frozen=True)
class DiagnosisSummary:
    """The diagnosis of a point's profile (:func:`sigprop.analysis.diagnosis.diagnose`) in words: every finding,
    the flagged ones, and the hint."""

    flagged: bool
    findings: tuple[str, ...]
    flagged_findings: tuple[str, ...]
    hint: str | None

    @classmethod
    def of(cls, diagnosis) -> DiagnosisSummary:
        """The summary of a :class:`~sigprop.analysis.diagnosis.Diagnosis`."""
        return cls(diagnosis.flagged, tuple(diagnosis.lines()),
                   tuple(f.describe() for f in diagnosis.findings if f.flagged), diagnosis.hint)

    def to_dict(self) -> dict:
        return {"flagged": self.flagged, "findings": list(self.findings),
                "flagged_findings": list(self.flagged_findings), "hint": self.hint}

    @classmethod
    def from_dict(cls, data: dict) -> DiagnosisSummary:
        return cls(bool(data["flagged"]), tuple(data["findings"]), tuple(data["flagged_findings"]), data.get("hint"))


@dataclass(frozen=True)
class TrackPoint:
    """The statistics of the probe batch at one step (module docstring).

    Attributes:
        step: the training step (optimiser steps taken).
        columns: every layer's four statistics.
        attn_entropy: each layer's normalised attention entropy (a sigprop model), else ``None``.
        diagnosis: the diagnosis of the measured profile.
    """

    step: int
    columns: Columns
    attn_entropy: tuple[float, ...] | None
    diagnosis: DiagnosisSummary

    def to_json(self) -> dict:
        """The point's JSON line (``track.jsonl``): ``step``, ``layers``, the quantities, ``attn_entropy`` (sigprop
        models only) and ``diagnosis``; non-finite values as ``null``."""
        line: dict = {"step": self.step, **self.columns.to_dict()}
        if self.attn_entropy is not None:
            line["attn_entropy"] = list(self.attn_entropy)
        line["diagnosis"] = self.diagnosis.to_dict()
        return finite_or_null(line)

    @classmethod
    def from_json(cls, line: dict) -> TrackPoint:
        """A point read back from its JSON line."""
        entropy = line.get("attn_entropy")
        return cls(int(line["step"]), Columns.from_dict(line),
                   None if entropy is None else tuple(float("nan") if v is None else float(v) for v in entropy),
                   DiagnosisSummary.from_dict(line["diagnosis"]))

    def scalars(self) -> dict[str, float]:
        """Every statistic as a named scalar (:meth:`Columns.scalars`: ``sigprop/fwd_var/layer_07`` …, with
        ``attn_entropy`` where measured), plus ``sigprop/flagged`` (1.0 when the diagnosis flags something)."""
        extra = {} if self.attn_entropy is None else {"attn_entropy": self.attn_entropy}
        return {**self.columns.scalars("sigprop", extra), "sigprop/flagged": 1.0 if self.diagnosis.flagged else 0.0}
