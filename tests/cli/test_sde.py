"""``sigprop sde``: a quick run writing JSON and PNG, the table, and clear errors (exit 2) on bad options.

Run through the command line's one entry point (:func:`sigprop.cli.main`), as a user runs it."""

import json

import pytest

from tests.helpers import run_cli


def test_sde_figure1_writes_json_and_png(tmp_path):
    out, fig = tmp_path / "f1.json", tmp_path / "f1.png"
    result = run_cli(["sde", "--figure", "1", "--samples", "128", "--width", "40", "--depth", "20",
                                 "--no-check-dt", "--json", str(out), "--plot", str(fig)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["kind"] == "sde-figure" and data["figure"] == 1
    assert data["setup"]["width"] == 40 and data["setup"]["samples"] == 128
    assert 0.0 <= data["data"]["ks"]["statistic"] <= 1.0
    assert fig.stat().st_size > 10_000
    assert "KS(SDE, NN)" in result.output


def test_sde_figure3_and_figure8_tables(tmp_path):
    out = tmp_path / "f3.json"
    result = run_cli(["sde", "-f", "3", "--samples", "64", "--width", "30", "--depth", "6",
                                 "--gamma", "0.5,1", "--json", str(out), "--plot", str(tmp_path / "f3.png")])
    assert result.exit_code == 0, result.output
    assert [r["gamma"] for r in json.loads(out.read_text())["data"]["rows"]] == [0.5, 1.0]
    result = run_cli(["sde", "-f", "8", "--samples", "4", "--width", "20", "--depth", "10",
                                 "--gamma", "0.2,0.8", "--tau0", "1,2", "--plot", str(tmp_path / "f8.png")])
    assert result.exit_code == 0, result.output
    assert "gamma \\ tau0" in result.output and (tmp_path / "f8.png").exists()


@pytest.mark.parametrize("args, message", [
    (["--figure", "6"], "--figure must be one of"),
    (["--figure", "2", "--dt", "0.1"], "do not apply to figure 2"),
    (["--samples", "1"], "--samples must be"),
    (["--gamma", "1.5"], "--gamma must lie in [0, 1]"),
    (["--gamma", "a"], "--gamma must be a number"),
    (["--gamma", "0.1,0.2"], "--gamma takes one value"),
    (["--tau0", "-1"], "--tau0 must be > 0"),
    (["--dt", "0"], "--dt must be > 0"),
    (["--figure", "3", "--tau0", "1"], "--tau0 does not apply"),
    (["--figure", "4", "--dt", "0.1"], "--dt does not apply"),
    (["--source", "network"], "--source applies"),
    (["--figure", "5", "--source", "oracle"], "--source must be"),
    (["--figure", "5", "--dt", "0.1"], "--dt applies to figure 5 with --source sde only"),
    (["--figure", "8", "--source", "network", "--dt", "0.1"], "--dt applies to figure 8"),
    (["--figure", "4", "--no-check-dt"], "apply to figures 1, 3 and 7 only"),
    (["--figure", "5", "--check-dt"], "apply to figures 1, 3 and 7 only"),
    (["--width", "6", "--tokens", "4", "--samples", "4", "--depth", "2"], "--width must be at least twice --tokens"),
    (["--width", "2", "--tokens", "2", "--samples", "2", "--depth", "1"], "got width 2, tokens 2"),
    (["--figure", "3", "--width", "3", "--samples", "2", "--depth", "1"], "got width 3, tokens 2"),
    (["--seed", "-1", "--width", "8", "--depth", "1", "--tokens", "2"], "--seed must be an integer >= 0"),
])
def test_sde_bad_options_exit_2_with_a_message(args, message):
    result = run_cli(["sde", *args])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


def test_sde_figure2_gradient_norms(tmp_path):
    out = tmp_path / "f2.json"
    result = run_cli(["sde", "-f", "2", "--width", "16", "--depth", "3", "--samples", "2", "--tokens", "8",
                                 "--json", str(out), "--plot", str(tmp_path / "f2.png")])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["figure"] == 2 and set(data["data"]["curves"]) == {"shaped", "pre-LN", "post-LN"}
    assert (tmp_path / "f2.png").stat().st_size > 10_000
