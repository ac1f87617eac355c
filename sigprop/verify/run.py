"""Run several component sweeps and collect them into one report (the engine behind ``sigprop verify``)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core.jsonio import write_json_atomic
from ..core.progress import Progress, tasks
from ..core.validate import integer_value
from .harness import NORMALISATION, ComponentResult, run_component
from .registry import COMPONENTS, default_sweep, load_spec

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
    """Validate component names (``None``/empty → the default sweep: every available component but those verified
    on request, :data:`~sigprop.verify.registry.ON_REQUEST`)."""
    if not names:
        return default_sweep()
    unknown = [n for n in names if n not in COMPONENTS]
    if unknown:
        raise ValueError(f"unknown component(s) {', '.join(unknown)}; choose from: {', '.join(COMPONENTS)}")
    return list(dict.fromkeys(names))


def run_verification(names: list[str] | None = None, quick: bool = False, seed: int = 0,
                     n_configs: int | None = None, approx: str | None = None,
                     progress: Progress | None = None) -> VerificationReport:
    """Sweep the named components (all by default), scored against the rules' ``approx`` approximation when given
    (the Monte Carlo draws are the same for every approximation), each over ``n_configs`` configurations (default:
    the component's full or ``quick`` sweep). ``progress`` gets one task per component. Names, ``approx``, ``seed`` and
    ``n_configs`` are checked before any sweep runs (``ValueError``)."""
    n_configs = None if n_configs is None else integer_value(n_configs, "--configs", 1)
    seed = integer_value(seed, "--seed", 0)
    specs = [load_spec(name, approx) for name in resolve_components(names)]
    t0 = time.perf_counter()
    results = {}
    for spec in specs:
        n = n_configs or (spec.quick_configs if quick else spec.n_configs)
        display, measuring = tasks(progress), {}
        display.task(f"verify {spec.name}: the rules predict {n} configurations", None)

        def measure_task(display=display, name=spec.name, n=n, measuring=measuring):
            measuring["tick"] = display.task(f"verify {name}: measured", n)

        results[spec.name] = run_component(spec, quick=quick, seed=seed, n_configs=n, on_predicted=measure_task,
                                           progress=lambda k, measuring=measuring: measuring["tick"](k))
    return VerificationReport(results, time.perf_counter() - t0, quick, seed)
