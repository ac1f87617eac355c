"""``sigprop measure --hf``: a local Hugging Face config (fresh seeds) or saved model (its weights, once), and the
one-line errors (skipped without ``transformers``)."""

from __future__ import annotations

import json
from pathlib import Path

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
    res = run_cli(["measure", "--hf", str(tmp_path / "model"), "--synthetic", "--batch-size", "2",
                   "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["meta"]["seeds"] == [0]  # one set of saved weights: measured once
    res = run_cli(["measure", "--hf", str(tmp_path / "model"), "--seeds", "3", "--synthetic"])
    assert res.exit_code == 2 and "measured once" in res.stderr and "--seeds" in res.stderr  # not silently 1


def test_a_saved_model_with_dropout_measures_the_same_on_every_run(tmp_path):
    """A saved model was measured in training mode with unseeded dropout: its numbers changed from run to run."""
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=16, vocab_size=300)
    assert config.resid_pdrop > 0
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path / "g2")
    outs = [tmp_path / "a.json", tmp_path / "b.json"]
    for out in outs:
        res = run_cli(["measure", "--hf", str(tmp_path / "g2"), "--synthetic", "--batch-size", "2", "--json", str(out)])
        assert res.exit_code == 0, res.output
    first, second = (json.loads(out.read_text()) for out in outs)
    assert first["per_layer"] == second["per_layer"]


