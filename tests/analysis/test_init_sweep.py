"""sigprop.analysis.init_sweep and ``sigprop inits``: every scheme and depth predicted and diagnosed, refused schemes
kept
with their error, and the order of growth in N read off the theory (Kedia et al. Table 3)."""

import json

import numpy as np
import pytest

from sigprop import TransformerConfig
from sigprop.analysis.init_sweep import _order, depth_orders, sweep_inits, sweep_steps
from tests.helpers import run_cli

SMALL = dict(d_model=32, n_heads=2, seq_len=16, max_len=16, vocab_size=300, dropout=0.1)
DEPTHS = (4, 8, 16)


def test_orders_of_known_curves():
    n = np.array([12.0, 48.0, 192.0, 768.0])
    assert _order("a", "fwd_var", n, 0.5 * n).describe() == "~N^1.00"
    assert _order("a", "fwd_var", n, np.full(4, 0.25) * (1 + 0.01 * np.sin(n))).describe() == "O(1)"
    exponential = _order("a", "grad_var", n, 0.96**n)
    assert exponential.kind == "exponential" and exponential.rate == pytest.approx(0.96, rel=1e-12)
    assert _order("a", "fwd_var", n[:2], n[:2]) is None  # two depths cannot tell a law


def test_sweep_reads_table_3_off_the_theory():
    """Pre-LN: Xavier's forward variance grows like N (App. E.1); DeepScaleLM's stays bounded at every depth and
    grows far more slowly (App. E.3: O(1), reached as its first layers' share of the stream fades); every progress
    step is reported."""
    config = TransformerConfig(n_layers=4, norm_position="pre", **SMALL)
    steps = []
    rows = sweep_inits(config, ["xavier", "dslm"], DEPTHS, attention_heads=16, progress=steps.append)
    assert [(r.init, r.n_layers) for r in rows] == [(i, n) for i in ("xavier", "dslm") for n in DEPTHS]
    assert sum(steps) == sweep_steps(config, ["xavier", "dslm"], DEPTHS)
    orders = {(o.init, o.quantity): o for o in depth_orders(rows)}
    assert orders[("xavier", "fwd_var")].kind == "power" and 0.6 < orders[("xavier", "fwd_var")].rate < 1.3
    assert all(r.finding("fwd_var").verdict == "bounded" for r in rows if r.init == "dslm")
    assert orders[("dslm", "fwd_var")].rate < orders[("xavier", "fwd_var")].rate - 0.4


def test_a_refused_scheme_is_a_row_with_its_error():
    config = TransformerConfig(n_layers=4, **SMALL)
    rows = sweep_inits(config, ["xavier", "no-such-init"], [4])
    assert rows[0].error is None and rows[1].diagnosis is None and "no-such-init" in rows[1].error
    with pytest.raises(ValueError, match="depths"):
        sweep_inits(config, ["xavier"], [0])
    with pytest.raises(ValueError, match="patch model"):
        sweep_inits(config.replace(input="patches", seq_len=64, max_len=64, image_size=32, patch_size=4,
                                   input_corr=0.2), ["xavier"], [4])


def test_a_dict_batch_is_swept_with_progress():
    """``sweep_steps`` read ``batch.inputs`` of a dict batch: a sweep with progress stopped on AttributeError."""
    import torch

    from sigprop import make_batch

    config = TransformerConfig(n_layers=2, **SMALL)
    ids = torch.randint(5, config.vocab_size, (3, config.seq_len), generator=torch.Generator().manual_seed(0))
    batch = make_batch(config, ids, torch.Generator().manual_seed(1))
    as_dict = {"input_ids": batch.inputs, "labels": batch.labels}
    assert sweep_steps(config, ["xavier"], [2], as_dict) == sweep_steps(config, ["xavier"], [2], batch)
    ticks = []
    rows = sweep_inits(config, ["xavier", "no-such-init"], [2], batch=as_dict, progress=ticks.append)
    assert rows[0].error is None and "no-such-init" in rows[1].error and ticks


