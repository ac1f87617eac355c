"""Any model measured through sigprop: Hugging Face models of any family and a user's own module, without sites or a
loss function; the loss sigprop takes on a Hugging Face batch is the model's own."""

from __future__ import annotations

import math

import pytest
import torch

import sigprop
from sigprop.core.profile import QUANTITIES
from sigprop.measurement.adapters import _head_objective, adapt
from sigprop.model.batch import Batch
from tests.measurement.nanogpt import NanoGPT

transformers = pytest.importorskip("transformers")

B, L, V = 3, 12, 97


def _ids_and_mask(seed=0):
    ids = torch.randint(3, V, (B, L), generator=torch.Generator().manual_seed(seed))
    attention = torch.ones(B, L, dtype=torch.long)
    attention[1, 8:] = 0
    ids[1, 8:] = 0
    return ids, attention


def _rel(a, b) -> float:
    return abs(float(a) - float(b)) / abs(float(b))


def _causal_lm():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, n_positions=32, vocab_size=V, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0)).eval()


def _masked_lm():
    return transformers.BertForMaskedLM(transformers.BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=V,
        max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).eval()


def _image_classifier():
    return transformers.ViTForImageClassification(transformers.ViTConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64, image_size=16,
        patch_size=4, num_labels=5, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).eval()


def test_causal_lm_loss_is_the_models_own():
    """sigprop's next-token objective on the shifted labels equals GPT-2's own outputs.loss on the unshifted ones,
    with padding excluded, and so does the objective with labels derived from the ids when the batch has none."""
    model = _causal_lm()
    ids, attention = _ids_and_mask()
    hf = {"input_ids": ids, "attention_mask": attention, "labels": ids.masked_fill(attention == 0, -100)}
    with torch.no_grad():
        own = model(**hf).loss
        adapter = adapt(model)
        batch = adapter.batch(hf)
        ours = _head_objective(model(input_ids=ids, attention_mask=attention).logits, batch, "causal_lm", "gpt2")
        derived = adapter.loss(adapter.batch({"input_ids": ids, "attention_mask": attention}))
        used = adapter.loss(batch)
    assert adapter.head == "causal_lm"
    assert _rel(ours, own) <= 1e-6 and _rel(derived, own) <= 1e-6 and _rel(used, own) <= 1e-6


def test_masked_lm_loss_is_the_models_own():
    model = _masked_lm()
    ids, attention = _ids_and_mask(1)
    labels = torch.full_like(ids, -100)
    labels[:, 2::4] = ids[:, 2::4]
    labels[attention == 0] = -100
    hf = {"input_ids": ids, "attention_mask": attention, "labels": labels,
          "token_type_ids": torch.zeros_like(ids)}
    with torch.no_grad():
        own = model(**hf).loss
        adapter = adapt(model)
        batch = adapter.batch(hf)
        ours = _head_objective(model(**batch.hf_kwargs(labels=False)).logits, batch, "masked_lm", "bert")
        used = adapter.loss(batch)
    assert adapter.head == "masked_lm" and _rel(ours, own) <= 1e-6 and _rel(used, own) <= 1e-6
    with pytest.raises(ValueError, match="masked lm: its batch needs labels"):
        adapter.loss(adapter.batch({"input_ids": ids}))


def test_image_classifier_loss_is_the_models_own():
    model = _image_classifier()
    gen = torch.Generator().manual_seed(2)
    hf = {"pixel_values": torch.randn(4, 3, 16, 16, generator=gen), "labels": torch.tensor([0, 4, 2, 1])}
    with torch.no_grad():
        own = model(**hf).loss
        adapter = adapt(model)
        batch = adapter.batch(hf)
        ours = _head_objective(model(pixel_values=hf["pixel_values"]).logits, batch, "image_classification", "vit")
        used = adapter.loss(batch)
    assert adapter.head == "image_classification" and _rel(ours, own) <= 1e-6 and _rel(used, own) <= 1e-6
    profile = sigprop.measure(model.train(), hf)
    layers = profile.site("layer")
    assert len(layers) == 2 and all(math.isfinite(r.fwd_var) and r.grad_var > 0 for r in layers)


def test_discovered_sites_are_the_tensors_of_the_named_ones():
    """GPT-2's sites found from the model (the first block's input, every block's output) record the very tensors of
    the sites once named by hand (the embedding dropout's output and each block's): the same profile, to the bit."""
    model = _causal_lm().train()
    ids, attention = _ids_and_mask(3)
    hf = {"input_ids": ids, "attention_mask": attention}
    base = model.transformer
    named = [(-1, "input", base.drop)] + [(i, "layer", block) for i, block in enumerate(base.h)]
    found = sigprop.measure(model, hf)
    torch.manual_seed(0)
    explicit = sigprop.measure(model, hf, sites=named)
    assert found.meta["sites_from"] == ["transformer.h"] and found.meta["padding_excluded"]
    for a, b in zip(found.rows, explicit.rows, strict=True):
        assert (a.layer, a.site) == (b.layer, b.site)
        assert all(getattr(a, q) == getattr(b, q) for q in QUANTITIES)


