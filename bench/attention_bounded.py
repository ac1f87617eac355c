"""What the bounded attention rule costs in accuracy: whole-model predictions by the bounded rule against the sampled
rule, per layer, where both run, beside the sampled rule against itself under another seed (the noise floor).

    python bench/attention_bounded.py                # moderate sizes, both routes (several minutes on 2 cores)
    python bench/attention_bounded.py --production   # llama3-8b by the bounded rule under two seeds

Per configuration and statistic (the layer outputs' forward and gradient variance), the median and largest relative
difference over the layers: "bounded vs sampled" (seed 0 both), and "sampled vs sampled" (seeds 0 and 1). The
bounded rule is unbiased, so where the first is no larger than the second, subsampling the queries and reducing the
width cost nothing beyond a sampled rule's own noise. ``--production`` prints the same spread for the bounded rule at
Llama-3-8B's size (2 heads a layer), where the sampled rule cannot run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import sigprop.components.attention as attention
from sigprop import predict
from sigprop.model.presets import preset_config

CONFIGS = {
    "llama-style: causal, rotary, GQA (d 256, L 256, 12 layers)": ("llama-preln", dict(
        n_layers=12, seq_len=256, max_len=256)),
    "llama-style, wide: d 1024, 8 heads of 128 sharing 2 (L 256, 8 layers)": ("llama-preln", dict(
        n_layers=8, d_model=1024, n_heads=8, n_kv_heads=2, d_ff=2816, seq_len=256, max_len=256)),
    "causal, learned positions, dropout 0.1, Q/K at 2x Xavier (L 256, 12 layers)": ("decoder-preln", dict(
        n_layers=12, seq_len=256, max_len=256, qk_gain=2.0)),
    "bidirectional encoder, Q/K at 2x Xavier (L 128, 12 layers)": ("qk-2x-xavier", dict(n_layers=12)),
}


_DEFAULT_LIMIT = attention.SAMPLED_MAX_NUMBERS


def _profile(config, route: str, seed: int):
    """The layer outputs' forward and gradient variances, by the sampled rule, the bounded one, or "auto"'s choice."""
    attention.SAMPLED_MAX_NUMBERS = {"bounded": 0, "sampled": 1 << 62, "auto": _DEFAULT_LIMIT}[route]
    profile = predict(config, attention_seed=seed)
    rows = profile.site("layer")
    return np.array([r.fwd_var for r in rows]), np.array([r.grad_var for r in rows]), profile.meta["attention_rule"]


def _diff(a, b) -> str:
    rel = np.abs(a / b - 1.0)
    return f"{100 * np.median(rel):6.2f}% / {100 * np.max(rel):6.2f}%"


def moderate() -> None:
    print("median / largest relative difference over the layers     forward variance    gradient variance")
    for name, (preset, overrides) in CONFIGS.items():
        config = preset_config(preset).replace(**overrides)
        start = time.perf_counter()
        f0, g0, rule = _profile(config, "sampled", 0)
        f1, g1, _ = _profile(config, "sampled", 1)
        fb, gb, rule_b = _profile(config, "bounded", 0)
        print(f"{name}  ({time.perf_counter() - start:.0f} s)\n  rules: {rule}\n         {rule_b}")
        print(f"  bounded vs sampled (seed 0)                              {_diff(fb, f0)}   {_diff(gb, g0)}")
        print(f"  sampled seed 1 vs seed 0 (noise floor)                   {_diff(f1, f0)}   {_diff(g1, g0)}")


def production() -> None:
    config = preset_config("llama3-8b")
    start = time.perf_counter()
    f0, g0, rule = _profile(config, "auto", 0)
    f1, g1, _ = _profile(config, "auto", 1)
    print(f"llama3-8b, bounded rule, seed 1 vs seed 0 ({time.perf_counter() - start:.0f} s for both)\n  {rule}")
    print(f"  forward variance  {_diff(f1, f0)}\n  gradient variance {_diff(g1, g0)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--production", action="store_true", help="llama3-8b by the bounded rule under two seeds")
    args = ap.parse_args()
    production() if args.production else moderate()


if __name__ == "__main__":
    main()
