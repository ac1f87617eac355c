"""Measuring the seeds of a preset on one device against a list of devices (one process each), in one run.

    python bench/seed_devices.py [--preset fig1-preln] [--seeds 4] [--devices cpu,cpu] [--layers N]

Times :func:`sigprop.measurement.seeds.measure_seeds` on ``cpu`` (one process, all threads) and on ``--devices`` (one
spawned process per entry, each with its share of the threads; the seeds dealt round-robin), on the preset's batch,
and prints both wall times, their ratio, and the largest relative difference of the two averaged profiles (zero
where the devices are of one kind and the thread counts match; a few float32 roundings otherwise). On a GPU
machine pass e.g. ``--devices cuda:0,cuda:1`` (the single-device run is then ``cuda:0``). Results on the 2-core CPU:
docs/results/bench-seed-devices.txt.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from sigprop.analysis.experiment import config_batch
from sigprop.core.devices import parse_devices
from sigprop.core.profile import QUANTITIES
from sigprop.measurement.seeds import measure_seeds
from sigprop.model.presets import PRESETS


def table(profile) -> np.ndarray:
    return np.array([[getattr(r, q) for q in QUANTITIES] for r in profile.rows], dtype=np.float64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="fig1-preln", choices=list(PRESETS))
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--devices", default="cpu,cpu")
    ap.add_argument("--layers", type=int, default=None, help="override the preset's depth")
    args = ap.parse_args()
    devices = parse_devices(args.devices)
    preset = PRESETS[args.preset]
    config = preset.config()
    if args.layers:
        import dataclasses

        config = dataclasses.replace(config, n_layers=args.layers)
    config, batch = config_batch(config, preset.batch_size)
    single = str(devices[0])
    t0 = time.perf_counter()
    one = measure_seeds(config, batch, args.seeds, device=single)
    t1 = time.perf_counter()
    many = measure_seeds(config, batch, args.seeds, device=",".join(str(d) for d in devices))
    t2 = time.perf_counter()
    a, b = table(one), table(many)
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = np.nanmax(np.abs(np.where(a != 0, b / a - 1.0, b - a)))
    print(f"{args.preset}, {config.n_layers} layers, d = {config.d_model}, {args.seeds} seeds")
    print(f"{single:>24}: {t1 - t0:7.2f} s")
    print(f"{args.devices:>24}: {t2 - t1:7.2f} s  (one process per device, process start included)")
    print(f"ratio (list / one): {(t2 - t1) / (t1 - t0):.2f}; largest relative difference of the profiles: {diff:.1e}")


if __name__ == "__main__":
    main()
