"""What a component's verification sweep declares: its parameter ranges, how to simulate it, how to predict it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Param", "Estimate", "ComponentSpec", "Budget", "QUANTITIES"]

#: The quantities a sweep can report, in display order.
QUANTITIES = ("mean", "var", "corr", "grad_var", "grad_corr")


@dataclass(frozen=True)
class Param:
    """One swept parameter and its range (Kedia et al. Table 22 unless ``doc`` says otherwise).

    ``scale`` is "lin" or "log" (log-uniform draws). ``levels`` > 0 makes the parameter discrete: it takes
    ``levels`` values spaced on ``scale`` between ``lo`` and ``hi`` inclusive (used for shapes, so that configurations
    sharing a shape are simulated as one batched tensor). ``values`` gives an explicit list instead.
    """

    name: str
    lo: float
    hi: float
    scale: str = "lin"
    levels: int = 0
    integer: bool = False
    values: tuple = ()
    doc: str = ""

    def grid(self) -> np.ndarray | None:
        if self.values:
            return np.asarray(self.values, dtype=np.float64)
        if self.levels <= 0:
            return None
        if self.scale == "log":
            g = np.geomspace(self.lo, self.hi, self.levels)
        else:
            g = np.linspace(self.lo, self.hi, self.levels)
        return np.unique(np.round(g)) if self.integer else g

    def from_unit(self, u: np.ndarray) -> np.ndarray:
        """Map u ∈ [0, 1] to the parameter's range (u = 0 and u = 1 give the endpoints: the corners)."""
        grid = self.grid()
        if grid is not None:
            idx = np.minimum((u * len(grid)).astype(int), len(grid) - 1)
            return grid[idx]
        if self.scale == "log":
            v = np.exp(np.log(self.lo) + u * (np.log(self.hi) - np.log(self.lo)))
        else:
            v = self.lo + u * (self.hi - self.lo)
        return np.round(v) if self.integer else v


@dataclass
class Estimate:
    """A Monte Carlo estimate per configuration: value and standard error (from independent replicates)."""

    value: np.ndarray
    se: np.ndarray


@dataclass(frozen=True)
class Budget:
    """How much Monte Carlo work a simulation may spend: ``scale`` multiplies every sample count (``--quick``
    uses a smaller scale), ``replicates`` is the number of independent replicates behind each standard error."""

    scale: float = 1.0
    replicates: int = 8

    def samples(self, n: int, minimum: int = 1) -> int:
        return max(minimum, int(round(n * self.scale)))


Simulator = Callable[[dict, Budget, "object"], dict]
Predictor = Callable[[dict], dict]


@dataclass(frozen=True)
class ComponentSpec:
    """A component's verification: ranges, a batched simulator of the real module and the rule's prediction.

    ``simulate(params, budget, generator)`` receives a dict of float64 arrays (one entry per configuration, all
    sharing the values of ``shape_params``) and returns {quantity: Estimate}. ``predict(params)`` returns
    {quantity: array}. ``paper`` holds Table 21's [p50, p90, p99] percent errors for comparison.
    ``n_configs`` is the full-sweep size and ``quick_configs`` the ``--quick`` one; at most ``max_group``
    configurations are simulated as one tensor (a callable receives the shape parameters of the group and the
    budget, and returns the bound: specs whose memory grows with a shape bound it there).
    """

    name: str
    title: str
    params: tuple[Param, ...]
    quantities: tuple[str, ...]
    simulate: Simulator
    predict: Predictor
    shape_params: tuple[str, ...] = ()
    paper: dict = field(default_factory=dict)
    n_configs: int = 1200
    quick_configs: int = 48
    quick_scale: float = 0.25
    max_group: int | Callable[[dict], int] = 64
    note: str = ""
    replicates: int | None = None  # a simulator that draws a fixed number of replicates (None: the budget's)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)
