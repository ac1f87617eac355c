"""Sites found from the model itself: the block stack of a Hugging Face model of any family, of a user's own module."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sigprop.measurement.discover import InputOf, block_stacks, discover_sites
from tests.measurement.nanogpt import NanoGPT


class WithExperts(nn.Module):
    """Three blocks, each holding a longer list of experts: the stack is the blocks, not the experts."""

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.experts = nn.ModuleList([nn.Linear(4, 4) for _ in range(8)])

        def forward(self, x):
            return x + sum(e(x) for e in self.experts)

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([self.Layer() for _ in range(3)])


def test_the_longest_uniform_list_outside_blocks_is_the_stack():
    net = NanoGPT(n_layer=5)
    ((path, blocks),) = block_stacks(net)
    assert path == "transformer.h" and len(blocks) == 5
    ((path, blocks),) = block_stacks(WithExperts())
    assert path == "layers" and len(blocks) == 3
    mixed = nn.ModuleList([nn.Linear(2, 2), nn.ReLU()])
    assert block_stacks(nn.Sequential(mixed)) == []


class _Block(nn.Module):
    def __init__(self, heads: int = 0):
        super().__init__()
        self.mix = nn.Linear(4, 4)
        if heads:
            self.heads = nn.ModuleList([nn.Linear(4, 1) for _ in range(heads)])


def test_a_list_of_norms_or_of_heads_is_not_taken_for_the_stack():
    """Blocks (modules of their own) beat a longer list of bare norms; the heads inside a list of mixed blocks are
    not a stack; two lists of equal length (an encoder's and a decoder's) are ambiguous, said with their paths."""
    norms = nn.Module()
    norms.blocks, norms.norms = nn.ModuleList([_Block() for _ in range(2)]), nn.ModuleList([nn.LayerNorm(4)] * 3)
    assert [path for path, _ in block_stacks(norms)] == ["blocks"]
    mixed = nn.Module()
    mixed.blocks = nn.ModuleList([_Block(heads=4), nn.Linear(4, 4), _Block(heads=4), nn.Linear(4, 4)])
    assert block_stacks(mixed) == []
    adapters = nn.Module()  # beside the blocks, as many small adapters: the blocks, 4× their size, are the stack
    adapters.blocks = nn.ModuleList([NanoGPT(n_layer=1).transformer.h[0] for _ in range(2)])
    adapters.adapters = nn.ModuleList([nn.Sequential(nn.Linear(64, 8), nn.Linear(8, 64)) for _ in range(2)])
    assert [path for path, _ in block_stacks(adapters)] == ["blocks"]
    with pytest.raises(ValueError, match=r"2 lists of 2 blocks of like size \(.*layers, .*layers\).*sites="):
        discover_sites(nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=2,
                                      dim_feedforward=8, batch_first=True))


def test_sites_read_the_first_block_input_and_every_block_output():
    net = NanoGPT(n_layer=3)
    found = discover_sites(net)
    assert [(layer, site) for layer, site, _ in found.sites] == [(-1, "input"), (0, "layer"), (1, "layer"),
                                                                 (2, "layer")]
    assert isinstance(found.sites[0][2], InputOf) and found.sites[0][2].module is net.transformer.h[0]
    assert found.decoder_from is None and found.stacks == ("transformer.h",)


def test_no_stack_is_a_clear_error():
    with pytest.raises(ValueError, match="no stack of blocks found in Linear.*sites="):
        discover_sites(nn.Linear(3, 3))


def test_hugging_face_blocks_from_no_split_modules():
    transformers = pytest.importorskip("transformers")
    t5 = transformers.T5ForConditionalGeneration(transformers.T5Config(
        num_layers=3, num_decoder_layers=2, d_model=32, num_heads=2, d_kv=16, d_ff=64, vocab_size=50))
    found = discover_sites(t5)
    assert found.stacks == ("encoder.block", "decoder.block") and found.decoder_from == 3
    assert len(found.sites) == 1 + 5
    vit = transformers.ViTForImageClassification(transformers.ViTConfig(
        num_hidden_layers=4, hidden_size=32, num_attention_heads=2, intermediate_size=64, image_size=16,
        patch_size=8))
    ((path, blocks),) = block_stacks(vit)
    assert len(blocks) == 4 and type(blocks[0]).__name__ == "ViTLayer"


class _Head(torch.nn.Module):
    def __init__(self, d: int, size: int):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(d, size, bias=False) for _ in range(3))

    def forward(self, x):
        weights = (self.q(x) @ self.k(x).transpose(-1, -2)).softmax(-1)
        return weights @ self.v(x)


class _KarpathyBlock(torch.nn.Module):
    """A block of Karpathy's gpt.py: its attention a list of heads, the blocks an ``nn.Sequential``."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = torch.nn.ModuleList(_Head(d, d // heads) for _ in range(heads))
        self.proj = torch.nn.Linear(d, d)
        self.ffwd = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.ReLU(), torch.nn.Linear(4 * d, d))
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)

    def forward(self, x):
        x = x + self.proj(torch.cat([h(self.ln1(x)) for h in self.heads], -1))
        return x + self.ffwd(self.ln2(x))


class _KarpathyGPT(torch.nn.Module):
    def __init__(self, n_layer: int, d: int = 16, heads: int = 4, vocab: int = 40):
        super().__init__()
        self.token_embedding_table = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.Sequential(*[_KarpathyBlock(d, heads) for _ in range(n_layer)])
        self.lm_head = torch.nn.Linear(d, vocab)

    def forward(self, idx):
        return self.lm_head(self.blocks(self.token_embedding_table(idx)))


@pytest.mark.parametrize("n_layer", [1, 3])
def test_blocks_in_an_nn_sequential_are_the_stack_not_the_heads_inside_them(n_layer):
    found = discover_sites(_KarpathyGPT(n_layer))
    assert found.stacks == ("blocks",)
    assert [layer for layer, site, _ in found.sites if site == "layer"] == list(range(n_layer))


def test_a_tensor_of_token_ids_is_a_batch_for_sigprop_s_own_models_too():
    """The monitor and measure pages say a tensor of token ids is a batch; sigprop's own models refused it (a dict
    with labels was required) while Hugging Face models and plain modules took it."""
    import torch

    import sigprop

    for arch in ("decoder", "encoder"):
        config = sigprop.TransformerConfig(n_layers=2, d_model=32, n_heads=2, arch=arch, vocab_size=64, seq_len=8)
        model = sigprop.Transformer(config, generator=torch.Generator().manual_seed(0))
        ids = torch.randint(5, 64, (2, 8), generator=torch.Generator().manual_seed(1))
        labelled = sigprop.make_batch(config, ids, torch.Generator().manual_seed(0))
        model.eval()  # no dropout: the two losses read the same batch
        assert torch.equal(model.loss(ids), model.loss(labelled))  # labelled as make_batch does, masks seeded 0
        assert len(sigprop.measure(model.train(), ids).rows) == len(sigprop.measure(model, labelled).rows)
        sigprop.Monitor(model, ids, theory=False)  # was refused: "a batch is a dict with 'inputs' and 'labels'"
