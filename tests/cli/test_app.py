"""The command line: help, component listing, a tiny verify run with JSON, and clear errors on bad input."""

import json

from tests.helpers import run_cli


def test_help_lists_commands():
    result = run_cli(["--help"])
    assert result.exit_code == 0 and "verify" in result.output


def test_verify_json_schema(tmp_path):
    out = tmp_path / "v.json"
    result = run_cli(["verify", "dropout", "--quick", "--configs", "4", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert set(data) >= {"components", "seconds", "normalisation"}
    stats = data["components"]["dropout"]
    assert set(stats) == {"mean", "var", "corr", "grad_var", "grad_corr"}
    for s in stats.values():
        assert {"p50", "p90", "p99", "n_configs"} <= set(s) and s["n_configs"] == 4
        assert s["p50"] <= s["p90"] <= s["p99"]


def test_unknown_component_is_a_clear_error():
    result = run_cli(["verify", "nonsense"])
    assert result.exit_code == 2 and "unknown component" in result.output


def test_list():
    result = run_cli(["verify", "--list"])
    assert result.exit_code == 0 and "dropout" in result.output
