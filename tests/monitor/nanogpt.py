"""A user's own transformer, written as nanoGPT writes one (no sigprop or Hugging Face class): token and position
embeddings, a stack of blocks in an ``nn.ModuleList``, a head; ``forward(idx, targets)`` returns (logits, loss).
``post_ln`` puts each block's norms after its residual adds."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads, self.dropout = heads, dropout
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(x).split(d, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.drop(self.proj(y.transpose(1, 2).reshape(b, t, d)))


class Block(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float, post_ln: bool):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, dropout)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(dropout))
        self.post_ln = post_ln

    def forward(self, x):
        if self.post_ln:
            x = self.ln_1(x + self.attn(x))
            return self.ln_2(x + self.mlp(x))
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    def __init__(self, vocab: int = 64, block_size: int = 16, n_layer: int = 4, d: int = 32, heads: int = 2,
                 dropout: float = 0.1, post_ln: bool = False):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block_size, d)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([Block(d, heads, dropout, post_ln) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets=None):
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device)))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss


def nanogpt_loss(model, batch):
    """The loss a nanoGPT training loop computes, on a batch ``{"idx", "targets"}``."""
    return model(batch["idx"], batch["targets"])[1]


def nanogpt_batch(seed: int, batch: int = 4, length: int = 16, vocab: int = 64) -> dict:
    """Random ids and their next tokens, as nanoGPT's ``get_batch`` gives them."""
    ids = torch.randint(0, vocab, (batch, length + 1), generator=torch.Generator().manual_seed(seed))
    return {"idx": ids[:, :-1], "targets": ids[:, 1:]}
