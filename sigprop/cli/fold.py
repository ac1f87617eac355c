"""``sigprop fold``: a trained run folded into a vanilla Hugging Face checkpoint (a thin wrapper over
:func:`sigprop.fix.export.fold_run`)."""

from __future__ import annotations

from pathlib import Path

import typer

from .terminal import console

__all__ = ["fold_command"]


def fold_command(
    run_dir: Path = typer.Argument(..., help="A run directory written by `sigprop train --out`."),
    out: Path = typer.Argument(..., help="The folder to write the Hugging Face checkpoint into (replaced)."),
    to: str = typer.Option("hf-gpt2", "--to", help="The target: hf-gpt2 (a Pre-LN decoder with LayerNorm, GELU or "
                           "ReLU and learned positions), hf-opt (the same as a Post-LN decoder, norm_eps 1e-5), "
                           "hf-llama (a Pre-LN decoder with RMSNorm, SwiGLU and rotary positions, e.g. llama-preln) or "
                           "hf-bert (a Post-LN masked-LM encoder; BERT's embedding LayerNorm, which sigprop's model "
                           "lacks, changes its logits: see `sigprop.fix.export`)."),
):
    """Fold a trained run's residual scales (λ, β, the head's output scale) into its weights and write it as a Hugging
    Face checkpoint that `from_pretrained` loads without remote code (Kedia et al. Sec. 3.5).

    Pre-LN: each branch's output projection is multiplied by β/Πλ and the final norm absorbs the rest; Post-LN: by
    β/λ, the last norm absorbing the head's output scale. The logits are the same up to the norms' ε (BERT: up to its
    embedding LayerNorm as well). Needs the extra `hf` (transformers).
    """
    from ..fix.export import fold_run

    folder, step, tokenizer = fold_run(run_dir, out, to)
    console.print(f"{run_dir} at step {step} → {to}: {folder}")
    console.print(tokenizer)
    auto = "AutoModelForMaskedLM" if to == "hf-bert" else "AutoModelForCausalLM"
    console.print(f"load it with transformers.{auto}.from_pretrained({str(folder)!r})")
