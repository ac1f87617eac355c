"""Hugging Face configurations mapped to sigprop's (the extra ``hf``; skipped without ``transformers``): per mapped
family, small configs built locally, nothing downloaded."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

import sigprop  # noqa: E402
from sigprop.hf.config_map import map_hf_config  # noqa: E402
from sigprop.model.transformer import Transformer  # noqa: E402
from tests.hf.measured import SMALL_LM_CONFIGS, B, L, layer_stats, seed_mean  # noqa: E402


def _matrix_elements(model, skip=()) -> int:
    """Elements of the parameters with two or more dimensions (weights and tables), shared ones once."""
    seen, total = set(), 0
    for name, p in model.named_parameters():
        if p.dim() >= 2 and id(p) not in seen and not any(s in name for s in skip):
            seen.add(id(p))
            total += p.numel()
    return total


SMALL = {
    "gpt2": lambda: transformers.GPT2Config(n_layer=3, n_embd=64, n_head=4, n_positions=64, vocab_size=211),
    "bert": lambda: transformers.BertConfig(num_hidden_layers=3, hidden_size=64, num_attention_heads=4,
                                            intermediate_size=128, max_position_embeddings=64, vocab_size=211),
    "llama": lambda: transformers.LlamaConfig(num_hidden_layers=3, hidden_size=64, num_attention_heads=4,
                                              num_key_value_heads=2, intermediate_size=160,
                                              max_position_embeddings=64, vocab_size=211),
    "qwen2": lambda: transformers.Qwen2Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                              num_key_value_heads=1, intermediate_size=96,
                                              max_position_embeddings=64, vocab_size=211),
    "mistral": lambda: transformers.MistralConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                                  num_key_value_heads=2, head_dim=24, intermediate_size=96,
                                                  max_position_embeddings=64, vocab_size=211),
    "roberta": lambda: transformers.RobertaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                                  intermediate_size=128, max_position_embeddings=66, vocab_size=211,
                                                  type_vocab_size=1),
    "opt": lambda: transformers.OPTConfig(num_hidden_layers=3, hidden_size=64, num_attention_heads=4, ffn_dim=160,
                                          max_position_embeddings=64, vocab_size=211),
    "phi3": lambda: transformers.Phi3Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                            num_key_value_heads=2, intermediate_size=96, max_position_embeddings=64,
                                            vocab_size=211, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "gemma": lambda: transformers.GemmaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                              num_key_value_heads=1, head_dim=16, intermediate_size=96,
                                              max_position_embeddings=64, vocab_size=211, pad_token_id=0,
                                              bos_token_id=1, eos_token_id=2),
    "qwen3": lambda: transformers.Qwen3Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                              num_key_value_heads=2, head_dim=24, intermediate_size=96,
                                              max_position_embeddings=64, vocab_size=211),
    "gpt_neox": lambda: transformers.GPTNeoXConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                                   intermediate_size=160, max_position_embeddings=64,
                                                   vocab_size=211),
    "phi": lambda: transformers.PhiConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                          intermediate_size=128, max_position_embeddings=64, vocab_size=211),
    "vit": lambda: transformers.ViTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                          intermediate_size=128, image_size=16, patch_size=4, num_channels=3,
                                          num_labels=10),
}
#: What each family's model holds that the mapped sigprop model does not (named in the mapping's notes).
NOT_MODELLED = {"bert": ("pooler",)}
LM_CLASSES = {"gpt2": "GPT2LMHeadModel", "bert": "BertForMaskedLM", "llama": "LlamaForCausalLM",
              "qwen2": "Qwen2ForCausalLM", "mistral": "MistralForCausalLM", "roberta": "RobertaForMaskedLM",
              "opt": "OPTForCausalLM", "phi3": "Phi3ForCausalLM", "gemma": "GemmaForCausalLM",
              "qwen3": "Qwen3ForCausalLM", "gpt_neox": "GPTNeoXForCausalLM", "phi": "PhiForCausalLM",
              "vit": "ViTForImageClassification"}


@pytest.mark.parametrize("family", list(SMALL))
def test_mapped_model_has_the_same_matrices(family):
    """The sigprop model built from the mapped config holds as many weight and table elements as the Hugging Face
    model (less what the notes name), so shapes, heads, widths, tying and positions all map."""
    hf_config = SMALL[family]()
    hf_model = getattr(transformers, LM_CLASSES[family])(hf_config)
    mapping = map_hf_config(hf_model)
    ours = Transformer(mapping.config)
    assert _matrix_elements(ours) == _matrix_elements(hf_model, NOT_MODELLED.get(family, ()))
    assert mapping.config.n_layers == hf_config.num_hidden_layers


def test_fields_of_each_family():
    g = map_hf_config(SMALL["gpt2"]()).config
    assert (g.arch, g.norm, g.norm_position, g.position, g.tie_head) == ("decoder", "layernorm", "pre", "learned", True)
    assert g.beta == pytest.approx(1.0 / math.sqrt(6.0)) and g.initializer_range == 0.02 and g.activation == "gelu"
    b = map_hf_config(SMALL["bert"]()).config
    assert (b.arch, b.norm_position, b.n_segments, b.norm_eps) == ("encoder", "post", 2, 1e-12)
    m = map_hf_config(SMALL["mistral"]()).config
    assert (m.position, m.norm, m.activation, m.n_kv_heads, m.head_dim, m.tie_head) == (
        "rope", "rmsnorm", "swiglu", 2, 24, False)
    assert m.rope_theta == 10000.0
    q = map_hf_config(SMALL["qwen3"]()).config
    assert (q.qk_norm, q.head_dim, q.norm_eps, q.parallel_block) == (True, 24, 1e-6, False)
    n = map_hf_config(SMALL["gpt_neox"]()).config
    assert (n.parallel_block, n.rotary_fraction, n.position, n.norm, n.tie_head) == (True, 0.25, "rope", "layernorm",
                                                                                      False)
    sequential = map_hf_config(transformers.GPTNeoXConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=4,
                                                          use_parallel_residual=False, rotary_pct=0.5)).config
    assert (sequential.parallel_block, sequential.rotary_fraction) == (False, 0.5)
    p = map_hf_config(transformers.Phi3Config(partial_rotary_factor=0.5, pad_token_id=0)).config
    assert p.rotary_fraction == 0.5


def test_gpt2_output_projection_scale_is_the_residual_beta():
    """GPT-2's _init_weights draws c_proj with std initializer_range/√(2·n_layer): the measured std of the HF
    model's c_proj equals β·initializer_range of the mapping."""
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, n_positions=64, vocab_size=211)
    model = transformers.GPT2LMHeadModel(cfg)
    mapped = map_hf_config(cfg).config
    std = float(torch.cat([b.attn.c_proj.weight.detach().flatten() for b in model.transformer.h]).std())
    assert std == pytest.approx(mapped.beta * mapped.initializer_range, rel=0.01)
    fc = float(torch.cat([b.mlp.c_fc.weight.detach().flatten() for b in model.transformer.h]).std())
    assert fc == pytest.approx(mapped.initializer_range, rel=0.01)
    # another scheme brings its own residual scales: DSLM's λ² + β² = 1, not GPT-2's β with DSLM's λ
    dslm = sigprop.make_plan(map_hf_config(cfg, init="dslm").config)
    lam, beta = float(dslm.lam["attn"][0]), float(dslm.beta["attn"][0])
    assert lam**2 + beta**2 == pytest.approx(1.0) and beta**2 == pytest.approx(2 / 4)
    assert map_hf_config(cfg, init="dslm", beta=0.1).config.beta == 0.1  # unless given too


