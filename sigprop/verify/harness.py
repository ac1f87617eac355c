"""Run a component's verification sweep: draw configurations over its ranges, simulate them in shape-sharing
batches, compare with the rules and summarise the errors as percentiles (Kedia et al. App. D, Table 21)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import qmc

from .spec import QUANTITIES, Budget, ComponentSpec, Estimate

__all__ = ["sample_configs", "run_component", "ComponentResult", "error_of", "NORMALISATION", "ROUNDOFF"]

#: Resolution of the float32 simulations, in percent (1e-5 relative): a quantity that the module fixes by
#: construction (LayerNorm's mean and variance) has a standard error near zero, and its float32 rounding error must
#: not count as a deviation beyond the Monte Carlo noise.
ROUNDOFF = 1e-3

#: How each quantity's error is normalised (percent). Reported in the JSON.
NORMALISATION = {
    "mean": "|pred - meas| / max(|meas|, sqrt(meas var)): a mean near zero is judged against the spread",
    "var": "|pred - meas| / meas",
    "corr": "|pred - meas| of the token correlation, i.e. the token covariance error divided by the measured "
            "variance (the variance scale), in percentage points",
    "grad_var": "|pred - meas| / meas",
    "grad_corr": "|pred - meas| of the gradient token correlation (covariance error / measured variance)",
}


def sample_configs(spec: ComponentSpec, n: int, seed: int) -> dict[str, np.ndarray]:
    """``n`` configurations: every corner of the parameter box (or a random quarter-budget subset of them when
    there are too many), the rest from a scrambled Sobol sequence, so the ranges are covered including corners."""
    k = len(spec.params)
    rng = np.random.default_rng(seed)
    max_corners = max(1, n // 4)
    if 2**k <= max_corners:
        corners = np.array(list(itertools.product((0.0, 1.0), repeat=k)))
    else:
        idx = rng.choice(2**k, size=max_corners, replace=False)
        corners = ((idx[:, None] >> np.arange(k)[None, :]) & 1).astype(np.float64)
    m = max(n - len(corners), 0)
    if m:
        sobol = qmc.Sobol(d=k, scramble=True, seed=seed).random_base2(int(np.ceil(np.log2(m))))[:m]
        u = np.vstack([corners, sobol])
    else:
        u = corners[:n]
    return {p.name: p.from_unit(u[:, i]) for i, p in enumerate(spec.params)}


def error_of(quantity: str, pred: np.ndarray, meas: Estimate, meas_var: np.ndarray | None) -> tuple:
    """Percent error and percent Monte Carlo noise (one standard error) of ``quantity``, normalised as in
    :data:`NORMALISATION`."""
    diff = np.abs(pred - meas.value)
    if quantity == "mean":
        scale = np.maximum(np.abs(meas.value), np.sqrt(meas_var))
    elif quantity in ("var", "grad_var"):
        scale = np.abs(meas.value)
    else:
        scale = np.ones_like(meas.value)
    return 100.0 * diff / scale, 100.0 * meas.se / scale


@dataclass
class ComponentResult:
    spec: ComponentSpec
    params: dict
    predicted: dict
    measured: dict
    errors: dict
    noise: dict
    seconds: float

    @property
    def n_configs(self) -> int:
        return len(next(iter(self.params.values())))

    def summary(self) -> dict:
        out = {}
        for q in self.spec.quantities:
            e, s = self.errors[q], self.noise[q]
            ok = np.isfinite(e)
            p50, p90, p99 = np.percentile(e[ok], [50, 90, 99]) if ok.any() else (np.nan,) * 3
            n50, n99 = np.percentile(s[ok], [50, 99]) if ok.any() else (np.nan,) * 2
            out[q] = {"p50": float(p50), "p90": float(p90), "p99": float(p99), "n_configs": int(ok.sum()),
                      # a rule or a measurement that is not finite fails the targets (it is not left out)
                      "not_finite": int((~ok).sum()),
                      "noise_p50": float(n50), "noise_p99": float(n99),
                      # Share of configurations whose error exceeds 3 standard errors. For an exact rule this is
                      # P(|t| > 3) under Student's t with replicates − 1 degrees of freedom (≈ 2% for 8 replicates,
                      # the scatter of the standard errors included); more reveals approximation error.
                      "beyond_3se": float(np.mean(e[ok] > 3.0 * s[ok] + ROUNDOFF))}
            if q in self.spec.paper:
                out[q]["paper"] = list(self.spec.paper[q])
        return out

    def worst(self, n: int = 3) -> list[dict]:
        """The ``n`` worst configurations per quantity, with their parameters: where a rule breaks."""
        rows = []
        for q in self.spec.quantities:
            e = np.nan_to_num(self.errors[q], nan=np.inf)
            for i in np.argsort(-e)[:n]:
                rows.append({"quantity": q, "error": float(e[i]),
                             "predicted": float(self.predicted[q][i]),
                             "measured": float(self.measured[q].value[i]),
                             "params": {k: float(v[i]) for k, v in self.params.items()}})
        return rows


def _groups(spec: ComponentSpec, params: dict, max_group, budget: Budget):
    if spec.shape_params:
        keys = np.stack([params[p] for p in spec.shape_params], axis=1)
        _, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
    else:
        inverse = np.zeros(len(next(iter(params.values()))), dtype=int)
    for g in np.unique(inverse):
        idx = np.flatnonzero(inverse == g)
        size = max_group({p: params[p][idx[0]] for p in spec.shape_params}, budget) if callable(max_group) \
            else max_group
        size = max(1, int(size))
        for start in range(0, len(idx), size):
            yield idx[start:start + size]


def run_component(spec: ComponentSpec, quick: bool = False, seed: int = 0, n_configs: int | None = None,
                  progress: Callable[[int], None] | None = None, max_group: int | None = None,
                  replicates: int | None = None, on_predicted: Callable[[], None] | None = None) -> ComponentResult:
    """Sweep one component. ``progress(k)`` is called after every batch with the number of configurations done;
    ``on_predicted()`` once the rules have predicted every configuration (one call, minutes for the sampled rules),
    before the Monte Carlo measurement starts; ``replicates`` independent replicates per configuration give each
    standard error (default 8; a spec whose simulator draws a fixed number, ``spec.replicates``, refuses another)."""
    if spec.replicates is not None and replicates not in (None, spec.replicates):
        raise ValueError(f"{spec.name}'s simulator draws {spec.replicates} replicates per configuration (each a "
                         f"long sequence): replicates={replicates} cannot be honoured")
    replicates = replicates or spec.replicates or 8
    n = n_configs or (spec.quick_configs if quick else spec.n_configs)
    budget = Budget(scale=spec.quick_scale if quick else 1.0, replicates=replicates)
    params = sample_configs(spec, n, seed)
    gen = torch.Generator().manual_seed(seed)
    measured = {q: Estimate(np.full(n, np.nan), np.full(n, np.nan)) for q in spec.quantities}
    meas_var = np.full(n, np.nan)
    # Modules that draw from torch's global generator (nn.Dropout, dropout under vmap, the default initialisation
    # of a module a rule builds) would otherwise measure with masks that change from process to process (so does its
    # seed) and with the components swept before: the sweep seeds it too, and gives it back as it found it.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        predicted = {q: np.asarray(v, dtype=np.float64) for q, v in spec.predict(params).items()}
        if on_predicted:
            on_predicted()
        t0 = time.perf_counter()
        for idx in _groups(spec, params, max_group or spec.max_group, budget):
            sub = {k: v[idx] for k, v in params.items()}
            with torch.no_grad() if "grad_var" not in spec.quantities else torch.enable_grad():
                est = spec.simulate(sub, budget, gen)
            for q in spec.quantities:
                measured[q].value[idx] = est[q].value
                measured[q].se[idx] = est[q].se
            if "var" in est:
                meas_var[idx] = est["var"].value
            if progress:
                progress(len(idx))
    seconds = time.perf_counter() - t0
    errors, noise = {}, {}
    for q in spec.quantities:
        errors[q], noise[q] = error_of(q, np.broadcast_to(predicted[q], (n,)), measured[q], meas_var)
    return ComponentResult(spec, params, {q: np.broadcast_to(predicted[q], (n,)) for q in spec.quantities},
                           measured, errors, noise, seconds)


assert set(NORMALISATION) == set(QUANTITIES)
