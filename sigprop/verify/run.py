"""Run several component sweeps and collect them into one report (the engine behind ``sigprop verify``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..core.jsonio import write_json_atomic
from .harness import NORMALISATION, ComponentResult, run_component
from .registry import COMPONENTS, available, load_spec

__all__ = ["run_verification", "VerificationReport"]


@dataclass
class VerificationReport:
    """Results of ``run_verification``: per component and quantity, percent-error percentiles and noise."""

    results: dict[str, ComponentResult]
    seconds: float
    quick: bool
    seed: int
    skipped: list = field(default_factory=list)

    def to_json(self) -> dict:
        """The JSON of ``sigprop verify --json``:
        {"components": {NAME: {QUANTITY: {"p50", "p90", "p99", "n_configs", "noise_p50", "noise_p99", "paper"?}}},
         "seconds": …, "normalisation": {QUANTITY: text}, "details": {NAME: {"seconds", "note", "ranges", "worst"}}}.
        All errors are in percent."""
        details = {}
        for name, r in self.results.items():
            details[name] = {
                "seconds": r.seconds,
                "note": r.spec.note,
                "ranges": {p.name: {"lo": p.lo, "hi": p.hi, "scale": p.scale, "doc": p.doc} for p in r.spec.params},
                "worst": r.worst(),
            }
        return {
            "components": {name: r.summary() for name, r in self.results.items()},
            "seconds": self.seconds,
            "quick": self.quick,
            "seed": self.seed,
            "normalisation": NORMALISATION,
            "details": details,
        }

    def write_json(self, path: str | os.PathLike) -> Path:
        """Write the JSON atomically (temporary file in the same folder, then rename)."""
        return write_json_atomic(path, self.to_json(), indent=2)


def resolve_components(names: list[str] | None) -> list[str]:
    """Validate component names (``None``/empty → every available component)."""
    if not names:
        return available()
    unknown = [n for n in names if n not in COMPONENTS]
    if unknown:
        raise ValueError(f"unknown component(s) {', '.join(unknown)}; choose from: {', '.join(COMPONENTS)}")
    return list(dict.fromkeys(names))


def run_verification(names: list[str] | None = None, quick: bool = False, seed: int = 0,
                     n_configs: int | None = None, approx: str | None = None,
                     on_start: Callable[[str, int], None] | None = None,
                     on_progress: Callable[[int], None] | None = None) -> VerificationReport:
    """Sweep the named components (all by default), scored against the rules' ``approx`` approximation when given
    (the Monte Carlo draws are the same for every approximation). ``on_start(name, n)`` announces each component
    and its number of configurations; ``on_progress(k)`` reports k more configurations done."""
    t0 = time.perf_counter()
    results = {}
    for name in resolve_components(names):
        spec = load_spec(name, approx)
        n = n_configs or (spec.quick_configs if quick else spec.n_configs)
        if on_start:
            on_start(name, n)
        results[spec.name] = run_component(spec, quick=quick, seed=seed, n_configs=n, progress=on_progress)
    return VerificationReport(results, time.perf_counter() - t0, quick, seed)