def test_from_hf_warns_with_what_it_leaves_out_and_rejects_the_unknown(tmp_path):
    with pytest.warns(UserWarning, match="embedding LayerNorm"):
        sigprop.from_hf(SMALL["bert"]())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sigprop.from_hf(transformers.LlamaConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=4,
                                                 intermediate_size=96, vocab_size=50))  # maps fully: no warning
    with pytest.raises(ValueError, match="not mapped.*relative position buckets"):
        map_hf_config(transformers.T5Config())
    with pytest.raises(ValueError, match="config.json"):
        map_hf_config(tmp_path)
    SMALL["llama"]().save_pretrained(tmp_path)
    assert map_hf_config(tmp_path).config.n_kv_heads == 2


def test_what_the_mapping_cannot_state_is_refused_or_noted_against_the_sequence_measured():
    """GPT-2 without 1/√d_head on its scores is refused (sigprop's attention always scales them); a sliding window is
    noted when it is shorter than the sequence length measured, an override of that length included; Gemma's
    activation is the one its MLP applies."""
    with pytest.raises(ValueError, match="scale_attn_weights=False"):
        map_hf_config(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, scale_attn_weights=False))
    mistral = transformers.MistralConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=4,
                                         num_key_value_heads=2, intermediate_size=96, vocab_size=50,
                                         max_position_embeddings=16384, sliding_window=4096)
    assert not any("sliding-window" in n for n in map_hf_config(mistral).notes)  # 128 tokens measured
    assert any("sliding-window attention (4096 tokens" in n for n in map_hf_config(mistral, seq_len=8192).notes)
    if int(transformers.__version__.split(".")[0]) >= 5:
        gemma = transformers.GemmaConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=4,
                                         num_key_value_heads=4, head_dim=16, intermediate_size=96, vocab_size=50,
                                         hidden_act="silu")
        assert map_hf_config(gemma).config.activation == "swiglu"