def test_recorder_takes_a_hugging_face_model():
    model = _causal_lm()
    ids, attention = _ids_and_mask(4)
    with sigprop.Recorder(model, mask=attention.bool()) as rec:
        model(input_ids=ids, attention_mask=attention, labels=ids).loss.backward()
    profile = rec.profile()
    assert [(r.layer, r.site) for r in profile.rows] == [(-1, "input"), (0, "layer"), (1, "layer")]
    assert all(math.isfinite(r.grad_var) for r in profile.rows)
    assert profile.config["model_type"] == "gpt2"


def test_a_family_sigprop_does_not_map_is_measured():
    """A BLOOM (no configuration mapping, no theory) measured with neither sites nor a loss: a row per block."""
    cfg = transformers.BloomConfig(n_layer=5, hidden_size=32, n_head=2, vocab_size=V, hidden_dropout=0.0,
                                   attention_dropout=0.0)
    model = transformers.BloomForCausalLM(cfg)
    ids, attention = _ids_and_mask(5)
    profile = sigprop.measure(model, {"input_ids": ids, "attention_mask": attention})
    layers = profile.site("layer")
    assert len(layers) == cfg.n_layer
    assert all(r.fwd_var > 0 and r.grad_var > 0 and math.isfinite(r.fwd_corr) for r in layers)


def test_a_users_own_module_is_measured_without_sites_or_loss():
    """A nanoGPT-style module: its blocks found, its logits scored as a causal LM (labels from the ids); the
    objective is the next-token cross-entropy over the real tokens, computed here by hand."""
    net = NanoGPT(n_layer=6, vocab=V)
    ids, attention = _ids_and_mask(6)
    profile = sigprop.measure(net, ids)
    assert len(profile.site("layer")) == len(net.transformer.h)
    assert all(r.grad_var > 0 for r in profile.rows)
    masked = sigprop.measure(net, {"input_ids": ids, "attention_mask": attention})
    assert masked.meta["padding_excluded"] and not profile.meta["padding_excluded"]
    adapter = adapt(net)
    with torch.no_grad():
        logits = net(ids)
        keep = attention[:, :-1].bool() & attention[:, 1:].bool()
        by_hand = torch.nn.functional.cross_entropy(logits[:, :-1][keep], ids[:, 1:][keep])
        ours = adapter.loss(Batch.from_any({"input_ids": ids, "attention_mask": attention}))
    assert _rel(ours, by_hand) <= 1e-6


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match="no stack of blocks"):
        sigprop.measure(torch.nn.Linear(3, 3), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="none of the known keys.*input_ids.*pixel_values"):
        sigprop.measure(_causal_lm(), {"tokens": torch.zeros(2, 3, dtype=torch.long)})


class _Protocol(torch.nn.Module):
    """A user's module written for sigprop's site protocol: a ``loss(batch)`` taking the batch in its own form."""

    def __init__(self, with_loss: bool = True):
        super().__init__()
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(8, 8) for _ in range(3)])
        self.with_loss = with_loss

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return x

    def sites(self):
        return [(i, "layer", block) for i, block in enumerate(self.blocks)]

    def loss(self, batch):
        if not self.with_loss:
            raise AssertionError("not reached")
        return self(batch["features"]).square().mean()


def test_a_protocol_model_gets_its_batch_as_given():
    """The site protocol is unchanged: ``model.loss`` receives the caller's own batch (keys of its own, float
    inputs), also when ``sites=`` is given; a model with ``sites()`` but no loss is a one-line error."""
    model = _Protocol()
    batch = {"features": torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0)), "extra": 1}
    profile = sigprop.measure(model, batch)
    assert [(r.layer, r.site) for r in profile.rows] == [(0, "layer"), (1, "layer"), (2, "layer")]
    assert all(r.grad_var > 0 for r in profile.rows)
    assert len(sigprop.measure(model, batch, sites=model.sites()[:1]).rows) == 1
    model.loss = None
    with pytest.raises(ValueError, match="no loss\\(batch\\) method"):
        sigprop.measure(model, batch)


def test_a_plain_module_reads_hugging_face_labels_as_a_causal_lm():
    """A Hugging Face dict's labels are unshifted next tokens: a plain module's token logits are scored against
    them shifted, the same loss as from the ids alone."""
    net = NanoGPT(n_layer=2, vocab=V)
    ids, attention = _ids_and_mask(7)
    adapter = adapt(net)
    with torch.no_grad():
        given = adapter.loss(adapter.batch({"input_ids": ids, "attention_mask": attention,
                                            "labels": ids.masked_fill(attention == 0, -100)}))
        derived = adapter.loss(adapter.batch({"input_ids": ids, "attention_mask": attention}))
    assert _rel(given, derived) <= 1e-6


