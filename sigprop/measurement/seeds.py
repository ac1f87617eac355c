"""Measuring independently initialised models of one config: each seed's model drawn on the CPU from its seed,
measured with hooks (:mod:`sigprop.measurement.hooks`), and the seeds averaged (:mod:`sigprop.measurement.average`),
on one device or several (:mod:`sigprop.measurement.workers`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.devices import parse_devices
from ..core.profile import Profile
from ..core.validate import integer_value
from ..model.batch import Batch
from ..model.batches import batch_fingerprint, batch_to, config_fingerprint
from ..model.config import TransformerConfig
from .average import average_profiles
from .merge import per_seed_table
from .seeded import measure_seed
from .workers import measure_on_devices

if TYPE_CHECKING:
    import torch

__all__ = ["measure_seeds"]


def measure_seeds(config: TransformerConfig, batch: Batch | dict, seeds: int = 4, seed0: int = 0,
                  progress: Callable[[int], None] | None = None, device: torch.device | str | None = None,
                  per_seed: bool = False) -> Profile:
    """Measure ``seeds`` independently initialised models of ``config`` (seeds ``seed0`` … ``seed0 + seeds − 1``,
    :func:`measure_seed`) on ``batch`` and average their per-site statistics, correlations pooled as mean covariance
    over mean variance (:mod:`sigprop.measurement.average`); ``meta`` holds the seeds, the devices and standard
    errors. ``device``: a torch device, or several (a comma-separated string or a list,
    :func:`sigprop.core.devices.parse_devices`), which then measure the seeds in parallel, one process each
    (:mod:`sigprop.measurement.workers`), with the same result.
    ``ValueError`` for an unavailable device, before anything is measured. ``meta["batch_sha256"]``:
    :func:`batch_fingerprint` of ``batch``; ``meta["config_sha256"]``: :func:`config_fingerprint` of ``config``.
    ``per_seed``: keep every seed's rows (``meta["per_seed"]``), so that measurements of disjoint seeds made apart
    merge exactly (:func:`sigprop.measurement.merge.merge_measurements`)."""
    seeds, seed0 = integer_value(seeds, "seeds", 1), integer_value(seed0, "the first seed", 0)
    batch = Batch.from_any(batch)
    devices = parse_devices(device)
    seed_list = list(range(seed0, seed0 + seeds))
    if len(devices) > 1:
        profiles = measure_on_devices(config, batch, seed_list, devices, progress)
    else:
        on_device = batch_to(batch, devices[0])
        profiles = []
        for s in seed_list:
            profiles.append(measure_seed(config, on_device, s, devices[0]))
            if progress is not None:
                progress(1)
    n_tok = int(batch.inputs.numel()) if config.input == "tokens" else batch.sequences
    meta = {"seeds": seed_list, "tokens": n_tok, "sequences": batch.sequences,
            "batch_sha256": batch_fingerprint(batch), "config_sha256": config_fingerprint(config),
            "devices": [str(d) for d in devices]}
    if per_seed:
        meta["per_seed"] = per_seed_table(profiles, seed_list)
    return average_profiles(profiles, config.to_dict(), meta)