# ----------------------------------------------------------------------------------------------------------------
# measured through sigprop: Hugging Face models against sigprop's model of the mapped config, and the prediction
# ----------------------------------------------------------------------------------------------------------------



@pytest.mark.long
@pytest.mark.parametrize("family", list(SMALL_LM_CONFIGS))
def test_hf_model_measures_like_the_mapped_sigprop_model(family):
    """Every layer's forward and gradient variance of the Hugging Face model, measured through sigprop with padding
    excluded, agrees with sigprop's own model of the mapped config (both over 8 seeds, within Z standard errors):
    the mapping and the hooks describe the same network in law."""
    from tests.helpers import Z

    hf_config = SMALL_LM_CONFIGS[family]()
    config = map_hf_config(hf_config).config.replace(seq_len=L)
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(5, config.vocab_size, (B, L), generator=gen)
    pad = torch.ones(B, L, dtype=torch.bool)
    pad[0, -6:] = False  # one padded tail: excluded from every statistic
    ids[0, -6:] = 0
    batch = sigprop.make_batch(config, ids, padding_mask=pad)
    hf_class = getattr(transformers, LM_CLASSES[family])

    def hf_one(seed):
        torch.manual_seed(seed)
        return layer_stats(sigprop.measure(hf_class(hf_config), batch), config.n_layers)

    def ours_one(seed):
        model = Transformer(config, generator=torch.Generator().manual_seed(100 + seed))
        return layer_stats(sigprop.measure(model, batch), config.n_layers)

    hf, ours = seed_mean(hf_one), seed_mean(ours_one)
    for k, what in ((0, "forward variance"), (2, "gradient variance")):
        gap = (hf[k] - ours[k]).abs()
        tol = Z * torch.sqrt(hf[k + 1] ** 2 + ours[k + 1] ** 2)
        assert bool((gap <= tol).all()), (family, what, hf[k], ours[k], tol)


