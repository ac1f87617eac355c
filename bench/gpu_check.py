"""The CUDA paths, checked in a minute on whatever GPUs this machine has (nothing to check without one).

    python bench/gpu_check.py

1. One small model measured on the CPU and on ``cuda:0`` without dropout (the masks come from each device's own
   generator, so with dropout the two would differ by sampling): every statistic of every site within 1e-3
   relative (float32 on both; the GPU's attention kernels round differently).
2. With two or more GPUs: the seeds measured on ``cuda:0,cuda:1,…`` (one process each) against ``cuda:0`` alone,
   dropout on: the same within 1e-5 (same generator kind on every GPU; attention backward kernels may order their
   sums differently).
3. A 192-layer preset on ``cuda:0`` (4 seeds): the measurement's wall time and the statistics' agreement with the
   CPU's to 1e-3, dropout off.
4. ``sigprop.apjn.measure_apjn`` on ``cuda:0`` against the CPU (the same weights, drawn on the CPU): within 1e-3.

Prints one line per check and exits non-zero if one fails.
"""

from __future__ import annotations

import dataclasses
import sys
import time

import numpy as np
import torch

from sigprop.analysis.experiment import config_batch
from sigprop.core.profile import QUANTITIES
from sigprop.measurement.seeds import measure_seeds
from sigprop.model import TransformerConfig
from sigprop.model.presets import preset_config


def table(profile) -> np.ndarray:
    return np.array([[getattr(r, q) for q in QUANTITIES] for r in profile.rows], dtype=np.float64)


def worst(a, b) -> float:
    a, b = table(a), table(b)
    scale = np.maximum(np.abs(a), np.abs(b))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(scale > 1e-30, np.abs(a - b) / scale, 0.0)
    return float(np.nanmax(rel))


def check(name: str, value: float, limit: float, extra: str = "") -> bool:
    ok = value <= limit
    print(f"{'ok  ' if ok else 'FAIL'} {name}: largest relative difference {value:.2e} (limit {limit:g}){extra}")
    return ok


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 0
    n = torch.cuda.device_count()
    names = ", ".join(torch.cuda.get_device_name(i) for i in range(n))
    print(f"{n} CUDA device(s): {names}; torch {torch.__version__}")
    good = True
    small = TransformerConfig(n_layers=6, d_model=128, n_heads=2, vocab_size=512, seq_len=64, max_len=64, dropout=0.0)
    small, batch = config_batch(small, 4)
    good &= check("small model, cpu vs cuda:0 (no dropout)",
                  worst(measure_seeds(small, batch, 2), measure_seeds(small, batch, 2, device="cuda:0")), 1e-3)
    if n >= 2:
        with_dropout = dataclasses.replace(small, dropout=0.1)
        devices = ",".join(f"cuda:{i}" for i in range(n))
        good &= check(f"seeds on {devices} vs cuda:0 (dropout on)",
                      worst(measure_seeds(with_dropout, batch, 2 * n, device=devices),
                            measure_seeds(with_dropout, batch, 2 * n, device="cuda:0")), 1e-5)
    big = dataclasses.replace(preset_config("fig1-preln"), dropout=0.0)
    big, big_batch = config_batch(big, 4)
    t0 = time.perf_counter()
    on_gpu = measure_seeds(big, big_batch, 4, device="cuda:0")
    wall = time.perf_counter() - t0
    on_cpu = measure_seeds(big, big_batch, 4)
    good &= check("fig1-preln (192 layers, d = 256), cpu vs cuda:0 (no dropout)", worst(on_cpu, on_gpu), 1e-3,
                  f"; 4 seeds measured on cuda:0 in {wall:.1f} s")
    from sigprop.apjn.hutchinson import measure_apjn
    from sigprop.apjn.inputs import equiangular_tokens

    vit = TransformerConfig(input="patches", image_size=16, patch_size=4, seq_len=16, n_layers=8, d_model=64,
                            n_heads=2, dropout=0.0, init="alekseev")
    h = equiangular_tokens(16, 64, 1.0, 0.2, generator=torch.Generator().manual_seed(0))
    a = measure_apjn(vit, h, seeds=(0, 1), probes=4)
    b = measure_apjn(vit, h, seeds=(0, 1), probes=4, device="cuda:0")
    diff = float(np.max(np.abs(np.asarray(a.mean) - np.asarray(b.mean)) / np.abs(np.asarray(a.mean))))
    good &= check("measure_apjn, cpu vs cuda:0", diff, 1e-3)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
