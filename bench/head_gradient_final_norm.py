"""The loss gradient at the top layer with and without a final norm: predicted (token-resolved boundary,
sigprop.theory.boundaries.head_gradient_gram) against 32 measured seeds, for an untied head.

The boundary leaves out the softmax's dependence on the head, a part along each hidden state that a final norm
projects out: with a final norm the top gradient agrees, without one (Post-LN, ``final_norm=False``) its token
correlation comes out too small. Prints one row per configuration.

    python bench/head_gradient_final_norm.py
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

import sigprop  # noqa: E402
from sigprop.measurement.seeds import measure_seeds  # noqa: E402

CASES = {
    "Pre-LN, final norm, head scale 1": dict(),
    "Pre-LN, final norm, head scale 3": dict(head_scale=3.0),
    "Post-LN (no final norm), head scale 1": dict(norm_position="post"),
    "Post-LN (no final norm), head scale 3": dict(norm_position="post", head_scale=3.0),
    "Pre-LN, final_norm=False, head scale 3": dict(final_norm=False, head_scale=3.0),
}
SEEDS = 32


def main() -> None:
    torch.set_num_threads(1)
    print(f"decoder, 2 layers, d 64, vocabulary 256, 4 x 32 tokens, untied head, dropout 0; {SEEDS} seeds; "
          "top layer's gradient: predicted / measured ± SE")
    print("| model | grad var | grad corr |")
    print("|---|---|---|")
    for name, extra in CASES.items():
        config = sigprop.TransformerConfig(arch="decoder", n_layers=2, d_model=64, n_heads=2, vocab_size=256,
                                           seq_len=32, dropout=0.0, tie_head=False, **extra)
        ids = torch.randint(5, 256, (4, 32), generator=torch.Generator().manual_seed(0))
        batch = sigprop.make_batch(config, ids, torch.Generator().manual_seed(1))
        predicted = sigprop.predict(config, token_ids=batch.inputs, labels=batch.labels, token_resolved=True)
        measured = measure_seeds(config, batch, seeds=SEEDS)
        top = measured.site("layer")[-1]
        se = measured.meta["stderr"][f"{top.layer}:layer"]
        pred = predicted.lookup()[(top.layer, "layer")]
        print(f"| {name} | {pred.grad_var:.4g} / {top.grad_var:.4g} ± {se['grad_var']:.2g} | "
              f"{pred.grad_corr:.4f} / {top.grad_corr:.4f} ± {se['grad_corr']:.4f} |", flush=True)


if __name__ == "__main__":
    main()
