"""Folding and GPT-2 / OPT export (Kedia et al. Sec. 3.5): the exported checkpoint loads with ``from_pretrained`` (no
remote code) and gives sigprop's logits (skipped without ``transformers``)."""

from __future__ import annotations

import math

import pytest
import torch

transformers = pytest.importorskip("transformers")

from sigprop.fix.export import export_hf  # noqa: E402
from sigprop.fix.fold import branch_scales, plan_branch_scales  # noqa: E402
from sigprop.model.config import TransformerConfig  # noqa: E402
from sigprop.model.transformer import Transformer, plan_for  # noqa: E402

BASE = dict(arch="decoder", n_layers=6, d_model=64, n_heads=4, vocab_size=97, max_len=32, seq_len=32, dropout=0.0)


HF_CLASS = {"gpt2": "GPT2LMHeadModel", "opt": "OPTForCausalLM", "bert": "BertForMaskedLM",
            "llama": "LlamaForCausalLM"}


def _export_error(tmp_path, to: str, fields: dict, eps_zero: bool = False, embedding_norm: bool = False,
                  trained_norms: bool = False, outlier: bool = False):
    """sigprop's model of ``fields`` and its ``to`` export (float64), and the relative difference of their logits.
    With ``eps_zero`` every LayerNorm of both models is set to ε = 0 after the export (OPT's ε is fixed at 1e-5); with
    ``embedding_norm`` sigprop's embedding output goes through a LayerNorm (weight 1, bias 0) first: the model a BERT
    export computes (``sigprop.fix.export``, ``to="bert"``); with ``trained_norms`` every norm's weight and bias
    move off 1 and 0 (by 0.3·N(0, 1) each), as training moves them; with ``outlier`` the last layer's output has
    one outlier feature (its FFN's first output row × 1000), as trained BERTs have."""
    config = TransformerConfig(**fields)
    model = Transformer(config, generator=torch.Generator().manual_seed(0)).double().eval()
    if trained_norms:
        moved = torch.Generator().manual_seed(2)
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, torch.nn.LayerNorm) or type(m).__name__ == "RMSNorm":
                    for p in (getattr(m, "weight", None), getattr(m, "bias", None)):
                        if p is not None:
                            p.add_(0.3 * torch.randn(p.shape, generator=moved, dtype=p.dtype))
    if outlier:
        with torch.no_grad():
            model.layers[-1].ffn.branch.fc2.weight[0].mul_(1000.0)
    out = export_hf(model, tmp_path / to, to=to)
    hf = getattr(transformers, HF_CLASS[to]).from_pretrained(out, dtype=torch.float64).eval()
    if eps_zero:
        for m in (*model.modules(), *hf.modules()):
            if isinstance(m, torch.nn.LayerNorm):
                m.eps = 0.0
            elif hasattr(m, "variance_epsilon"):  # Llama's RMSNorm
                m.variance_epsilon = 0.0
            elif type(m).__name__ == "RMSNorm":  # sigprop's
                m.eps = 0.0
    if embedding_norm:
        eps = 0.0 if eps_zero else config.norm_eps
        model.embed_drop.register_forward_hook(
            lambda mod, args, y: torch.nn.functional.layer_norm(y, (config.d_model,), eps=eps))
    ids = torch.randint(0, config.vocab_size, (3, config.seq_len), generator=torch.Generator().manual_seed(1))
    segments = torch.zeros_like(ids)
    segments[:, config.seq_len // 2:] = 1 if config.n_segments else 0
    with torch.no_grad():
        ours = model(ids, segment_ids=segments) if config.n_segments else model(ids)
        theirs = hf(ids, **({"token_type_ids": segments} if to == "bert" else {})).logits
    return model, float((ours - theirs).norm() / ours.norm())


def _pair(tmp_path, **fields):
    return _export_error(tmp_path, "gpt2", {**BASE, **fields})


@pytest.mark.parametrize("init,activation", [("dslm", "gelu"), ("xavier", "relu"), ("dslm_simple", "gelu")])
def test_exported_gpt2_gives_the_same_logits_without_eps(tmp_path, init, activation):
    """With ε = 0 the fold is exact: float64 logits agree to rounding."""
    _, err = _pair(tmp_path, init=init, activation=activation, norm_eps=0.0)
    assert err <= 1e-12


def test_exported_gpt2_with_eps_within_the_folds_bound(tmp_path):
    """With ε the folded norms see the stream divided by c = Πλ, i.e. an effective ε·c²: each of the 2N + 1 norms
    changes its output by at most ε|1 − c²|/(2σ²) relative, σ² ≥ 0.5 the smallest stream variance of a DSLM Pre-LN
    stack at initialisation (sigprop predicts ~1), so the logits move by at most the sum of those."""
    model, err = _pair(tmp_path, init="dslm", activation="gelu", norm_eps=1e-5)
    lam2 = float(model.layers[0].attn.lam) ** 2
    worst = abs(1.0 - lam2 ** (2 * model.config.n_layers))  # the largest |1 − c²|: the last norm's
    bound = (2 * model.config.n_layers + 1) * 1e-5 * worst / (2 * 0.5)
    assert 0.0 < err <= bound, (err, bound)
    print(f"fold with eps: relative logit error {err:.2e} (bound {bound:.2e})")


def test_branch_scales_fold_lambda_into_the_output_projections():
    config = TransformerConfig(**{**BASE, "init": "dslm"})
    model = Transformer(config, sample=False)
    beta2 = 2.0 / config.n_layers
    lam = math.sqrt(1.0 - beta2)
    scales = branch_scales(model)
    assert scales[0]["attn"] == pytest.approx(math.sqrt(beta2) / lam)
    assert scales[-1]["ffn"] == pytest.approx(math.sqrt(beta2) / lam ** (2 * config.n_layers))
    post = Transformer(config.replace(norm_position="post"), sample=False)
    assert branch_scales(post)[3]["ffn"] == pytest.approx(math.sqrt(beta2) / lam)


@pytest.mark.parametrize("fields", [dict(init="dslm"), dict(init="dslm", norm_position="post"),
                                    dict(init="auto", arch="encoder", activation="swiglu", norm="rmsnorm")])
def test_the_plan_s_fold_factors_are_the_built_model_s(fields):
    """What ``apply_init`` folds into a Hugging Face model without building sigprop's (the plan's λ, β in float64) is
    what the model built from that plan carries, up to its float32 buffers: each λ and β rounded by ≤ 2⁻²⁴ relative,
    and a Pre-LN factor β_l/Π λ_j compounds at most 2N + 1 of those roundings."""
    config = TransformerConfig(**{**BASE, **fields})
    plan = plan_for(config)
    from_plan = plan_branch_scales(config, plan)
    from_model = branch_scales(Transformer(config, plan=plan, sample=False))
    rel = (2 * config.n_layers + 1) * 2.0 ** -24
    assert [list(f) for f in from_plan] == [list(f) for f in from_model]
    for ours, theirs in zip(from_plan, from_model, strict=True):
        assert ours == pytest.approx(theirs, rel=rel, abs=0.0)


def test_folding_refuses_norms_that_see_their_input_s_scale():
    """DyT and Derf squash elementwise: a branch scale moved into the weights changes what they output."""
    for norm in ("dyt", "derf"):
        with pytest.raises(ValueError, match="ignore their input's scale"):
            branch_scales(Transformer(TransformerConfig(**{**BASE, "norm": norm}), sample=False))


def test_export_refuses_what_gpt2_cannot_hold(tmp_path):
    with pytest.raises(ValueError, match="norm_position"):
        export_hf(Transformer(TransformerConfig(**{**BASE, "norm_position": "post"}), sample=False), tmp_path / "x")
    with pytest.raises(ValueError, match="to must be one of"):
        export_hf(Transformer(TransformerConfig(**BASE), sample=False), tmp_path / "x", to="t5")
    with pytest.raises(ValueError, match="OPT needs 'post'"):
        export_hf(Transformer(TransformerConfig(**BASE), sample=False), tmp_path / "x", to="opt")
    with pytest.raises(ValueError, match="norm_eps"):
        export_hf(Transformer(TransformerConfig(**{**BASE, "norm_position": "post", "norm_eps": 1e-6}), sample=False),
                  tmp_path / "x", to="opt")
    with pytest.raises(ValueError, match="BERT needs 'encoder'"):
        export_hf(Transformer(TransformerConfig(**{**BASE, "norm_position": "post"}), sample=False), tmp_path / "x",
                  to="bert")
    assert not (tmp_path / "x").exists()


def _opt_pair(tmp_path, eps_zero: bool, **fields):
    return _export_error(tmp_path, "opt", {**BASE, "norm_position": "post", **fields}, eps_zero)


@pytest.mark.parametrize("init,activation", [("dslm", "gelu"), ("xavier", "relu")])
def test_exported_opt_gives_the_same_logits_without_eps(tmp_path, init, activation):
    """A Post-LN decoder as OPT (``do_layer_norm_before=False``, positions after OPT's two offset rows): with ε = 0
    the fold β/λ is exact, float64 logits agree to rounding."""
    _, err = _opt_pair(tmp_path, True, init=init, activation=activation)
    assert err <= 1e-12


def test_exported_opt_with_eps_within_the_folds_bound(tmp_path):
    """With ε each folded Post-LN norm sees its input divided by λ, an effective ε/λ²: each of the 2N norms changes
    its output by at most ε|1/λ² − 1|/(2σ²) relative, σ² ≥ 0.5 (the norm's input is a unit stream plus a branch)."""
    model, err = _opt_pair(tmp_path, False, init="dslm", activation="gelu")
    lam2 = float(model.layers[0].attn.lam) ** 2
    bound = 2 * model.config.n_layers * 1e-5 * abs(1.0 / lam2 - 1.0) / (2 * 0.5)
    assert 0.0 < err <= bound, (err, bound)
    print(f"OPT fold with eps: relative logit error {err:.2e} (bound {bound:.2e})")


ENCODER = dict(arch="encoder", norm_position="post", n_layers=6, d_model=64, n_heads=4, vocab_size=97, max_len=32,
               seq_len=32, dropout=0.0)


def _bert_pair(tmp_path, eps_zero: bool, embedding_norm: bool, trained_norms: bool = False, **fields):
    return _export_error(tmp_path, "bert", {**ENCODER, **fields}, eps_zero, embedding_norm, trained_norms)[1]


@pytest.mark.parametrize("init,fields", [("dslm", {}), ("xavier", dict(activation="relu")),
                                         ("dslm", dict(n_segments=2, tie_head=False)),
                                         ("bert", dict(head_transform=True)),
                                         ("dslm", dict(head_transform=True, activation="relu"))])
def test_exported_bert_is_sigprop_s_model_with_an_embedding_norm(tmp_path, init, fields):
    """BERT's MLM head transform is the model's own (``head_transform``) or made the identity (dense = I shifted onto
    GELU's linear branch, the shift removed by its LayerNorm); its embedding LayerNorm cannot be: with ε = 0 the
    export computes sigprop's model with that norm applied to the embedding output, to float64 rounding."""
    assert _bert_pair(tmp_path, True, True, init=init, **fields) <= 1e-12


@pytest.mark.parametrize("init,fields", [("dslm", {}), ("xavier", dict(activation="relu", tie_head=False)),
                                         ("dslm", dict(head_transform=True))])
def test_a_trained_model_s_norms_survive_the_bert_export(tmp_path, init, fields):
    """Norm weights and biases off 1 and 0, as after training: the last layer's norm is undone and redone through
    the head transform, so the export still computes sigprop's model (with the embedding norm), to float64 rounding;
    a norm weight of exactly 0 cannot be undone and is refused."""
    assert _bert_pair(tmp_path, True, True, trained_norms=True, init=init, **fields) <= 1e-12
    model = Transformer(TransformerConfig(**ENCODER, init=init))
    with torch.no_grad():
        model.layers[-1].ffn_norm.weight[0] = 0.0
    with pytest.raises(ValueError, match="weight of exactly 0"):
        export_hf(model, tmp_path / "zero", to="bert")


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_an_outlier_feature_stays_on_the_bert_heads_linear_branch(tmp_path, activation):
    """One feature far from the rest (a normalised coordinate near −√(d − 1) ≈ −22.6 at d = 512, beyond a fixed shift
    of 20): the head transform's shift grows with √d, so the export still computes sigprop's model exactly."""
    fields = dict(ENCODER, n_layers=1, d_model=512, n_heads=8, d_ff=512, activation=activation)
    assert _export_error(tmp_path, "bert", fields, True, True, outlier=True)[1] <= 1e-12


def test_exported_bert_s_logits_against_sigprop_s_own(tmp_path):
    """The difference the embedding LayerNorm makes, stated: with ε = 1e-5 and nothing added to sigprop's model.
    At DSLM's unit embedding variance the per-token normalisation moves each embedding by O(1/√d) (d = 64 here);
    the logits then differ by a few percent."""
    with_norm = _bert_pair(tmp_path, False, True, init="dslm")
    assert with_norm <= 1e-4  # the folds' ε/λ² and the head's ε only
    gap = _bert_pair(tmp_path, False, False, init="dslm")
    assert gap > 10 * with_norm
    print(f"BERT export: logits vs sigprop's own, relative {gap:.3g} (embedding LayerNorm); with it {with_norm:.2e}")


LLAMA = dict(BASE, n_heads=4, n_kv_heads=2, d_ff=96, activation="swiglu", norm="rmsnorm", norm_eps=1e-6,
             position="rope", tie_head=False)


@pytest.mark.parametrize("init", ["dslm", "bert", "auto"])
def test_exported_llama_gives_the_same_logits(tmp_path, init):
    """A Llama-style decoder (RMSNorm, SwiGLU, rotary positions, 4 query heads sharing 2 key/value heads) exported
    as ``LlamaForCausalLM``: with ε = 0 its logits are sigprop's to float32 rounding (Hugging Face's Llama computes
    its RMSNorm and its rotary angles in float32 even in a float64 model: relative error ~1e-7, where a wrong weight
    or head order gives O(1)), and with the model's ε up to the ε the fold moves (the norms see the stream divided by
    Πλ)."""
    _, exact = _export_error(tmp_path, "llama", {**LLAMA, "init": init}, eps_zero=True)
    assert exact <= 1e-6
    _, err = _export_error(tmp_path, "llama", {**LLAMA, "init": init})
    assert err <= 1e-3


def test_llama_export_refuses_what_it_cannot_hold(tmp_path):
    config = TransformerConfig(**{**LLAMA, "norm": "layernorm"})
    with pytest.raises(ValueError, match="cannot export to Llama: norm='layernorm'"):
        export_hf(Transformer(config), tmp_path / "x", to="llama")



def test_a_run_on_a_pinned_corpus_exports_the_corpus_tokenizer():
    """A pinned corpus is named, not a path: fold takes its own tokenizer.json, whose vocabulary made the ids."""
    from sigprop.data.pinned import pinned_corpus
    from sigprop.fix.export import run_tokenizer

    corpus = pinned_corpus("pinned:python-v1")
    config = TransformerConfig(arch="decoder", n_layers=2, d_model=16, n_heads=2, vocab_size=corpus.vocab_size)
    tokenizer, said = run_tokenizer(config, "pinned:python-v1")
    assert tokenizer is not None, said
    assert tokenizer.get_vocab_size() == corpus.vocab_size
    assert tokenizer.token_to_id("[SEP]") == corpus.sep_id
    _, said = run_tokenizer(config, "pinned:no-such-corpus")
    assert said.startswith("no tokenizer") and "no-such-corpus" in said
