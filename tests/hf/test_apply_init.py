"""``sigprop.apply_init``: a Hugging Face GPT-2 or Llama model re-initialised under a scheme, its residual scales
folded into the output projections, measures like sigprop's own model of that scheme (the extra ``hf``; skipped
without ``transformers``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

import sigprop  # noqa: E402
from sigprop.hf.config_map import map_hf_config  # noqa: E402
from sigprop.model.transformer import Transformer  # noqa: E402
from tests.helpers import Z  # noqa: E402
from tests.hf.measured import SMALL_LM_CONFIGS, B, L, layer_stats, seed_mean  # noqa: E402

CLASSES = {"gpt2": transformers.GPT2LMHeadModel, "llama": transformers.LlamaForCausalLM,
           "opt": transformers.OPTForCausalLM, "phi3": transformers.Phi3ForCausalLM,
           "qwen3": transformers.Qwen3ForCausalLM, "gpt_neox": transformers.GPTNeoXForCausalLM,
           "phi": transformers.PhiForCausalLM, "gemma": transformers.GemmaForCausalLM}


@pytest.mark.long
@pytest.mark.parametrize("family,scheme", [("gpt2", "dslm"), ("llama", "dslm"), ("gpt2", "xavier"), ("opt", "dslm"),
                                           ("phi3", "dslm"), ("qwen3", "dslm"), ("gpt_neox", "dslm"),
                                           ("phi", "dslm"), ("gemma", "dslm")])
def test_reinitialised_hf_model_measures_like_sigprops_model_of_the_scheme(family, scheme):
    """Every layer's forward and gradient variance of the re-initialised Hugging Face model, rescaled by the fold's
    c_l² (module :mod:`sigprop.fix.apply_init`), agrees with sigprop's model of the mapped config under the scheme (8
    seeds each, within Z standard errors): a wrong standard deviation or fold factor fails it."""
    hf_config = SMALL_LM_CONFIGS[family]()
    config = map_hf_config(hf_config).config.replace(seq_len=L, init=scheme, lam=None, beta=None)
    ids = torch.randint(5, config.vocab_size, (B, L), generator=torch.Generator().manual_seed(8))
    batch = sigprop.make_batch(config, ids)

    def hf_one(seed):
        model = CLASSES[family](hf_config)
        sigprop.apply_init(model, scheme, generator=torch.Generator().manual_seed(seed))
        return layer_stats(sigprop.measure(model, batch), config.n_layers)

    def ours_one(seed):
        model = Transformer(config, generator=torch.Generator().manual_seed(100 + seed))
        return layer_stats(sigprop.measure(model, batch), config.n_layers)

    hf, ours = seed_mean(hf_one), seed_mean(ours_one)
    plan = sigprop.make_plan(config)  # the folded stream is sigprop's / c_l, c_l = Π λ up to layer l
    sites = ("attn",) if config.parallel_block else ("attn", "ffn")  # a parallel block: one residual per layer
    c2 = torch.tensor(np.prod([plan.lam[s] ** 2 for s in sites], axis=0), dtype=torch.float64).cumprod(0)
    hf = [hf[0] * c2, hf[1] * c2, hf[2] / c2, hf[3] / c2]
    for k, what in ((0, "forward variance"), (2, "gradient variance")):
        gap = (hf[k] - ours[k]).abs()
        tol = Z * torch.sqrt(hf[k + 1] ** 2 + ours[k + 1] ** 2)
        assert bool((gap <= tol).all()), (family, scheme, what, hf[k], ours[k], tol)


def test_the_fold_is_applied():
    """DeepScaleLM at 4 layers: the FFN output projection of the last layer carries β/Πλ = √(1/2)/(1/2)⁴ = 11.3
    times the scheme's standard deviation."""
    model = transformers.GPT2LMHeadModel(SMALL_LM_CONFIGS["gpt2"]())
    sigprop.apply_init(model, "dslm", generator=torch.Generator().manual_seed(0))
    config = map_hf_config(model).config.replace(init="dslm", lam=None, beta=None)
    std = sigprop.make_plan(config).std("w2", 3)
    measured = float(model.transformer.h[3].mlp.c_proj.weight.detach().std())
    assert measured == pytest.approx(std * math.sqrt(0.5) / 0.5**4, rel=0.05)


