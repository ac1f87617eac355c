"""Where each weight role lives in a Hugging Face model (``sigprop.hf.weights``): the plan read from a model's
weights is the mapped configuration's at initialisation (within the sampling error of its finite draws), follows a
hand-scaled weight, and lists what trained weights break (the extra ``hf``; skipped without ``transformers``)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from sigprop.hf.config_map import map_hf_config  # noqa: E402
from sigprop.hf.weights import hf_weights, read_hf_plan  # noqa: E402
from sigprop.model.init import make_plan  # noqa: E402
from tests.helpers import Z  # noqa: E402
from tests.hf.measured import SMALL_LM_CONFIGS  # noqa: E402

CLASSES = {"gpt2": transformers.GPT2LMHeadModel, "llama": transformers.LlamaForCausalLM,
           "opt": transformers.OPTForCausalLM, "phi3": transformers.Phi3ForCausalLM,
           "qwen3": transformers.Qwen3ForCausalLM, "gpt_neox": transformers.GPTNeoXForCausalLM,
           "phi": transformers.PhiForCausalLM, "gemma": transformers.GemmaForCausalLM}


def _fresh(family: str):
    if family in ("bert", "roberta"):
        cls, cfg = {"bert": (transformers.BertForMaskedLM, transformers.BertConfig),
                    "roberta": (transformers.RobertaForMaskedLM, transformers.RobertaConfig)}[family]
        return cls(cfg(num_hidden_layers=3, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                       max_position_embeddings=66, vocab_size=211))
    if family == "vit":
        return transformers.ViTForImageClassification(transformers.ViTConfig(
            num_hidden_layers=3, hidden_size=64, num_attention_heads=4, intermediate_size=128, image_size=16,
            patch_size=4, num_channels=3, num_labels=10))
    return CLASSES[family](SMALL_LM_CONFIGS[family]())


@pytest.mark.parametrize("family", [*CLASSES, "bert", "roberta", "vit"])
def test_a_fresh_model_reads_as_its_mapped_plan(family):
    """Each role's standard deviation read from a freshly initialised model equals the mapped configuration's
    (times its β for a branch's output projection, where the mapping carries GPT-2's scaled c_proj), within Z times
    the relative standard error of a root mean square over n draws, √(1/(2n))."""
    torch.manual_seed(0)
    model = _fresh(family)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = map_hf_config(model).config
    expected, read = make_plan(config), read_hf_plan(model, config)
    counts: dict = {}
    for slot in hf_weights(model).slots:
        counts[(slot.role, slot.layer)] = counts.get((slot.role, slot.layer), 0) + slot.tensor.numel()
    assert read.notes["approximations"] == []
    for (role, layer), n in counts.items():
        site = {"o": "attn", "w2": "ffn"}.get(role)
        beta = 1.0 if site is None else expected.scales(site, layer)[1]
        want = expected.std(role, layer) * beta
        tol = Z * want * math.sqrt(1.0 / (2 * n))
        assert abs(read.std(role, layer) - want) <= tol, (family, role, layer, read.std(role, layer), want)
    assert np.all(read.beta["attn"] == 1.0) and read.head_scale == 1.0


def test_a_scaled_weight_and_trained_parameters_are_read():
    torch.manual_seed(1)
    model = CLASSES["gpt2"](SMALL_LM_CONFIGS["gpt2"]())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = map_hf_config(model).config
    before = read_hf_plan(model, config).std("o", 2)
    with torch.no_grad():
        model.transformer.h[2].attn.c_proj.weight.mul_(300.0)
        model.transformer.h[0].mlp.c_fc.bias.fill_(0.1)
        model.transformer.h[1].ln_1.weight.fill_(2.0)
    after = read_hf_plan(model, config)
    assert after.std("o", 2) == pytest.approx(300.0 * before, rel=1e-9)
    notes = " ".join(after.notes["approximations"])
    assert "non-zero biases (e.g. h.0.mlp.c_fc)" in notes and "h.1.ln_1" in notes and "an approximation" in notes


def test_families_without_a_layout_say_why():
    bloom = transformers.BloomForCausalLM(transformers.BloomConfig(n_layer=2, hidden_size=32, n_head=2))
    with pytest.raises(ValueError, match="'bloom'.*not mapped"):
        hf_weights(bloom)
