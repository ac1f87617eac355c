"""The predict / measure / compare commands: JSON in the Profile shapes of ARCHITECTURE.md, figures, presets, overrides
and errors."""

import json
from pathlib import Path

import pytest

from sigprop.core.profile import Profile
from sigprop.model.presets import resolve_config
from tests.helpers import run_cli

SMALL = ["--set", "n_layers=3", "--set", "d_model=32", "--set", "n_heads=2", "--set", "vocab_size=300",
         "--set", "seq_len=16", "--set", "max_len=16"]


def test_predict_writes_a_profile(tmp_path):
    out, fig = tmp_path / "p.json", tmp_path / "p.png"
    result = run_cli(["predict", *SMALL, "--json", str(out), "--plot", str(fig)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["kind"] == "predicted" and data["config"]["n_layers"] == 3
    assert [r["layer"] for r in data["per_layer"]] == [-1, 0, 1, 2]
    assert set(data["per_layer"][0]) >= {"layer", "fwd_mean", "fwd_var", "fwd_corr", "grad_var", "grad_corr"}
    assert Profile.from_json(data).kind == "predicted"
    assert fig.stat().st_size > 10_000
    assert [f["quantity"] for f in data["meta"]["diagnosis"]["findings"]] == ["fwd_var", "grad_var", "fwd_corr"]
    assert "diagnosis (theory)" in result.output and "forward variance" in result.output


def test_measure_and_compare_on_synthetic_tokens(tmp_path):
    out = tmp_path / "m.json"
    result = run_cli(["measure", *SMALL, "--synthetic", "--seeds", "2", "--batch-size", "2",
                                 "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["kind"] == "measured"
    comp = tmp_path / "c.json"
    result = run_cli(["compare", *SMALL, "--synthetic", "--seeds", "2", "--batch-size", "2",
                                 "--json", str(comp), "--plot", str(tmp_path / "c.png")])
    assert result.exit_code == 0, result.output
    data = json.loads(comp.read_text())
    for q in ("fwd_var", "grad_var", "fwd_corr", "grad_corr"):
        assert {"median_rel", "mean_rel", "p90_rel", "r2"} <= set(data["summary"][q])
    assert len(data["per_layer"]) == 3 and "grad_source" in data["predicted_meta"]
    assert set(data["meta"]["diagnosis"]) == {"predicted", "measured"}
    assert "(theory: " in result.output
    assert data["predicted_meta"]["forward_state"].startswith("token-resolved")
    assert "forward state: token-resolved" in " ".join(result.output.split())
    result = run_cli(["compare", *SMALL, "--synthetic", "--seeds", "2", "--batch-size", "2",
                                 "--exchangeable", "--json", str(comp)])
    assert result.exit_code == 0, result.output
    assert json.loads(comp.read_text())["predicted_meta"]["forward_state"].startswith("exchangeable")


def test_encoder_decoder_compare(tmp_path):
    """An encoder–decoder end to end: the cross-attention rule is named, the decoder input has its own row and the
    figure is drawn."""
    comp = tmp_path / "c.json"
    result = run_cli(["compare", *SMALL, "--set", "arch=encoder_decoder", "--set", "n_decoder_layers=2",
                                 "--synthetic", "--seeds", "2", "--batch-size", "2", "--attention-heads", "16",
                                 "--json", str(comp), "--plot", str(tmp_path / "c.png")])
    assert result.exit_code == 0, result.output
    assert "cross-attention sampled: layers 3-4" in " ".join(result.output.split())
    data = json.loads(comp.read_text())
    assert [r["layer"] for r in data["per_layer"]] == [0, 1, 2, 3, 4]
    assert "caveat" in data["predicted_meta"]
    assert (tmp_path / "c.png").stat().st_size > 10_000
    result = run_cli(["compare", *SMALL, "--set", "arch=encoder_decoder", "--synthetic", "--seeds", "2",
                                 "--token-resolved"])
    said = " ".join(result.output.split())
    assert result.exit_code == 2 and "CrossAttention" in said and "has no token-resolved rule" in said


def test_presets_resolve_and_list():
    config, preset = resolve_config("fig3-postln", None, ["n_layers=4"])
    assert config.norm_position == "post" and config.n_layers == 4 and preset.seeds >= 1
    result = run_cli(["compare", "--list-presets"])
    assert result.exit_code == 0
    for name in ("fig1-preln", "fig3-postln", "fig4-dslm-pre", "fig4-dslm-post"):
        assert name in result.output


def test_config_file_and_overrides(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"n_layers": 5, "norm": "rmsnorm"}))
    config, _ = resolve_config(None, f, ["dropout=0"])
    assert (config.n_layers, config.norm, config.dropout) == (5, "rmsnorm", 0.0)


@pytest.mark.parametrize("args,message", [
    (["--preset", "nope"], "unknown preset"),
    (["--set", "n_layers"], "key=value"),
    (["--set", "colour=blue"], "unknown config field"),
    (["--set", "d_model=30", "--set", "n_heads=4"], "divisible"),
    (["--set", "attention_heads=1"], "unknown config field"),
])
def test_bad_input_is_a_clear_error(args, message):
    result = run_cli(["predict", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_missing_config_file_is_a_clear_error(tmp_path):
    result = run_cli(["predict", "--config", str(tmp_path / "none.json")])
    assert result.exit_code == 2 and "not found" in result.output


def test_measure_notes_a_heavy_tailed_seed_mean(tmp_path):
    """A narrow Post-LN stack's gradient variance spreads log-normally across seeds (sd of the log ≫ 0.2 here), so
    6 seeds fail Cochran's rule and the command says so (and draws those points hollow)."""
    fig = tmp_path / "m.png"
    result = run_cli(["measure", *SMALL, "--set", "n_layers=12", "--set", "norm_position=post",
                                 "--synthetic", "--seeds", "6", "--batch-size", "2", "--plot", str(fig)])
    assert result.exit_code == 0, result.output
    assert fig.stat().st_size > 10_000
    text = " ".join(result.output.split())
    assert "grad_var is skewed across seeds" in text and "Cochran's rule asks for" in text


def test_compare_against_a_stored_measurement(tmp_path):
    """--measured reuses a measurement (a measure or a compare JSON) and its batch: the same comparison, no
    measuring; a different batch or a clashing option is refused."""
    small = [*SMALL, "--synthetic", "--batch-size", "2"]
    first, measured = tmp_path / "c.json", tmp_path / "m.json"
    assert run_cli(["compare", *small, "--seeds", "2", "--json", str(first)]).exit_code == 0
    assert run_cli(["measure", *small, "--seeds", "2", "--json", str(measured)]).exit_code == 0
    again, from_measure = tmp_path / "c2.json", tmp_path / "c3.json"
    result = run_cli(["compare", "--measured", str(first), "--json", str(again)])
    assert result.exit_code == 0, result.output
    assert "measure 3 layers" not in result.output
    a, b = json.loads(first.read_text()), json.loads(again.read_text())
    assert a["per_layer"] == b["per_layer"] and a["summary"] == b["summary"]
    assert a["measured_meta"]["batch_source"] == "synthetic"
    result = run_cli(["compare", "--measured", str(measured), "--json", str(from_measure)])
    assert result.exit_code == 0, result.output
    assert json.loads(from_measure.read_text())["per_layer"] == a["per_layer"]  # same seeds, same batch
    for extra, message in ((["--seeds", "3"], "leave out --seeds"), (["--set", "n_layers=2"], "leave out --set"),
                           (["--batch-size", "3"], "not the one measured")):
        result = run_cli(["compare", "--measured", str(measured), *extra])
        assert result.exit_code == 2 and message in result.output, result.output
    (tmp_path / "p.json").write_text(json.dumps({"kind": "predicted", "per_layer": []}))
    for path, message in ((tmp_path / "p.json", "got an object of kind 'predicted'"),
                          (tmp_path / "none.json", "not found")):
        result = run_cli(["compare", "--measured", str(path)])
        assert result.exit_code == 2 and message in result.output, result.output


def test_measure_slices_and_merge(tmp_path):
    small = [*SMALL, "--synthetic", "--batch-size", "2"]
    paths = {name: tmp_path / f"{name}.json" for name in ("a", "b", "all", "merged")}
    for name, extra in (("a", ["--seeds", "2"]), ("b", ["--seeds", "1", "--first-seed", "2"]),
                        ("all", ["--seeds", "3"])):
        result = run_cli(["measure", *small, *extra, "--json", str(paths[name])])
        assert result.exit_code == 0, result.output
    result = run_cli(["measure", "--merge", str(paths["b"]), "--merge", str(paths["a"]),
                                 "--json", str(paths["merged"])])
    assert result.exit_code == 0, result.output
    whole, merged = json.loads(paths["all"].read_text()), json.loads(paths["merged"].read_text())
    assert merged["per_site"] == whole["per_site"] and merged["meta"]["seeds"] == [0, 1, 2]
    result = run_cli(["measure", "--merge", str(paths["a"]), "--seeds", "2"])
    assert result.exit_code == 2 and "leave out --seeds" in result.output
    paths["c"] = tmp_path / "c.json"
    assert run_cli(["compare", *small, "--seeds", "2", "--json", str(paths["c"])]).exit_code == 0
    result = run_cli(["measure", "--merge", str(paths["a"]), "--merge", str(paths["c"])])
    assert result.exit_code == 2 and "no per-seed rows" in result.output


def test_csv_holds_the_json_rows(tmp_path):
    """``--csv``: a row per site, a column per statistic, the numbers of the ``--json`` file (NaN as an empty cell);
    a comparison's CSV has the theory's and the measurement's columns per layer; a bad path is refused first."""
    import csv
    import math

    out, table = tmp_path / "p.json", tmp_path / "p.csv"
    result = run_cli(["predict", *SMALL, "--json", str(out), "--csv", str(table)])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(table.open()))
    stored = Profile.read_json(out).lookup()
    assert len(rows) == len(stored)
    for row in rows:
        ref = stored[(int(row["layer"]), row["site"])]
        for q in ("fwd_mean", "fwd_var", "fwd_corr", "grad_var", "grad_corr"):
            value = getattr(ref, q)
            assert (row[q] == "" and math.isnan(value)) or float(row[q]) == value
    comp = tmp_path / "c.csv"
    result = run_cli(["compare", *SMALL, "--synthetic", "--seeds", "2", "--batch-size", "2", "--csv", str(comp)])
    assert result.exit_code == 0, result.output
    header = comp.read_text().splitlines()[0].split(",")
    assert header[:4] == ["layer", "site", "pred_fwd_mean", "meas_fwd_mean"] and len(header) == 12
    unwritable = Path("/proc/sigprop-test/p.csv")  # /proc takes no new files, not even from root
    for bad, message in ((tmp_path / "p.txt", "must end in .csv"), (tmp_path, "is a folder"),
                         (unwritable, "cannot write")):
        result = run_cli(["predict", *SMALL, "--csv", str(bad)])
        assert result.exit_code == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_profile_to_frame():
    pd = pytest.importorskip("pandas")
    from sigprop.core.profile import Row

    profile = Profile("measured", {}, (Row(1, "layer", 0.0, 2.0, 0.5, 3e-3, 0.25), Row(-1, "input", 0.0, 1.0),
                                       Row(0, "layer", 0.0, 1.5, 0.4, 4e-3, 0.2)))
    frame = profile.to_frame()
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == ["layer", "site", "fwd_mean", "fwd_var", "fwd_corr", "grad_var", "grad_corr"]
    assert frame["layer"].tolist() == [-1, 0, 1] and frame["fwd_var"].tolist() == [1.0, 1.5, 2.0]
    assert frame["grad_var"].isna().tolist() == [True, False, False]


def test_predict_spread_adds_the_seed_to_seed_columns(tmp_path):
    out = tmp_path / "p.json"
    result = run_cli(["predict", *SMALL, "--spread", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    rows = {r["layer"]: r for r in data["per_layer"]}
    assert rows[2]["grad_var_log_sd"] == 0.0 and rows[0]["grad_var_log_sd"] > 0  # relative to the top layer
    assert rows[-1]["fwd_var_log_sd"] == 0.0  # given the embedding
    assert "anchor_layers" in data["meta"]["spread"]
    assert "sd log σ²_g/top theory" in result.output
    plain = run_cli(["predict", *SMALL, "--json", str(tmp_path / "q.json")])
    assert "grad_var_log_sd" not in json.loads((tmp_path / "q.json").read_text())["per_layer"][0]
    assert "sd log" not in plain.output
