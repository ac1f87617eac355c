"""Hugging Face models through sigprop: GPT-2, Llama and BERT built from small configs (8 layers, d = 256), measured
over 16 seeds with ``sigprop.measure`` and predicted from ``sigprop.from_hf`` of their config (token-resolved, from the
batch's own ids and labels); prints each family's per-layer relative error of the residual stream's forward and
gradient variance. Needs the extra ``hf``. Output: docs/results/hf-agreement.txt (``python bench/hf_agreement.py``).
"""

from __future__ import annotations

import warnings

import torch
import transformers

import sigprop
from sigprop.hf.config_map import map_hf_config

B, L, SEEDS, VOCAB = 4, 64, 16, 2048


def families() -> dict:
    no_dropout = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return {
        "gpt2": (transformers.GPT2LMHeadModel,
                 transformers.GPT2Config(n_layer=8, n_embd=256, n_head=4, n_positions=L, vocab_size=VOCAB,
                                         **no_dropout)),
        "llama": (transformers.LlamaForCausalLM,
                  transformers.LlamaConfig(num_hidden_layers=8, hidden_size=256, num_attention_heads=4,
                                           num_key_value_heads=2, intermediate_size=688, max_position_embeddings=L,
                                           vocab_size=VOCAB)),
        "bert": (transformers.BertForMaskedLM,
                 transformers.BertConfig(num_hidden_layers=8, hidden_size=256, num_attention_heads=4,
                                         intermediate_size=1024, max_position_embeddings=L, vocab_size=VOCAB,
                                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)),
    }


def layer_variances(profile, n_layers: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows = profile.lookup()
    return (torch.tensor([rows[(i, "layer")].fwd_var for i in range(n_layers)], dtype=torch.float64),
            torch.tensor([rows[(i, "layer")].grad_var for i in range(n_layers)], dtype=torch.float64))


def main() -> None:
    warnings.simplefilter("ignore")
    transformers.logging.set_verbosity_error()
    ids = torch.randint(5, VOCAB, (B, L), generator=torch.Generator().manual_seed(1))
    print(f"{B} sequences of {L} random tokens, {SEEDS} seeds; residual stream after each block (8 layers, d = 256)")
    for name, (cls, hf_config) in families().items():
        config = map_hf_config(hf_config).config.replace(seq_len=L)
        batch = sigprop.make_batch(config, ids, generator=torch.Generator().manual_seed(2))
        runs = []
        for seed in range(SEEDS):
            torch.manual_seed(seed)
            runs.append(layer_variances(sigprop.measure(cls(hf_config), batch), config.n_layers))
        fwd = torch.stack([r[0] for r in runs]).mean(0)
        grad = torch.stack([r[1] for r in runs]).mean(0)
        pred = sigprop.predict(config, token_ids=batch.inputs, labels=batch.labels, batch_size=B,
                               segment_ids=batch.segment_ids)
        p_fwd, p_grad = layer_variances(pred, config.n_layers)
        ef, eg = 100 * (p_fwd - fwd).abs() / fwd, 100 * (p_grad - grad).abs() / grad
        print(f"{name}: forward variance median {ef.median():.2f}% max {ef.max():.2f}%; "
              f"gradient variance median {eg.median():.2f}% max {eg.max():.2f}%")


if __name__ == "__main__":
    main()
