"""What the Hugging Face tests that measure models through sigprop share: two small language-model configs, the seed
count and batch shape, and the per-layer seed means with their standard errors (imported after each test module's
``importorskip("transformers")``)."""

from __future__ import annotations

import math

import torch
import transformers

SEEDS, B, L = 8, 4, 32

#: Family → a small configuration (4 layers of width 128, no dropout, a vocabulary of 211).
SMALL_LM_CONFIGS = {
    "gpt2": lambda: transformers.GPT2Config(n_layer=4, n_embd=128, n_head=4, n_positions=64, vocab_size=211,
                                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    "llama": lambda: transformers.LlamaConfig(num_hidden_layers=4, hidden_size=128, num_attention_heads=4,
                                              num_key_value_heads=2, intermediate_size=256,
                                              max_position_embeddings=64, vocab_size=211),
    "opt": lambda: transformers.OPTConfig(num_hidden_layers=4, hidden_size=128, num_attention_heads=4, ffn_dim=512,
                                          max_position_embeddings=64, vocab_size=211, dropout=0.0),
    "phi3": lambda: transformers.Phi3Config(num_hidden_layers=4, hidden_size=128, num_attention_heads=4,
                                            num_key_value_heads=2, intermediate_size=256, max_position_embeddings=64,
                                            vocab_size=211, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "gemma": lambda: transformers.GemmaConfig(num_hidden_layers=4, hidden_size=128, num_attention_heads=4,
                                              num_key_value_heads=1, head_dim=32, intermediate_size=256,
                                              max_position_embeddings=64, vocab_size=211, pad_token_id=0,
                                              bos_token_id=1, eos_token_id=2),
    "qwen3": lambda: transformers.Qwen3Config(num_hidden_layers=4, hidden_size=128, num_attention_heads=4,
                                              num_key_value_heads=2, head_dim=32, intermediate_size=256,
                                              max_position_embeddings=64, vocab_size=211),
    "gpt_neox": lambda: transformers.GPTNeoXConfig(num_hidden_layers=4, hidden_size=128, num_attention_heads=4,
                                                   intermediate_size=512, max_position_embeddings=64,
                                                   vocab_size=211),
    "phi": lambda: transformers.PhiConfig(num_hidden_layers=4, hidden_size=128, num_attention_heads=4,
                                          intermediate_size=512, max_position_embeddings=64, vocab_size=211),
}


def layer_stats(profile, n_layers):
    """(forward variance, gradient variance) at each layer's output of a measured or predicted profile."""
    rows = {(r.layer, r.site): r for r in profile.rows}
    return (torch.tensor([rows[(i, "layer")].fwd_var for i in range(n_layers)], dtype=torch.float64),
            torch.tensor([rows[(i, "layer")].grad_var for i in range(n_layers)], dtype=torch.float64))


def seed_mean(measure_one):
    """(forward mean, its SE, gradient mean, its SE) per layer over ``SEEDS`` calls of ``measure_one(seed)``, each
    returning :func:`layer_stats`."""
    runs = [measure_one(s) for s in range(SEEDS)]
    fwd = torch.stack([r[0] for r in runs])
    grad = torch.stack([r[1] for r in runs])
    se = lambda t: t.std(0) / math.sqrt(SEEDS)  # noqa: E731
    return fwd.mean(0), se(fwd), grad.mean(0), se(grad)
