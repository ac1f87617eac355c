"""Measurements of disjoint seeds, made apart (other machines, other times), merged into the one measurement all
their seeds give together.

A seed average keeps correlations pooled and standard errors from the spread over seeds
(:mod:`sigprop.measurement.average`), so measurements cannot be merged from their averages: each keeps its per-seed rows
(``sigprop measure --json`` writes them, :func:`per_seed_table`), and the merge averages all the seeds again, exactly
as one run over them would (:func:`merge_measurements`). It refuses measurements of different models, of different
batches (the batch's SHA-256) or sharing a seed.
"""

from __future__ import annotations

import math

from ..core.jsonio import json_number
from ..core.profile import QUANTITIES, Profile, Row
from .average import average_profiles

__all__ = ["per_seed_table", "profiles_from_table", "merge_measurements"]


def per_seed_table(profiles: list[Profile], seeds: list[int]) -> dict:
    """The per-seed rows of ``profiles`` (one per seed in ``seeds``, the same sites in the same order) as plain
    JSON: {"seeds", "sites": [[layer, site], …], "quantities", "values": [seed][site][quantity]} (NaN as null)."""
    if len(profiles) != len(seeds) or not profiles:
        raise ValueError("per_seed_table: one profile per seed, at least one")
    sites = [[r.layer, r.site] for r in profiles[0].rows]
    values = [[[json_number(getattr(r, q)) for q in QUANTITIES] for r in p.rows] for p in profiles]
    return {"seeds": list(map(int, seeds)), "sites": sites, "quantities": list(QUANTITIES), "values": values}


def profiles_from_table(table: dict, config: dict) -> list[Profile]:
    """Inverse of :func:`per_seed_table`: one measured :class:`Profile` per seed. ``ValueError`` on a malformed
    table."""
    try:
        sites, quantities, values = table["sites"], table["quantities"], table["values"]
        if list(quantities) != list(QUANTITIES) or len(values) != len(table["seeds"]):
            raise ValueError("quantities or seeds do not match the values")
        out = []
        for per_site in values:
            if len(per_site) != len(sites):
                raise ValueError("a seed's rows do not match the sites")
            rows = tuple(Row(int(lay), str(site), **{q: (math.nan if v is None else float(v))
                                                     for q, v in zip(QUANTITIES, vals, strict=True)})
                         for (lay, site), vals in zip(sites, per_site, strict=True))
            out.append(Profile("measured", dict(config), rows, {}))
        return out
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"malformed per-seed table: {err}") from None


def merge_measurements(measured: list[Profile]) -> Profile:
    """The seed average of every seed of ``measured`` (measured profiles that carry their per-seed rows,
    ``meta["per_seed"]``), as one :func:`sigprop.measurement.seeds.measure_seeds` run over all of them gives it; the
    per-seed rows, devices and batch source are kept, so merged measurements merge again. ``ValueError`` if one
    lacks per-seed rows, or they differ in configuration or batch, or share a seed."""
    if not measured:
        raise ValueError("merge_measurements: nothing to merge")
    first = measured[0]
    seeds: list[int]
    profiles: list[Profile]
    devices: list[str]
    seeds, profiles, devices = [], [], []
    for i, m in enumerate(measured):
        if m.kind != "measured" or "per_seed" not in m.meta:
            raise ValueError(f"measurement {i + 1} holds no per-seed rows: merge files written by sigprop measure "
                             "--json")
        if m.config != first.config:
            changed = sorted(k for k in set(m.config) | set(first.config) if m.config.get(k) != first.config.get(k))
            raise ValueError(f"measurement {i + 1} is of another model (fields {', '.join(changed)} differ)")
        if m.meta.get("hf_config") != first.meta.get("hf_config"):  # an unmapped family has no config of ours
            raise ValueError(f"measurement {i + 1} is of another Hugging Face model (its hf_config differs)")
        if m.meta.get("batch_sha256") != first.meta.get("batch_sha256"):
            raise ValueError(f"measurement {i + 1} was measured on another batch (its SHA-256 differs)")
        table = m.meta["per_seed"]
        shared = set(seeds) & set(table["seeds"])
        if shared:
            raise ValueError(f"measurement {i + 1} repeats seeds {sorted(shared)[:8]}: merge disjoint seeds only")
        seeds += list(table["seeds"])
        profiles += profiles_from_table(table, first.config)
        devices += [d for d in m.meta.get("devices", []) if d not in devices]
    order = sorted(range(len(seeds)), key=seeds.__getitem__)
    seeds, profiles = [seeds[i] for i in order], [profiles[i] for i in order]
    keep = {k: first.meta[k] for k in ("tokens", "sequences", "batch_sha256", "batch_source", "config_sha256",
                                       "hf_source", "hf_weights", "hf_config", "theory", "tokenizer", "sites_from")
            if k in first.meta}  # the config's fingerprint too: a merged file keeps the check against edits
    meta = {"seeds": seeds, **keep, "devices": devices, "per_seed": per_seed_table(profiles, seeds)}
    return average_profiles(profiles, first.config, meta)
