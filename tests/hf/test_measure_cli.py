"""``sigprop measure --hf``: a local Hugging Face config (fresh seeds) or saved model (its weights, once), and the
one-line errors (skipped without ``transformers``)."""

from __future__ import annotations

import json

import pytest

transformers = pytest.importorskip("transformers")

from tests.helpers import run_cli  # noqa: E402


def _llama(vocab=300):
    return transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                    intermediate_size=96, max_position_embeddings=32, vocab_size=vocab)


def test_measure_a_config_over_seeds_and_a_saved_model_once(tmp_path):
    _llama().save_pretrained(tmp_path / "cfg")
    out = tmp_path / "m.json"
    res = run_cli(["measure", "--hf", str(tmp_path / "cfg" / "config.json"), "--seeds", "2", "--batch-size", "2",
                   "--synthetic", "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["meta"]["seeds"] == [0, 1] and data["meta"]["hf_weights"] == "initialised"
    assert data["config"]["position"] == "rope" and data["meta"]["hf_config"]["model_type"] == "llama"
    assert len(data["per_layer"]) == 3  # the input and the two blocks' outputs
    transformers.LlamaForCausalLM(_llama()).save_pretrained(tmp_path / "model")
    res = run_cli(["measure", "--hf", str(tmp_path / "model"), "--seeds", "3", "--synthetic", "--batch-size", "2",
                   "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["meta"]["seeds"] == [0]  # one set of saved weights: measured once


def test_measure_hf_errors(tmp_path):
    res = run_cli(["measure", "--hf", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "not found" in res.output
    _llama().save_pretrained(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    res = run_cli(["measure", "--hf", str(tmp_path)])
    assert res.exit_code == 2 and "pickled" in res.output
    res = run_cli(["measure", "--hf", str(tmp_path), "--set", "n_layers=3"])
    assert res.exit_code == 2 and "--set" in res.output
