"""Profile: the per-layer statistics of a model, predicted or measured, in one shape (ARCHITECTURE.md, "Profiles and
comparison").

A row is one *site* of one layer: ``layer`` is the transformer layer's index (``-1`` = the embedding output) and
``site`` says where inside it: ``"layer"`` is the hidden stream after the layer's last residual add (the rows of
ARCHITECTURE.md's Profile JSON), ``"attn"`` / ``"ffn"`` / ``"cross"`` the output of that block's branch before it is
scaled and added to the stream. Each row carries the forward mean, variance and token-to-token correlation and the
variance and token correlation of the gradient of the loss with respect to that tensor. Predicted and measured profiles
share rows, so :func:`sigprop.compare` is a join on (layer, site).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .jsonio import finite_or_null, json_number, write_csv_atomic, write_json_atomic
from .outputs import StrPath

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Profile", "Row", "QUANTITIES", "SPREAD", "SITES"]

#: The statistics of a row, in ARCHITECTURE.md's Profile JSON names.
QUANTITIES = ("fwd_mean", "fwd_var", "fwd_corr", "grad_var", "grad_corr")
#: The predicted seed-to-seed standard deviations of a row's log-variances (``predict(..., spread=True)``,
#: :mod:`sigprop.theory.spread`): NaN, and absent from the JSON, where they were not asked.
SPREAD = ("fwd_var_log_sd", "grad_var_log_sd")
#: Site names, in the order they occur inside a layer.
SITES = ("input", "attn", "cross", "ffn", "layer")


@dataclass(frozen=True)
class Row:
    """The statistics of one site; a quantity that was not computed is NaN. ``fwd_var_log_sd`` and
    ``grad_var_log_sd`` (:data:`SPREAD`) are a prediction's seed-to-seed standard deviations of log σ²_x and of
    log σ²_g relative to the top layer (:mod:`sigprop.theory.spread`), NaN unless asked."""

    layer: int
    site: str
    fwd_mean: float = math.nan
    fwd_var: float = math.nan
    fwd_corr: float = math.nan
    grad_var: float = math.nan
    grad_corr: float = math.nan
    fwd_var_log_sd: float = math.nan
    grad_var_log_sd: float = math.nan

    def to_dict(self) -> dict:
        out = {"layer": self.layer, "site": self.site}
        for q in QUANTITIES:
            out[q] = json_number(getattr(self, q))
        for q in SPREAD:  # written only where predicted
            if not math.isnan(getattr(self, q)):
                out[q] = json_number(getattr(self, q))
        return out

    @classmethod
    def from_dict(cls, d: dict) -> Row:
        return cls(int(d["layer"]), str(d.get("site", "layer")),
                   **{q: (math.nan if d.get(q) is None else float(d[q])) for q in (*QUANTITIES, *SPREAD)})


@dataclass(frozen=True)
class Profile:
    """Rows of per-site statistics plus where they came from.

    What :func:`sigprop.predict` and :func:`sigprop.measure` both return, in one shape, so that
    :func:`sigprop.compare` is a join on (layer, site) (module docstring; ARCHITECTURE.md, "Profiles and
    comparison"). Its JSON (:meth:`to_json`) is ``{"kind", "config", "meta", "per_layer", "per_site"}``.

    Attributes:
        kind: ``"predicted"`` or ``"measured"``.
        config: the model configuration as a dict (``TransformerConfig.to_dict()`` for a sigprop model).
        rows: one :class:`Row` per (layer, site): ``layer`` (−1 = the embedding output), ``site`` and the
            statistics ``fwd_mean``, ``fwd_var``, ``fwd_corr``, ``grad_var``, ``grad_corr`` (NaN where not computed).
        meta: the boundaries and settings used (e.g. where the output-gradient moments came from, the number of
            seeds, the init plan the rules read: ``meta["plan"]``).

    Raises:
        ValueError: a ``kind`` other than the two, or two rows of the same (layer, site).

    Example:
        >>> from sigprop import Profile
        >>> from sigprop.core.profile import Row
        >>> profile = Profile("measured", {}, (Row(1, "layer", fwd_var=2.0), Row(0, "layer", fwd_var=1.0),
        ...                                     Row(0, "ffn", fwd_var=0.5)))
        >>> profile.column("fwd_var")  # the "layer" rows, ordered by layer
        [1.0, 2.0]
        >>> [(r.layer, r.site) for r in Profile.from_json(profile.to_json()).rows]  # JSON round trip
        [(1, 'layer'), (0, 'layer'), (0, 'ffn')]
    """

    kind: str
    config: dict
    rows: tuple[Row, ...]
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in ("predicted", "measured"):
            raise ValueError(f"Profile.kind must be 'predicted' or 'measured' (got {self.kind!r})")
        keys = [(r.layer, r.site) for r in self.rows]
        if len(set(keys)) != len(keys):
            raise ValueError("Profile rows must have unique (layer, site) pairs")

    def site(self, name: str = "layer") -> list[Row]:
        """The rows of one site, ordered by layer."""
        return sorted((r for r in self.rows if r.site == name), key=lambda r: r.layer)

    def column(self, quantity: str, site: str = "layer") -> list[float]:
        """One quantity (:data:`QUANTITIES`, or a :data:`SPREAD` column) along the layers of one site."""
        if quantity not in QUANTITIES + SPREAD:
            raise ValueError(f"quantity must be one of {', '.join(QUANTITIES + SPREAD)} (got {quantity!r})")
        return [getattr(r, quantity) for r in self.site(site)]

    @property
    def has_spread(self) -> bool:
        """Whether any row carries a predicted seed-to-seed spread (:data:`SPREAD`)."""
        return any(not math.isnan(getattr(r, q)) for r in self.rows for q in SPREAD)

    def lookup(self) -> dict[tuple[int, str], Row]:
        return {(r.layer, r.site): r for r in self.rows}

    def to_json(self) -> dict:
        """The Profile JSON (ARCHITECTURE.md): ``per_layer`` holds the ``"layer"`` rows (and the input row as layer -1),
        ``per_site`` every row."""
        main = [r.to_dict() for r in self.rows if r.site in ("layer", "input")]
        return {"kind": self.kind, "config": self.config, "meta": finite_or_null(self.meta),  # NaN SEs: null
                "per_layer": sorted(main, key=lambda d: d["layer"]),
                "per_site": [r.to_dict() for r in self.rows]}

    @classmethod
    def from_json(cls, data: dict) -> Profile:
        """Inverse of :meth:`to_json` (plain JSON; nothing is unpickled)."""
        if not isinstance(data, dict) or "kind" not in data:
            raise ValueError("not a sigprop profile: expected an object with 'kind' and 'per_site' or 'per_layer'")
        rows = data.get("per_site") or [dict(r, site=r.get("site", "layer")) for r in data.get("per_layer", [])]
        return cls(data["kind"], dict(data.get("config", {})), tuple(Row.from_dict(r) for r in rows),
                   dict(data.get("meta", {})))

    def write_json(self, path: StrPath) -> None:
        """Write atomically (temporary file, then rename)."""
        write_json_atomic(path, self.to_json())

    def records(self) -> list[dict]:
        """One dict per site, ordered by layer then site (:data:`SITES` order): ``layer``, ``site`` and a key per
        statistic (:data:`QUANTITIES`, and :data:`SPREAD` when predicted: :attr:`has_spread`; NaN where it was not
        computed)."""
        order = {name: i for i, name in enumerate(SITES)}
        rows = sorted(self.rows, key=lambda r: (r.layer, order.get(r.site, len(order)), r.site))
        columns = QUANTITIES + SPREAD if self.has_spread else QUANTITIES
        return [{"layer": r.layer, "site": r.site, **{q: getattr(r, q) for q in columns}} for r in rows]

    def to_frame(self) -> pd.DataFrame:
        """The profile as a pandas ``DataFrame``: a row per site, a column per statistic (:meth:`records`), as mup's
        coordinate check tabulates its activations.

        Returns:
            A ``DataFrame`` with columns ``layer``, ``site``, ``fwd_mean``, ``fwd_var``, ``fwd_corr``, ``grad_var``,
            ``grad_corr``.

        Raises:
            ImportError: pandas is not installed (``pip install pandas``).

        Example:
            >>> profile = Profile("measured", {}, (Row(0, "layer", 0.0, 1.0, 0.5, 2e-3, 0.1),))
            >>> profile.to_frame()[["layer", "fwd_var"]].values.tolist()  # doctest: +SKIP
            [[0, 1.0]]
        """
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Profile.to_frame needs pandas: pip install pandas") from None
        columns = QUANTITIES + SPREAD if self.has_spread else QUANTITIES
        return pd.DataFrame.from_records(self.records(), columns=["layer", "site", *columns])

    def write_csv(self, path: StrPath) -> None:
        """Write :meth:`records` as CSV (a header row, a row per site; NaN as an empty cell), atomically."""
        write_csv_atomic(path, self.records())

    @classmethod
    def read_json(cls, path: StrPath) -> Profile:
        with open(path, encoding="utf-8") as f:
            return cls.from_json(json.load(f))
