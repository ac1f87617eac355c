"""Verification sweep of the input embeddings: Zipf-distributed token ids through the real embedding module
(Kedia et al. App. A.1). Not part of the paper's Table 21/22; ranges chosen to span common vocabularies."""

from __future__ import annotations

import numpy as np
import torch
from torch.func import functional_call, vmap

from ...components.embedding import Embedding, embedding_forward, zipf_correlation
from ...core.stats import moment_sums
from ..sampling import column, estimates
from ..spec import ComponentSpec, Param

#: Full budget per configuration: independent embedding tables ("worlds", grouped into the replicates) and token
#: positions per world. Few-row tables (segments, the most frequent Zipf tokens) fluctuate as whole rows, so the
#: noise falls with the number of independent tables rather than with the number of tokens.
WORLDS = 32
TOKENS_PER_WORLD = 2**9
WIDTH = 64


def _zipf_probs(v: int) -> torch.Tensor:
    w = 1.0 / torch.arange(1, v + 1, dtype=torch.float64)
    return w / w.sum()


def local_ids(ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Renumber each row's token ids as 0..(distinct − 1) (vectorised over rows); return them and the max count."""
    sorted_ids, order = torch.sort(ids, dim=1)
    new = torch.ones_like(sorted_ids, dtype=torch.long)
    new[:, 1:] = (sorted_ids[:, 1:] != sorted_ids[:, :-1]).long()
    rank = torch.cumsum(new, dim=1) - 1
    out = torch.empty_like(rank)
    out.scatter_(1, order, rank)
    return out, int(rank[:, -1].max()) + 1


def _simulate(params, budget, generator):
    v, length = int(params["vocab"][0]), int(params["seq_len"][0])
    n, k = len(params["token_var"]), budget.replicates
    worlds = k * max(1, budget.samples(WORLDS) // k)
    batch = max(1, TOKENS_PER_WORLD // length)
    ids = torch.multinomial(_zipf_probs(v), n * worlds * batch * length, replacement=True, generator=generator)
    # Only rows that occur are ever read, so each world's table holds just its distinct tokens, renumbered: the same
    # distribution as a full V-row table at a fraction of the cost.
    local, rows = local_ids(ids.reshape(n * worlds, batch * length))
    local = local.reshape(n, worlds, batch, length)
    split = torch.randint(0, length + 1, (n, worlds, batch, 1), generator=generator)
    segments = (torch.arange(length) >= split).long()
    tok_std = column(np.sqrt(params["token_var"]), 4, torch.float32)
    pos_std = column(np.sqrt(params["token_var"] * params["position_ratio"]), 4, torch.float32)
    seg_std = column(np.sqrt(params["token_var"] * params["segment_ratio"]), 4, torch.float32)
    weights = {
        "token.weight": torch.randn(n, worlds, rows, WIDTH, generator=generator).mul_(tok_std),
        "position.weight": torch.randn(n, worlds, length, WIDTH, generator=generator).mul_(pos_std),
        "segment.weight": torch.randn(n, worlds, 2, WIDTH, generator=generator).mul_(seg_std),
    }
    module = Embedding(rows, WIDTH, max_len=length, n_segments=2)

    def run(w, tok, seg):
        return functional_call(module, w, (tok, seg))

    x = vmap(vmap(run))(weights, local, segments)  # the real Embedding forward, one table set per world
    x = x.reshape(n, k, (worlds // k) * batch, length, WIDTH)
    center = x.mean(dim=(1, 2, 3, 4)).double()[:, None].expand(n, k)
    return estimates(moment_sums(x, lead=2, center=center))


def _predict(params):
    corr = zipf_correlation(params["vocab"], approx="exact")
    m = embedding_forward(params["token_var"], corr, position_var=params["token_var"] * params["position_ratio"],
                          segment_var=params["token_var"] * params["segment_ratio"])
    return {"mean": m.mean, "var": m.var, "corr": m.corr}


SPEC = ComponentSpec(
    name="embedding",
    title="Embedding (token + position + segment)",
    params=(
        Param("vocab", 1000, 100000, scale="log", levels=6, integer=True, doc="vocabulary size V, Zipf(1) tokens"),
        Param("seq_len", 64, 1024, scale="log", levels=5, integer=True, doc="sequence length L"),
        Param("token_var", 1e-4, 1.0, scale="log", doc="token-table variance"),
        Param("position_ratio", 0.0, 1.0, doc="position-table variance / token-table variance"),
        Param("segment_ratio", 0.0, 1.0, doc="segment-table variance / token-table variance"),
    ),
    quantities=("mean", "var", "corr"),
    simulate=_simulate,
    predict=_predict,
    shape_params=("vocab", "seq_len"),
    note="Token ids drawn i.i.d. from Zipf(1) over V tokens, segment split uniform on {0..L}; width 64; 32 "
         "independent table sets per configuration. Not in Kedia et al. Table 21/22.",
)