@pytest.mark.long
@pytest.mark.parametrize("family", list(SMALL_LM_CONFIGS))
def test_hf_model_against_the_prediction_of_the_mapped_config(family):
    """sigprop's prediction for the mapped config (token-resolved, from the batch's own ids and labels) against the
    Hugging Face model measured over 8 seeds: every layer's forward and gradient variance within 5% plus Z standard
    errors (the theory's finite-width error at d = 128 is ~1%, docs/results/accuracy.md)."""
    from tests.helpers import Z

    hf_config = SMALL_LM_CONFIGS[family]()
    config = map_hf_config(hf_config).config.replace(seq_len=L)
    ids = torch.randint(5, config.vocab_size, (B, L), generator=torch.Generator().manual_seed(8))
    batch = sigprop.make_batch(config, ids)
    hf_class = getattr(transformers, LM_CLASSES[family])

    def hf_one(seed):
        torch.manual_seed(seed)
        return layer_stats(sigprop.measure(hf_class(hf_config), batch), config.n_layers)

    fwd, fwd_se, grad, grad_se = seed_mean(hf_one)
    pred = sigprop.predict(config, token_ids=ids, labels=batch.labels, batch_size=B)
    p_fwd, p_grad = layer_stats(pred, config.n_layers)
    assert bool(((p_fwd - fwd).abs() <= 0.05 * fwd + Z * fwd_se).all()), (family, p_fwd, fwd, fwd_se)
    assert bool(((p_grad - grad).abs() <= 0.05 * grad + Z * grad_se).all()), (family, p_grad, grad, grad_se)



def _vit_images(hf_config, n: int) -> dict:
    """n images of 2 × 2-smoothed standard normal pixels (a patch's pixels correlate) and random classes."""
    gen = torch.Generator().manual_seed(4)
    size = hf_config.image_size
    px = torch.randn(n, hf_config.num_channels, size + 1, size + 1, generator=gen)
    images = (px[..., 1:, 1:] + px[..., :-1, 1:] + px[..., 1:, :-1] + px[..., :-1, :-1]) / 2.0
    return {"pixel_values": images, "labels": torch.randint(0, hf_config.num_labels, (n,), generator=gen)}


def test_hf_vit_against_the_prediction_of_the_mapped_config():
    """A ViTForImageClassification ([CLS] token, trunc-normal [CLS] and positions) measured through sigprop on its own
    batch (``pixel_values``, ``labels``: its own loss) over 8 seeds against the prediction of the mapped config from
    the same images: every layer's forward and gradient variance within 5% plus Z standard errors, as for the
    language models above."""
    from tests.helpers import Z

    hf_config = transformers.ViTConfig(num_hidden_layers=4, hidden_size=128, num_attention_heads=4,
                                       intermediate_size=256, image_size=16, patch_size=4, num_channels=3,
                                       num_labels=10, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config = map_hf_config(hf_config).config
    assert (config.pool, config.seq_len, config.input) == ("cls", 17, "patches")
    batch = _vit_images(hf_config, 8)

    def hf_one(seed):
        torch.manual_seed(seed)
        return layer_stats(sigprop.measure(transformers.ViTForImageClassification(hf_config), batch),
                           config.n_layers)

    fwd, fwd_se, grad, grad_se = seed_mean(hf_one)
    pred = sigprop.predict(config, images=batch["pixel_values"], labels=batch["labels"], batch_size=8)
    p_fwd, p_grad = layer_stats(pred, config.n_layers)
    assert bool(((p_fwd - fwd).abs() <= 0.05 * fwd + Z * fwd_se).all()), (p_fwd, fwd, fwd_se)
    assert bool(((p_grad - grad).abs() <= 0.05 * grad + Z * grad_se).all()), (p_grad, grad, grad_se)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_hf_masked_lm_against_the_prediction_of_the_mapped_config(family):
    """A masked LM (BERT, RoBERTa: Post-LN, the head's transform before the tied decoder) measured through sigprop on a
    Hugging Face batch (``input_ids`` with 15% masked, ``attention_mask`` with a padded tail, ``labels``: its own
    loss) over 8 seeds, against the token-resolved prediction of the mapped config: every layer's forward and gradient
    variance within 5% plus Z standard errors, as for the language models above."""
    from sigprop.data.mlm import mask_tokens
    from sigprop.model.batch import Batch
    from sigprop.model.objective import MASK_ID, N_SPECIAL, PAD_ID
    from tests.helpers import Z

    cls, cfg = {"bert": (transformers.BertForMaskedLM, transformers.BertConfig),
                "roberta": (transformers.RobertaForMaskedLM, transformers.RobertaConfig)}[family]
    hf_config = cfg(num_hidden_layers=4, hidden_size=128, num_attention_heads=4, intermediate_size=512,
                    max_position_embeddings=66, vocab_size=211, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0, pad_token_id=PAD_ID, type_vocab_size=1)
    config = map_hf_config(hf_config).config.replace(seq_len=L)
    gen = torch.Generator().manual_seed(9)
    ids = torch.randint(N_SPECIAL, 211, (B, L), generator=gen)
    attention = torch.ones(B, L, dtype=torch.long)
    attention[0, -6:] = 0
    ids[0, -6:] = PAD_ID
    inputs, labels = mask_tokens(ids, MASK_ID, prob=0.15, generator=gen, pad_id=PAD_ID, vocab_size=211,
                                 random_low=N_SPECIAL)
    hf_batch = {"input_ids": inputs, "attention_mask": attention, "labels": labels}

    def hf_one(seed):
        torch.manual_seed(seed)
        return layer_stats(sigprop.measure(cls(hf_config), hf_batch), config.n_layers)

    fwd, fwd_se, grad, grad_se = seed_mean(hf_one)
    batch = Batch.from_any(hf_batch, causal=False)
    pred = sigprop.predict(config, token_ids=batch.inputs, labels=batch.labels, batch_size=B, pad_id=PAD_ID,
                           segment_ids=torch.zeros_like(batch.inputs))
    p_fwd, p_grad = layer_stats(pred, config.n_layers)
    assert bool(((p_fwd - fwd).abs() <= 0.05 * fwd + Z * fwd_se).all()), (family, p_fwd, fwd, fwd_se)
    assert bool(((p_grad - grad).abs() <= 0.05 * grad + Z * grad_se).all()), (family, p_grad, grad, grad_se)


#: Family → its small config with dropout 0.3 wherever the family has one, the embedding dropout named apart.
_DROPPED = {
    "opt": lambda: transformers.OPTConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, ffn_dim=512,
                                          max_position_embeddings=64, vocab_size=211, dropout=0.3),
    "phi3": lambda: transformers.Phi3Config(num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                                            num_key_value_heads=2, intermediate_size=256, max_position_embeddings=64,
                                            vocab_size=211, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                            resid_pdrop=0.3, embd_pdrop=0.3),
    "gpt2": lambda: transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=64, vocab_size=211,
                                            resid_pdrop=0.3, embd_pdrop=0.2, attn_pdrop=0.0),
}


