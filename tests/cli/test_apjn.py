"""``sigprop apjn``: the comparison JSON and figure, the phase maps, and clear errors on bad options."""

import json

import pytest

from tests.helpers import run_cli

TINY = ["--blocks", "3", "--width", "32", "--heads", "2", "--tokens", "16", "--seeds", "2", "--probes", "3"]


def test_apjn_writes_curves_checks_and_a_figure(tmp_path):
    out, fig = tmp_path / "a.json", tmp_path / "a.png"
    result = run_cli(["apjn", *TINY, "--norm", "layernorm,derf", "--alpha", "0.5,1.5",
                                 "--json", str(out), "--plot", str(fig)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["kind"] == "apjn"
    assert [c["label"] for c in data["curves"]] == ["pre-LN", "Derf α=0.5", "Derf α=1.5"]
    for c in data["curves"]:
        assert len(c["theory"]["full"]) == 4 and c["blocks"] == [0, 1, 2]
        assert set(c["gmfe"]["full"]) <= {"early", "middle", "deep"}
    assert set(data["checks"]["pre-LN"]) >= {"zeta", "slope_measured"}
    assert data["order"]["theory_order"] and fig.stat().st_size > 10_000
    assert "GMFE" in result.output


def test_apjn_digits_forward_and_stride(tmp_path):
    out = tmp_path / "d.json"
    result = run_cli(["apjn", *TINY, "--norm", "dyt", "--alpha", "1", "--inputs", "digits",
                                 "--samples", "2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    curves = json.loads(out.read_text())["curves"]
    assert [c["sample"] for c in curves] == [0, 1]
    result = run_cli(["apjn", *TINY, "--norm", "layernorm", "--kind", "forward", "--stride", "2",
                                 "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["curves"][0]["blocks"] == [1, 3]


def test_apjn_phase_maps(tmp_path):
    out, fig = tmp_path / "p.json", tmp_path / "p.png"
    result = run_cli(["apjn", "--phase", "--norm", "derf", "--alpha", "1,2", "--grid", "6",
                                 "--json", str(out), "--plot", str(fig)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["kind"] == "apjn-phase" and [m["alpha"] for m in data["maps"]] == [1.0, 2.0]
    assert len(data["zeta"]) == 6 and len(data["maps"][0]["lambda_inv"][0]) == 6
    assert fig.stat().st_size > 10_000


def test_apjn_phase_reads_the_point_asked_for():
    """--sigma-ffn / --sigma-attn move the point whose λ⁻¹ and ζ are printed (the ViT's by default)."""
    from sigprop.apjn.runs import run_phase

    default = run_phase("derf", [1.0], grid=4)
    moved = run_phase("derf", [1.0], grid=4, point=(1.2, 0.9))
    assert default.point == (0.61, 0.31) and moved.point == (1.2, 0.9)
    assert moved.maps[0][3] != default.maps[0][3] and moved.zeta_at != default.zeta_at
    result = run_cli(["apjn", "--phase", "--norm", "derf", "--alpha", "1", "--grid", "4", "--sigma-ffn", "1.2",
                      "--sigma-attn", "0.9"])
    assert result.exit_code == 0 and "(1.2, 0.9)" in result.output, result.output


@pytest.mark.parametrize("args, message", [
    (["--norm", "batchnorm"], "--norm must be"),
    (["--norm", "derf", "--alpha", "one"], "--alpha must be"),
    (["--p0", "2"], "p0 must be <= q0"),
    (["--tokens", "15"], "square number"),
    (["--phase", "--grid", "1"], "--grid must be"),
    (["--phase", "--norm", "layernorm"], "--phase maps"),
    (["--phase", "--norm", "derf", "--blocks", "3", "--device", "cpu"], "--blocks, --device not used with --phase"),
    (["--grid", "8"], "--grid used with --phase only"),
    (["--max-sigma", "3"], "--max-sigma used with --phase only"),
])
def test_apjn_bad_options_exit_2_with_a_message(args, message):
    # the measured curves' sizes are kept tiny; --phase measures nothing and refuses them
    result = run_cli(["apjn", *([] if "--phase" in args else TINY), *args])
    assert result.exit_code == 2
    assert message in result.output
