"""Theory against measurement for every Hugging Face family sigprop maps: each family built from a small config
(12 layers, d = 128, dropout 0), measured through ``sigprop.measure`` on a Hugging Face batch (``input_ids``,
``attention_mask`` with one padded tail, ``labels`` as the family's objective has them: unshifted next tokens for a
causal LM, 15% masked tokens for a masked LM; for ViT ``pixel_values`` and class ``labels``) over 8 seeds, and
predicted from ``sigprop.from_hf`` of its config (token-resolved, from the batch's own ids, labels and padding, or
its images). Prints and writes, per family, every layer's forward
and gradient variance, measured (seed mean ± standard error) and predicted, their relative error and its median over
the layers. Needs the extra ``hf``; nothing is downloaded.

    python bench/hf_families.py --out docs/results/hf-families      # writes hf-families.json and hf-families.md
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import torch
import transformers

import sigprop
from sigprop.core.jsonio import write_json_atomic, write_text_atomic
from sigprop.data.mlm import mask_tokens
from sigprop.hf.config_map import map_hf_config
from sigprop.model.batch import Batch
from sigprop.model.objective import MASK_ID, N_SPECIAL, PAD_ID

B, L, SEEDS, VOCAB, LAYERS, D = 4, 32, 8, 2048, 12, 128
PAD_TAIL = 6  # the last tokens of the first sequence are padding


def families() -> dict:
    """Family → (class, config): 12 layers of width 128, 4 heads, dropout 0; sigprop's pad id (0) as the model's."""
    causal = dict(pad_token_id=PAD_ID)
    return {
        "gpt2": (transformers.GPT2LMHeadModel, transformers.GPT2Config(
            n_layer=LAYERS, n_embd=D, n_head=4, n_positions=64, vocab_size=VOCAB, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0)),
        "bert": (transformers.BertForMaskedLM, transformers.BertConfig(
            num_hidden_layers=LAYERS, hidden_size=D, num_attention_heads=4, intermediate_size=4 * D,
            max_position_embeddings=64, vocab_size=VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            pad_token_id=PAD_ID)),
        "roberta": (transformers.RobertaForMaskedLM, transformers.RobertaConfig(
            num_hidden_layers=LAYERS, hidden_size=D, num_attention_heads=4, intermediate_size=4 * D,
            max_position_embeddings=66, vocab_size=VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            type_vocab_size=1, pad_token_id=PAD_ID)),
        "opt": (transformers.OPTForCausalLM, transformers.OPTConfig(
            num_hidden_layers=LAYERS, hidden_size=D, num_attention_heads=4, ffn_dim=4 * D, max_position_embeddings=64,
            vocab_size=VOCAB, dropout=0.0, **causal)),
        "llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig(
            num_hidden_layers=LAYERS, hidden_size=D, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=344, max_position_embeddings=64, vocab_size=VOCAB, **causal)),
        "qwen2": (transformers.Qwen2ForCausalLM, transformers.Qwen2Config(
            num_hidden_layers=LAYERS, hidden_size=D, num_attention_heads=4, num_key_value_heads=1,
            intermediate_size=344, max_position_embeddings=64, vocab_size=VOCAB, **causal)),
        "mistral": (transformers.MistralForCausalLM, transformers.MistralConfig(
            num_hidden_layers=LAYERS, hidden_size=D, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=344, max_position_embeddings=64, vocab_size=VOCAB, **causal)),
        "phi3": (transformers.Phi3ForCausalLM, transformers.Phi3Config(
            num_hidden_layers=LAYERS, hidden_size=D, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=344, max_position_embeddings=64, vocab_size=VOCAB, bos_token_id=2, eos_token_id=3,
            **causal)),
        "gemma": (transformers.GemmaForCausalLM, transformers.GemmaConfig(
            num_hidden_layers=LAYERS, hidden_size=D, num_attention_heads=4, num_key_value_heads=1, head_dim=32,
            intermediate_size=344, max_position_embeddings=64, vocab_size=VOCAB, bos_token_id=2, eos_token_id=3,
            **causal)),
        "qwen3": (transformers.Qwen3ForCausalLM, transformers.Qwen3Config(
            num_hidden_layers=LAYERS, hidden_size=D, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            intermediate_size=344, max_position_embeddings=64, vocab_size=VOCAB, **causal)),
        "gpt_neox": (transformers.GPTNeoXForCausalLM, transformers.GPTNeoXConfig(
            num_hidden_layers=LAYERS, hidden_size=D, num_attention_heads=4, intermediate_size=4 * D,
            max_position_embeddings=64, vocab_size=VOCAB, **causal)),
        "phi": (transformers.PhiForCausalLM, transformers.PhiConfig(
            num_hidden_layers=LAYERS, hidden_size=D, num_attention_heads=4, intermediate_size=4 * D,
            max_position_embeddings=64, vocab_size=VOCAB, **causal)),
        "vit": (transformers.ViTForImageClassification, transformers.ViTConfig(
            num_hidden_layers=LAYERS, hidden_size=D, num_attention_heads=4, intermediate_size=4 * D, image_size=16,
            patch_size=4, num_channels=3, num_labels=10, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)),
    }


def hf_batch(masked_lm: bool) -> dict:
    """The Hugging Face batch: B sequences of L ids (Zipf-free uniform ids above sigprop's special ones), the first
    with a padded tail; labels as the objective has them (unshifted for a causal LM, padding −100)."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(N_SPECIAL, VOCAB, (B, L), generator=gen)
    attention = torch.ones(B, L, dtype=torch.long)
    attention[0, -PAD_TAIL:] = 0
    ids[0, -PAD_TAIL:] = PAD_ID
    if masked_lm:
        inputs, labels = mask_tokens(ids, MASK_ID, prob=0.15, generator=gen, pad_id=PAD_ID, vocab_size=VOCAB,
                                     random_low=N_SPECIAL)
        return {"input_ids": inputs, "attention_mask": attention, "labels": labels}
    return {"input_ids": ids, "attention_mask": attention, "labels": ids.masked_fill(attention == 0, -100)}


def image_batch(hf_config) -> dict:
    """B images of standard normal pixels, smoothed over 2 × 2 neighbourhoods so that a patch's pixels correlate, and
    random class labels."""
    gen = torch.Generator().manual_seed(2)
    size, channels = hf_config.image_size, hf_config.num_channels
    pixels = torch.randn(B, channels, size + 1, size + 1, generator=gen)
    images = (pixels[..., 1:, 1:] + pixels[..., :-1, 1:] + pixels[..., 1:, :-1] + pixels[..., :-1, :-1]) / 2.0
    return {"pixel_values": images, "labels": torch.randint(0, hf_config.num_labels, (B,), generator=gen)}


def layer_variances(profile) -> tuple[list[float], list[float]]:
    rows = profile.lookup()
    return ([rows[(i, "layer")].fwd_var for i in range(LAYERS)], [rows[(i, "layer")].grad_var for i in range(LAYERS)])


def one_family(name: str, cls, hf_config, seeds: int = SEEDS) -> dict:
    start = time.perf_counter()
    masked = cls.__name__.endswith("ForMaskedLM")
    images = cls.__name__.endswith("ForImageClassification")
    hf = image_batch(hf_config) if images else hf_batch(masked)
    config = map_hf_config(hf_config).config
    config = config if images else config.replace(seq_len=L)
    runs = []
    for seed in range(seeds):
        torch.manual_seed(seed)
        runs.append(layer_variances(sigprop.measure(cls(hf_config).train(), hf)))
    fwd = torch.tensor([r[0] for r in runs], dtype=torch.float64)
    grad = torch.tensor([r[1] for r in runs], dtype=torch.float64)
    if images:
        pred = sigprop.predict(config, images=hf["pixel_values"], labels=hf["labels"], batch_size=B)
    else:
        batch = Batch.from_any(hf, causal=not masked)  # the labels in sigprop's convention, as the theory reads them
        segments = torch.zeros_like(batch.inputs) if config.n_segments else None
        pred = sigprop.predict(config, token_ids=batch.inputs, labels=batch.labels, batch_size=B, pad_id=PAD_ID,
                               segment_ids=segments)
    p_fwd, p_grad = (torch.tensor(v, dtype=torch.float64) for v in layer_variances(pred))
    out = {"family": name, "class": cls.__name__, "layers": LAYERS, "d_model": D, "seeds": seeds,
           "notes": list(map_hf_config(hf_config).notes), "per_layer": []}
    for i in range(LAYERS):
        row = {"layer": i}
        for q, m, p in (("fwd_var", fwd[:, i], p_fwd[i]), ("grad_var", grad[:, i], p_grad[i])):
            mean, se = float(m.mean()), float(m.std() / math.sqrt(seeds))
            row.update({f"{q}_measured": mean, f"{q}_se": se, f"{q}_predicted": float(p),
                        f"{q}_rel_error": abs(float(p) - mean) / mean})
        out["per_layer"].append(row)
    for q in ("fwd_var", "grad_var"):
        errs = torch.tensor([r[f"{q}_rel_error"] for r in out["per_layer"]])
        noise = torch.tensor([r[f"{q}_se"] / r[f"{q}_measured"] for r in out["per_layer"]])
        out[f"{q}_median_rel_error"] = float(errs.median())
        out[f"{q}_median_rel_se"] = float(noise.median())
    out["seconds"] = time.perf_counter() - start
    return out


def markdown(results: list[dict]) -> str:
    lines = ["# Hugging Face families: theory against measurement", "",
             f"Each family built from a small config ({LAYERS} layers, d = {D}, 4 heads, dropout 0), measured through "
             f"`sigprop.measure` on a Hugging Face batch ({B} sequences of {L} tokens, the first with {PAD_TAIL} "
             f"padded positions, excluded; ViT: {B} images of 16 × 16 × 3 smoothed Gaussian pixels and their classes) "
             f"over {results[0]['seeds']} seeds, and predicted from `sigprop.from_hf` of "
             "its config (token-resolved, from the batch's ids, labels and padding, or images). Command: "
             f"`python bench/hf_families.py --seeds {results[0]['seeds']} --out docs/results/hf-families`.", "",
             "| family | class | forward variance: median relative error | its noise (median SE / mean) | "
             "gradient variance: median relative error | its noise | seconds |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['family']} | `{r['class']}` | {100 * r['fwd_var_median_rel_error']:.2f}% | "
                     f"{100 * r['fwd_var_median_rel_se']:.2f}% | {100 * r['grad_var_median_rel_error']:.2f}% | "
                     f"{100 * r['grad_var_median_rel_se']:.2f}% | {r['seconds']:.0f} |")
    for r in results:
        lines += ["", f"## {r['family']}", "", "What the mapping leaves out: " + ("; ".join(r["notes"]) or "nothing"),
                  "", "| layer | σ²_x measured | σ²_x predicted | error | σ²_g measured | σ²_g predicted | error |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for row in r["per_layer"]:
            lines.append(f"| {row['layer']} | {row['fwd_var_measured']:.4g} ± {row['fwd_var_se']:.2g} | "
                         f"{row['fwd_var_predicted']:.4g} | {100 * row['fwd_var_rel_error']:.2f}% | "
                         f"{row['grad_var_measured']:.4g} ± {row['grad_var_se']:.2g} | {row['grad_var_predicted']:.4g} "
                         f"| {100 * row['grad_var_rel_error']:.2f}% |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    parser.add_argument("--family", action="append", help="only these families (repeatable)")
    parser.add_argument("--seeds", type=int, default=SEEDS, help=f"models measured per family (default {SEEDS})")
    args = parser.parse_args(argv)
    if args.seeds < 2:
        print("error: --seeds must be >= 2 (a standard error needs two)", file=sys.stderr)
        raise SystemExit(2)
    warnings.simplefilter("ignore")
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    chosen = families()
    unknown = set(args.family or ()) - set(chosen)
    if unknown:
        print(f"error: unknown family {', '.join(sorted(unknown))}; families: {', '.join(chosen)}", file=sys.stderr)
        raise SystemExit(2)
    results = []
    for name, (cls, cfg) in chosen.items():
        if args.family and name not in args.family:
            continue
        print(f"{name}: measuring {args.seeds} seeds and predicting ...", file=sys.stderr, flush=True)
        r = one_family(name, cls, cfg, args.seeds)
        results.append(r)
        print(f"{name}: forward variance median {100 * r['fwd_var_median_rel_error']:.2f}% (noise "
              f"{100 * r['fwd_var_median_rel_se']:.2f}%); gradient variance median "
              f"{100 * r['grad_var_median_rel_error']:.2f}% (noise {100 * r['grad_var_median_rel_se']:.2f}%); "
              f"{r['seconds']:.0f} s", flush=True)
    if args.out is not None:
        write_json_atomic(args.out.with_suffix(".json"), {"results": results})
        write_text_atomic(args.out.with_suffix(".md"), markdown(results))
        print(f"wrote {args.out.with_suffix('.json')} and {args.out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