@pytest.mark.parametrize("family, expected", [("opt", 0.0), ("phi3", 0.0), ("gpt2", 0.2)])
def test_the_embedding_dropout_is_the_family_s_own(family, expected):
    """OPT and Phi-3 drop out nothing after the embeddings, GPT-2 its embd_pdrop: measured in training mode over 8
    seeds, the input's variance of the Hugging Face model and of sigprop's model of the mapped config agree within
    Z standard errors (with the block dropout there, OPT's was 1/(1 − p) = 1.43× too large)."""
    from tests.helpers import Z

    hf_config = _DROPPED[family]()
    config = map_hf_config(hf_config).config.replace(seq_len=L)
    assert config.p_embed == expected and config.dropout > 0
    ids = torch.randint(5, config.vocab_size, (B, L), generator=torch.Generator().manual_seed(7))
    batch = sigprop.make_batch(config, ids)
    hf_class = getattr(transformers, LM_CLASSES[family])

    def input_variance(build):
        values = []
        for seed in range(8):
            (row,) = [r for r in sigprop.measure(build(seed), batch).rows if r.site == "input"]
            values.append(row.fwd_var)
        return torch.tensor(values)

    hf = input_variance(lambda seed: (torch.manual_seed(seed), hf_class(hf_config))[1])
    ours = input_variance(lambda seed: Transformer(config, generator=torch.Generator().manual_seed(100 + seed)))
    gap, tol = abs(hf.mean() - ours.mean()), Z * math.sqrt((hf.var() + ours.var()) / 8)
    assert gap <= tol, (family, float(hf.mean()), float(ours.mean()), tol)