def test_sigprop_model_and_errors():
    config = map_hf_config(SMALL_LM_CONFIGS["gpt2"]()).config.replace(lam=None, beta=None, init="xavier")
    model = sigprop.apply_init(Transformer(config), "dslm", generator=torch.Generator().manual_seed(0))
    assert model.config.init == "dslm" and model.plan.scheme == "dslm"
    assert float(model.layers[0].attn.lam) == pytest.approx(math.sqrt(0.5))
    with pytest.raises(ValueError, match="scheme must be one of"):
        sigprop.apply_init(model, "nope")
    bloom = transformers.BloomForCausalLM(transformers.BloomConfig(n_layer=2, hidden_size=32, n_head=2))
    with pytest.raises(ValueError, match="'bloom'.*not mapped"):
        sigprop.apply_init(bloom, "dslm")


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_reinitialised_masked_lm_measures_like_sigprops_model_of_the_scheme(family):
    """BERT and RoBERTa re-initialised under DeepScaleLM (Post-LN: the fold β/λ in the output projections, the head
    transform's weights, the embedding LayerNorm at 1/0) against sigprop's model of the mapped config under the
    scheme, over 8 seeds each, within Z standard errors at every layer; the embedding LayerNorm, which sigprop's model
    lacks, meets a sum of unit variance there (DSLM's embeddings), so it changes nothing the measurement resolves."""
    cls, cfg = {"bert": (transformers.BertForMaskedLM, transformers.BertConfig),
                "roberta": (transformers.RobertaForMaskedLM, transformers.RobertaConfig)}[family]
    hf_config = cfg(num_hidden_layers=4, hidden_size=128, num_attention_heads=4, intermediate_size=512,
                    max_position_embeddings=66, vocab_size=211, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)
    config = map_hf_config(hf_config).config.replace(seq_len=L, init="dslm", lam=None, beta=None)
    ids = torch.randint(5, config.vocab_size, (B, L), generator=torch.Generator().manual_seed(8))
    batch = sigprop.make_batch(config, ids)

    def hf_one(seed):
        model = cls(hf_config)
        sigprop.apply_init(model, "dslm", generator=torch.Generator().manual_seed(seed))
        return layer_stats(sigprop.measure(model, batch), config.n_layers)

    def ours_one(seed):
        model = Transformer(config, generator=torch.Generator().manual_seed(100 + seed))
        return layer_stats(sigprop.measure(model, batch), config.n_layers)

    hf, ours = seed_mean(hf_one), seed_mean(ours_one)  # Post-LN: the fold changes no stream's scale
    for k, what in ((0, "forward variance"), (2, "gradient variance")):
        gap = (hf[k] - ours[k]).abs()
        tol = Z * torch.sqrt(hf[k + 1] ** 2 + ours[k + 1] ** 2)
        assert bool((gap <= tol).all()), (family, what, hf[k], ours[k], tol)


def test_a_model_whose_weights_the_layout_does_not_all_hold_is_refused_by_name():
    """A BERT body or classifier (the layout reads the masked-LM head), a GPT-2 or Llama classifier (its ``score``
    would keep Hugging Face's draw): a ValueError naming the class and the weight, never an AttributeError nor a
    weight silently left out; the language-model classes and the bare decoder bodies are held whole."""
    bert = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=64)
    gpt2 = SMALL_LM_CONFIGS["gpt2"]()
    gpt2.pad_token_id = 0
    for model, needle in ((transformers.BertModel(bert), "BertModel.*language-model class"),
                          (transformers.BertForSequenceClassification(bert), "language-model class"),
                          (transformers.GPT2ForSequenceClassification(gpt2), "score.weight")):
        with pytest.raises(ValueError, match=needle):
            sigprop.apply_init(model, "dslm")
    for model in (transformers.GPT2Model(gpt2), transformers.BertForMaskedLM(bert)):
        sigprop.apply_init(model, "xavier", generator=torch.Generator().manual_seed(0))
