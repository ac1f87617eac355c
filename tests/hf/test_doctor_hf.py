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