class _Shared(torch.nn.Module):
    """ALBERT's way: one block applied at every depth, held in a list of one."""

    def __init__(self, depth: int = 3):
        super().__init__()
        self.embed = torch.nn.Embedding(V, 16)
        self.blocks = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh())])
        self.head = torch.nn.Linear(16, V)
        self.depth = depth

    def forward(self, ids):
        x = self.embed(ids)
        for _ in range(self.depth):
            x = x + self.blocks[0](x)
        return self.head(x)


class _SequenceFirst(torch.nn.Module):
    """Blocks that read and return (tokens, batch, hidden), as nn.TransformerEncoderLayer does by default."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(V, 16)
        self.blocks = torch.nn.ModuleList([torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0)
                                           for _ in range(2)])
        self.head = torch.nn.Linear(16, V)

    def forward(self, ids):
        x = self.embed(ids).transpose(0, 1)
        for block in self.blocks:
            x = block(x)
        return self.head(x.transpose(0, 1))


def test_what_a_generic_model_hides_is_said_not_measured_wrongly():
    """Shared blocks (one module for several layers) and sequence-first blocks would give rows that are not the
    layers' (pooled over depth; correlated over the batch instead of the tokens): both refused, naming why."""
    ids = torch.randint(0, V, (2, 6), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"ran 3 times in 1 forward pass\(es\).*shares its blocks"):
        sigprop.measure(_Shared(), ids)
    with pytest.raises(ValueError, match=r"\(tokens, batch, hidden\).*batch_first"):
        sigprop.measure(_SequenceFirst(), ids)


def test_a_loss_that_runs_the_model_twice_is_not_taken_for_shared_blocks():
    """A pair loss (two forward passes of the model per step: contrastive pairs, chosen and rejected) runs each
    block once per pass: measured, both passes pooled."""
    net = NanoGPT(n_layer=2, vocab=V)
    ids, _ = _ids_and_mask(2)
    profile = sigprop.measure(net, ids, loss_fn=lambda m, b: (m(b).logsumexp(-1) - m(b.flip(1)).logsumexp(-1)).pow(
        2).mean())
    assert len(profile.site("layer")) == 2 and profile.meta["forward_passes"] == 2


def test_gradients_are_measured_inside_no_grad_and_hugging_face_masks_are_read_with_a_loss_of_one_s_own():
    net = NanoGPT(n_layer=2, vocab=V)
    ids, attention = _ids_and_mask(2)
    with torch.no_grad():
        profile = sigprop.measure(net, ids)
    assert all(r.grad_var > 0 for r in profile.rows)

    def loss_fn(model, batch):  # a batch with a key the adapters do not know: only the loss reads it
        return model(batch["input_ids"]).logsumexp(-1).mean() * batch["scale"]

    own = sigprop.measure(net, {"input_ids": ids, "attention_mask": attention, "scale": 1.0}, loss_fn=loss_fn)
    assert own.meta["padding_excluded"]


class _DictGPT(NanoGPT):
    """Returns a plain dict, and holds its loss function as an attribute (as many training scripts do)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, idx):
        return {"logits": super().forward(idx)}


class _KeywordGPT(NanoGPT):
    """Calls its blocks with the stream as a keyword, ``block(x=x)``."""

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x=x)
        return self.lm_head(self.transformer.ln_f(x))


class _CheckpointedGPT(NanoGPT):
    def forward(self, idx):
        from torch.utils.checkpoint import checkpoint

        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = checkpoint(block, x, use_reentrant=True)
        return self.lm_head(self.transformer.ln_f(x))


def test_a_dict_output_a_loss_attribute_and_a_keyword_stream_are_read():
    """A model returning {"logits": ...} with a loss module as its `loss` attribute is a plain module (not sigprop's
    protocol) scored on its logits; a first block called as block(x=x) has its stream read from the keyword. Both
    give the plain nanoGPT's profile, the same weights."""
    ids, _ = _ids_and_mask(6)
    plain = NanoGPT(n_layer=3, vocab=V)
    reference = sigprop.measure(plain, ids)
    for cls in (_DictGPT, _KeywordGPT):
        other = cls(n_layer=3, vocab=V)
        other.load_state_dict(plain.state_dict())
        assert adapt(other).kind == "module"
        profile = sigprop.measure(other, ids)
        for a, b in zip(profile.rows, reference.rows, strict=True):
            assert (a.layer, a.site) == (b.layer, b.site)
            assert _rel(a.fwd_var, b.fwd_var) <= 1e-6 and _rel(a.grad_var, b.grad_var) <= 1e-5


def test_reentrant_checkpointing_is_refused_in_one_line():
    ids, _ = _ids_and_mask(6)
    with pytest.raises(ValueError, match="activation checkpointing"):
        sigprop.measure(_CheckpointedGPT(n_layer=2, vocab=V), ids)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_a_nested_tensor_from_torchs_encoder_fast_path_is_refused_in_one_line():
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()
    x = torch.randn(2, 6, 16)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    from sigprop.measurement.hooks import Recorder

    with (pytest.raises(ValueError, match="enable_nested_tensor=False"), torch.no_grad(),
          Recorder(encoder, mask=mask, grads=False)):
        encoder(x, src_key_padding_mask=~mask)
