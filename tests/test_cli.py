"""The command line: help, component listing, a tiny verify run with JSON, and clear errors on bad input."""

import json

from typer.testing import CliRunner

from sigprop.cli.app import app

runner = CliRunner()


def test_help_lists_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0 and "verify" in result.output


def test_verify_json_schema(tmp_path):
    out = tmp_path / "v.json"
    result = runner.invoke(app, ["verify", "dropout", "--quick", "--configs", "4", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert set(data) >= {"components", "seconds", "normalisation"}
    stats = data["components"]["dropout"]
    assert set(stats) == {"mean", "var", "corr", "grad_var", "grad_corr"}
    for s in stats.values():
        assert {"p50", "p90", "p99", "n_configs"} <= set(s) and s["n_configs"] == 4
        assert s["p50"] <= s["p90"] <= s["p99"]


def test_unknown_component_is_a_clear_error():
    result = runner.invoke(app, ["verify", "nonsense"])
    assert result.exit_code == 2 and "unknown component" in result.output


def test_list():
    result = runner.invoke(app, ["verify", "--list"])
    assert result.exit_code == 0 and "dropout" in result.output