def test_a_patch_model_is_swept_on_its_images():
    """A ViT: the boundaries come from a batch of digits, both sweeps token-resolved; DeepScaleLM takes its input
    correlation from the images (App. H) although the swept config started from Xavier without one."""
    from sigprop.analysis.experiment import config_batch

    config = TransformerConfig(n_layers=4, input="patches", image_size=16, patch_size=4, seq_len=16, max_len=16,
                               d_model=32, n_heads=2, dropout=0.1)
    config, batch = config_batch(config, batch_size=4)
    assert config.input_corr is None  # Xavier needs none
    steps = []
    rows = sweep_inits(config, ["xavier", "dslm"], [4, 8], attention_heads=16, progress=steps.append, batch=batch)
    assert all(r.error is None for r in rows), [r.error for r in rows]
    assert sum(steps) == sweep_steps(config, ["xavier", "dslm"], [4, 8], batch)
    assert all(r.finding("fwd_var").verdict == "bounded" for r in rows if r.init == "dslm")


def test_an_overflowing_theory_is_a_row_and_its_steps_are_counted(monkeypatch):
    from sigprop.core.errors import NotFinite
    from sigprop.theory.predict import Prediction

    def overflow(self, grad_top=None, gradients=True, progress=None):
        progress(3)
        raise NotFinite("layer 120: Moments.var must be finite (got inf)")

    monkeypatch.setattr(Prediction, "profile", overflow)
    config = TransformerConfig(n_layers=4, **SMALL)
    steps = []
    (row,) = sweep_inits(config, ["deepnorm"], [8], progress=steps.append)
    assert row.diagnosis is None and row.error.startswith("overflow: layer 120")
    assert sum(steps) == sweep_steps(config, ["deepnorm"], [8])


def test_schemes_that_start_as_the_identity():
    """SkipInit (β = 0) passes its input on at every depth; LayerScale's β is 0.1 up to 18 layers and 1e-5 or less
    beyond (CaiT), so its depths mix the two and no order in N is read off them."""
    config = TransformerConfig(n_layers=4, **SMALL)
    rows = sweep_inits(config, ["skipinit", "layerscale"], [12, 24, 48], attention_heads=16)
    orders = {(o.init, o.quantity): o.describe() for o in depth_orders(rows)}
    assert orders[("skipinit", "fwd_var")] == "identity (β ≈ 0)"
    assert orders[("layerscale", "grad_var")] == "β depends on N"
    json.dumps([o.to_dict() for o in depth_orders(rows)] + [r.to_dict() for r in rows], allow_nan=False)


def test_inits_command_writes_json_and_figure(tmp_path):
    out, fig = tmp_path / "i.json", tmp_path / "i.png"
    args = ["inits", "--set", "n_layers=4", *[a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")],
            "--inits", "xavier,dslm", "--depths", ",".join(map(str, DEPTHS)), "--attention-heads", "16",
            "--json", str(out), "--plot", str(fig)]
    result = run_cli(args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["kind"] == "init_sweep" and len(data["rows"]) == 6
    assert {o["init"] for o in data["orders"]} == {"xavier", "dslm"}
    assert "Table 3" in result.output and fig.stat().st_size > 10_000
    bad = run_cli(["inits", "--depths", "12,x"])
    assert bad.exit_code == 2 and "comma-separated list of integers" in bad.output


def test_an_encoder_decoder_is_diagnosed_per_stack():
    config = TransformerConfig(n_layers=3, arch="encoder_decoder", n_decoder_layers=3, **SMALL)
    (row,) = sweep_inits(config, ["xavier"], [3], attention_heads=16)
    assert row.stacks() == ["encoder", "decoder"]
    assert row.finding("grad_var", "decoder") is not row.finding("grad_var", "encoder")
    result = run_cli(["inits", "--set", "arch=encoder_decoder", "--set", "n_layers=3",
                                      "--set", "n_decoder_layers=3",
                                      *[a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")],
                                      "--inits", "xavier", "--attention-heads", "16"])
    assert result.exit_code == 0, result.output
    assert "xavier (encoder)" in result.output and "xavier (decoder)" in result.output