def test_a_saved_vit_is_measured_and_doctored_as_an_image_classifier(tmp_path):
    """ViT is a mapped family, but not a language model: its class is the image classifier's."""
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                    image_size=16, patch_size=4, num_labels=10)
    transformers.ViTForImageClassification(config).save_pretrained(tmp_path / "vit")
    out = tmp_path / "m.json"
    res = run_cli(["measure", "--hf", str(tmp_path / "vit"), "--synthetic", "--batch-size", "2", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert len(json.loads(out.read_text())["per_layer"]) == 3
    res = run_cli(["doctor", str(tmp_path / "vit"), "--seeds", "1"])
    assert res.exit_code == 0, res.output


def test_measure_hf_errors(tmp_path):
    res = run_cli(["measure", "--hf", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "not found" in res.output
    _llama().save_pretrained(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    res = run_cli(["measure", "--hf", str(tmp_path)])
    assert res.exit_code == 2 and "pickled" in res.output
    res = run_cli(["measure", "--hf", str(tmp_path), "--set", "n_layers=3"])
    assert res.exit_code == 2 and "--set" in res.output


@pytest.mark.parametrize("family, config, head", [
    ("bloom", lambda: transformers.BloomConfig(n_layer=3, hidden_size=32, n_head=2, vocab_size=300), "causal"),
    ("xlm-roberta", lambda: transformers.XLMRobertaConfig(num_hidden_layers=3, hidden_size=32, num_attention_heads=2,
                                                          intermediate_size=64, vocab_size=300,
                                                          max_position_embeddings=40), "masked"),
])
def test_a_family_without_theory_is_measured_and_says_why(tmp_path, family, config, head):
    """A family sigprop does not map is measured all the same, on a batch of its head's objective; the profile and
    the output say why its theory is not available, naming the component."""
    config().save_pretrained(tmp_path / family)
    out, table = tmp_path / "m.json", tmp_path / "m.csv"
    res = run_cli(["measure", "--hf", str(tmp_path / family), "--seeds", "2", "--batch-size", "2", "--synthetic",
                   "--json", str(out), "--csv", str(table)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["config"] == {} and f"model_type '{family}' is not mapped" in data["meta"]["theory"]
    reason = {"bloom": "ALiBi", "xlm-roberta": "no mapping of its configuration"}[family]
    assert reason in data["meta"]["theory"] and "theory is not available" in " ".join(res.output.split())
    assert len(data["per_layer"]) == 4 and data["meta"]["seeds"] == [0, 1]
    assert all(r["grad_var"] > 0 for r in data["per_layer"])
    assert len(table.read_text().splitlines()) == 1 + 4


def test_doctor_without_theory_diagnoses_the_measurement(tmp_path):
    transformers.BloomConfig(n_layer=4, hidden_size=32, n_head=2, vocab_size=300).save_pretrained(tmp_path / "b")
    out = tmp_path / "d.json"
    res = run_cli(["doctor", str(tmp_path / "b"), "--seeds", "2", "--json", str(out)])
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert report["config"] is None and "ALiBi" in report["theory"] and report["profiles"]["predicted"] is None
    assert report["verdict"].startswith("stable") and report["recommendation"] is None
    res = run_cli(["doctor", str(tmp_path / "b"), "--seeds", "0"])
    assert res.exit_code == 2 and "there is none" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_a_model_id_is_read_from_the_local_cache_only(tmp_path, monkeypatch):
    """``--hf org/name`` (and ``doctor org/name``) read the model's snapshot from the local Hugging Face cache (its
    layout: refs/main naming the snapshot); an id that is not there is a one-line error, nothing downloaded."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    repo = cache / "models--acme--tiny-llama"
    snapshot = repo / "snapshots" / ("0" * 40)
    _llama().save_pretrained(snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "m.json"
    res = run_cli(["measure", "--hf", "acme/tiny-llama", "--seeds", "1", "--batch-size", "2", "--synthetic",
                   "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["meta"]["hf_source"] == str(snapshot)
    for args in (["measure", "--hf", "acme/absent"], ["doctor", "acme/absent"]):
        res = run_cli(args)
        assert res.exit_code == 2 and "local Hugging Face cache" in res.stderr and str(cache) in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1


def test_compare_and_predict_read_a_saved_models_weights(tmp_path):
    """A saved GPT-2 whose output projections were scaled ×30 by hand: ``compare --hf`` measures it once and
    predicts it from its weights' standard deviations (median forward-variance error of one draw at d = 64 under
    15%), where the fresh model of its config (``predict --hf --fresh``) is off by far more than the scaling's
    effect on the last layer."""
    import torch

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=6, n_embd=64, n_head=2, n_positions=32,
                                                                 vocab_size=300))
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.c_proj.weight.mul_(30.0)
            block.mlp.c_proj.weight.mul_(30.0)
    model.save_pretrained(tmp_path / "scaled")
    out = tmp_path / "c.json"
    res = run_cli(["compare", "--hf", str(tmp_path / "scaled"), "--batch-size", "4", "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["summary"]["fwd_var"]["median_rel"] < 0.15 and "saved weights" in res.output
    measured_last = data["per_layer"][-1]["meas_fwd_var"]
    fresh = tmp_path / "p.json"
    res = run_cli(["predict", "--hf", str(tmp_path / "scaled"), "--fresh", "--json", str(fresh)])
    assert res.exit_code == 0, res.output
    assert json.loads(fresh.read_text())["per_layer"][-1]["fwd_var"] < 0.2 * measured_last
    res = run_cli(["predict", "--preset", "fig1-preln", "--fresh"])
    assert res.exit_code == 2 and "--fresh applies to --hf" in res.stderr


def test_a_folders_own_tokenizer_encodes_the_batch(tmp_path):
    """A folder that holds a tokenizer is measured on text encoded by it: every measured sequence is a window of the
    corpus as that tokenizer encodes it, the measurement says so, and ``compare --measured`` rebuilds the same batch
    from the folder."""
    import sysconfig

    import numpy as np

    from sigprop.data.tokenizer import train_tokenizer, write_hf_tokenizer
    from sigprop.hf.measure import hf_batch, read_hf_source
    from sigprop.model.config import config_from_dict

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in ("json/decoder.py", "json/encoder.py", "json/scanner.py"):
        (corpus / name.replace("/", "_")).write_text((stdlib / name).read_text(encoding="utf-8"), encoding="utf-8")
    tok = train_tokenizer([f.read_text(encoding="utf-8") for f in sorted(corpus.iterdir())], vocab_size=300)
    folder = tmp_path / "model"
    transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=32,
                                                         vocab_size=300)).save_pretrained(folder)
    write_hf_tokenizer(tok, folder, 32)
    out = tmp_path / "m.json"
    res = run_cli(["measure", "--hf", str(folder), "--batch-size", "3", "--data", str(corpus), "--json", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["meta"]["tokenizer"].startswith("the folder's tokenizer")
    config = config_from_dict(data["config"])
    batch, _ = hf_batch(read_hf_source(folder), config, 3, corpus)
    stream = np.concatenate([tok.encode(f.read_text(encoding="utf-8")).ids for f in sorted(corpus.iterdir())])
    text = "," + ",".join(map(str, stream.tolist())) + ","
    for row in batch.inputs.tolist():
        assert "," + ",".join(map(str, row)) + "," in text
    res = run_cli(["compare", "--measured", str(out)])  # the corpus and the tokenizer from the file
    assert res.exit_code == 0, res.output
    # predict takes the same batch (it tokenised with sigprop's BPE: another input boundary for the same model)
    predicted, compared = tmp_path / "p.json", tmp_path / "c.json"
    res = run_cli(["predict", "--hf", str(folder), "--batch-size", "3", "--data", str(corpus), "--json",
                   str(predicted)])
    assert res.exit_code == 0 and "the folder's tokenizer" in res.output, res.output
    res = run_cli(["compare", "--hf", str(folder), "--batch-size", "3", "--data", str(corpus), "--json",
                   str(compared)])
    assert res.exit_code == 0, res.output
    alone = {(r["layer"], r["site"]): r["fwd_corr"] for r in json.loads(predicted.read_text())["per_layer"]}
    beside = {(r["layer"], r["site"]): r["pred_fwd_corr"] for r in json.loads(compared.read_text())["per_layer"]}
    assert beside and all(alone[k] == v for k, v in beside.items())


def test_what_the_mapping_leaves_out_is_said_by_the_command_line(tmp_path):
    """predict --hf on a model with a sliding window shorter than the sequence: the command line once dropped the
    mapping's notes and predicted full attention without a word."""
    transformers.MistralConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                               intermediate_size=96, max_position_embeddings=256, vocab_size=300,
                               sliding_window=16).save_pretrained(tmp_path / "mistral")
    res = run_cli(["predict", "--hf", str(tmp_path / "mistral")])
    assert res.exit_code == 0, res.output
    assert "note: from_hf(mistral): sliding-window attention (16 tokens" in res.stderr


def test_a_stored_measurement_of_saved_weights_is_compared_with_their_theory_from_anywhere(tmp_path, monkeypatch):
    """The folder was recorded as typed (relative): from another folder the comparison silently predicted a fresh
    model; a folder that is gone is refused instead."""
    import shutil

    import torch

    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=16, vocab_size=300)
    model = transformers.GPT2LMHeadModel(config)
    with torch.no_grad():
        for block in model.transformer.h:
            block.mlp.c_fc.weight.mul_(4.0)  # weights no fresh draw has: only their own plan predicts them
    model.save_pretrained(tmp_path / "g2")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "m.json"
    assert run_cli(["measure", "--hf", "g2", "--synthetic", "--batch-size", "2", "--json", str(out)]).exit_code == 0
    (tmp_path / "sub").mkdir()
    results = []
    for where in (tmp_path, tmp_path / "sub"):
        monkeypatch.chdir(where)
        compared = where / "c.json"
        res = run_cli(["compare", "--measured", str(out), "--json", str(compared)])
        assert res.exit_code == 0, res.output
        results.append(json.loads(compared.read_text()))
    assert results[0]["predicted_meta"]["plan"] == results[1]["predicted_meta"]["plan"]
    assert results[0]["summary"] == results[1]["summary"]
    shutil.move(tmp_path / "g2", tmp_path / "moved")
    res = run_cli(["compare", "--measured", str(out)])
    assert res.exit_code == 2 and "not found from here" in res.stderr


def test_measurements_of_hugging_face_models_merge_and_an_unmapped_family_is_never_the_default_model(tmp_path):
    """``--first-seed`` slices of ``measure --hf`` could not be merged (no per-seed rows); a measurement of an
    unmapped family (config {}) was read back as sigprop's default 12-layer encoder."""
    bloom = transformers.BloomConfig(n_layer=2, hidden_size=32, n_head=2, vocab_size=300)
    for family, config in (("llama", _llama()), ("bloom", bloom)):
        config.save_pretrained(tmp_path / family)
        parts = [tmp_path / f"{family}-{first}.json" for first in (0, 1)]
        for first, out in enumerate(parts):
            res = run_cli(["measure", "--hf", str(tmp_path / family), "--synthetic", "--seeds", "1", "--batch-size",
                           "2", "--first-seed", str(first), "--json", str(out)])
            assert res.exit_code == 0, res.output
        merged = tmp_path / f"{family}-merged.json"
        res = run_cli(["measure", *(a for p in parts for a in ("--merge", str(p))), "--json", str(merged)])
        assert res.exit_code == 0, res.output
        assert json.loads(merged.read_text())["meta"]["seeds"] == [0, 1]
        both = tmp_path / f"{family}-both.json"
        assert run_cli(["measure", "--hf", str(tmp_path / family), "--synthetic", "--seeds", "2", "--batch-size", "2",
                        "--json", str(both)]).exit_code == 0
        assert json.loads(both.read_text())["per_layer"] == json.loads(merged.read_text())["per_layer"]
    res = run_cli(["measure", "--merge", str(tmp_path / "llama-0.json"), "--merge", str(tmp_path / "bloom-1.json")])
    assert res.exit_code == 2 and "another" in res.stderr
    for args in (["compare", "--measured", str(tmp_path / "bloom-0.json")],
                 ["predict", "--config", str(tmp_path / "bloom-0.json")]):
        res = run_cli(args)
        assert res.exit_code == 2 and "bloom" in res.stderr.lower() and "configuration" in res.stderr, res.output
