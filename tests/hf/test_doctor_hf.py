"""``sigprop doctor`` on Hugging Face configurations (a ``config.json`` as a user has it; nothing downloaded): a deep
BERT (Post-LN) loses its gradient towards the input and a Llama-style decoder's forward variance grows with depth;
the recommendation is the Python call that re-initialises the user's model, and the fixed model is predicted stable
(theory only; the extra ``hf``, skipped without ``transformers``)."""

from __future__ import annotations

import json
import warnings

import pytest

transformers = pytest.importorskip("transformers")

from tests.helpers import run_cli  # noqa: E402


def _doctor(tmp_path, hf_config) -> dict:
    folder = tmp_path / "model"
    hf_config.save_pretrained(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # from_hf's list of what it leaves out (tested in test_config_map)
        out = run_cli(["doctor", str(folder / "config.json"), "--seeds", "0", "--json", tmp_path / "d.json"])
    assert out.exit_code == 0, out.stderr
    return json.loads((tmp_path / "d.json").read_text())


@pytest.mark.long
def test_a_deep_xavier_bert_loses_its_gradient_and_gets_dslm(tmp_path):
    """A BERT of 192 Post-LN layers with Xavier's standard deviation for its d × d matrices as initializer_range:
    the gradient shrinks exponentially towards the input (Kedia et al. App. E.2, Fig. 3), flagged; DSLM bounds it."""
    d = 256
    report = _doctor(tmp_path, transformers.BertConfig(num_hidden_layers=192, hidden_size=d, num_attention_heads=4,
                                                       intermediate_size=4 * d, vocab_size=300,
                                                       max_position_embeddings=32, initializer_range=(1 / d) ** 0.5))
    assert report["source"] == "hf" and report["config"]["norm_position"] == "post"
    grad = next(f for f in report["diagnosis"]["findings"] if f["quantity"] == "grad_var")
    assert grad["flagged"] and grad["verdict"] == "vanishes", grad
    assert report["recommendation"]["apply"] == "sigprop.apply_init(model, 'dslm')"
    assert not any(f["flagged"] for f in report["fixed_diagnosis"]["findings"])


def test_a_llama_decoder_s_forward_variance_grows_and_gets_auto(tmp_path):
    """A Llama-style decoder (RMSNorm, SwiGLU, rotary, grouped-query, std 0.02) at 24 Pre-LN layers: the stream grows
    with depth (App. E.1), flagged; the fix is init='auto' (SwiGLU and RMSNorm are beyond DSLM's closed forms)."""
    report = _doctor(tmp_path, transformers.LlamaConfig(num_hidden_layers=24, hidden_size=64, num_attention_heads=2,
                                                        num_key_value_heads=1, intermediate_size=176, vocab_size=300,
                                                        max_position_embeddings=32))
    fwd = next(f for f in report["diagnosis"]["findings"] if f["quantity"] == "fwd_var")
    assert fwd["flagged"] and "grows" in report["verdict"], report["verdict"]
    assert report["recommendation"]["apply"] == "sigprop.apply_init(model, 'auto')"
    assert not any(f["flagged"] for f in report["fixed_diagnosis"]["findings"])


def _saved_gpt2(folder, scale: float) -> None:
    """A GPT-2 of 12 layers saved with safetensors, every output projection (c_proj) multiplied by ``scale``."""
    import torch

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=12, n_embd=64, n_head=2, n_positions=16,
                                                                 vocab_size=300))
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.c_proj.weight.mul_(scale)
            block.mlp.c_proj.weight.mul_(scale)
    model.save_pretrained(folder, safe_serialization=True)


def _doctor_folder(tmp_path, folder, *extra) -> dict:
    out_file = tmp_path / f"{folder.name}.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = run_cli(["doctor", str(folder), "--seeds", "0", "--json", str(out_file), *extra])
    assert out.exit_code == 0, out.stderr
    return json.loads(out_file.read_text())


@pytest.mark.long
def test_a_saved_model_is_diagnosed_as_it_is(tmp_path):
    """A saved GPT-2 whose c_proj weights were multiplied by 300 by hand: measured as it is (its weights the one
    draw), the theory reading their standard deviations (×300 on W_O and W_2), the growth flagged with a fix; the
    untouched folder is not flagged; ``--fresh`` diagnoses a fresh model of the folder's config instead."""
    scaled, plain = tmp_path / "scaled", tmp_path / "plain"
    _saved_gpt2(scaled, 300.0)
    _saved_gpt2(plain, 1.0)
    report = _doctor_folder(tmp_path, scaled)
    assert report["measured_what"].startswith("the saved weights of") and report["seeds"] == 1
    assert report["verdict"].startswith("unstable") and report["recommendation"] is not None
    assert report["profiles"]["measured"] is not None
    ok = _doctor_folder(tmp_path, plain)
    assert ok["verdict"].startswith("stable") and ok["measured_what"].startswith("the saved weights")
    # the theory read the weights: the scaled model's predicted first-layer variance is far above the plain one's
    first = lambda r, k: r["profiles"][k][0]["fwd_var"]  # noqa: E731
    assert first(report, "predicted") > 100 * first(ok, "predicted")
    fresh = _doctor_folder(tmp_path, scaled, "--fresh")
    assert fresh["measured_what"] == "theory only" and fresh["profiles"]["measured"] is None
    assert fresh["verdict"] == ok["verdict"]


@pytest.mark.long
def test_a_model_object_is_diagnosed_as_it_is():
    """``doctor(from_hf(model), "hf", saved=SavedModel.of(model))``: a Hugging Face model in memory, scaled by hand,
    is measured as it is and flagged; its unscaled twin is not."""
    import torch

    import sigprop
    from sigprop.analysis.doctor import SavedModel, doctor

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=12, n_embd=64, n_head=2, n_positions=16, vocab_size=300)
    verdicts = {}
    for scale in (1.0, 300.0):
        model = transformers.GPT2LMHeadModel(config)
        with torch.no_grad():
            for block in model.transformer.h:
                block.mlp.c_proj.weight.mul_(scale)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mapped = sigprop.from_hf(model)
        report = doctor(mapped, "hf", seeds=0, saved=SavedModel.of(model))
        assert report.measured_what == "the model object" and report.measured is not None
        verdicts[scale] = report.verdict
    assert verdicts[1.0].startswith("stable") and verdicts[300.0].startswith("unstable")
