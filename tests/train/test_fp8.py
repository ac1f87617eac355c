"""FP8 direct casting (Kedia et al. Table 12): the cast against torch's own float8 dtypes, the model-wide cast
(every linear input and weight, the embedding tables, restored afterwards), ``evaluate_run`` on a tiny trained run,
and ``sigprop eval``."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch
from torch import nn

from sigprop.train.fp8 import FP8_FORMATS, fp8_direct_cast, fp8_round

ROOT = Path(__file__).resolve().parents[2]


def _all_finite_values(dtype) -> torch.Tensor:
    """Every finite value of an FP8 dtype (all 256 bit patterns, NaN and inf dropped), as float32."""
    values = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype).float()
    return values[torch.isfinite(values)]


# the cast ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", sorted(FP8_FORMATS))
def test_the_cast_is_exact_on_every_value_the_format_represents(fmt):
    values = _all_finite_values(FP8_FORMATS[fmt])
    assert values.numel() > 200
    assert torch.equal(fp8_round(values, fmt), values)


@pytest.mark.parametrize("fmt", sorted(FP8_FORMATS))
def test_the_cast_rounds_as_torch_inside_the_range_and_saturates_beyond_it(fmt):
    dtype = FP8_FORMATS[fmt]
    top = torch.finfo(dtype).max
    inside = torch.randn(10_000) * torch.logspace(-6, math.log10(top), 10_000)
    inside = inside.clamp(-top, top)
    assert torch.equal(fp8_round(inside, fmt), inside.to(dtype).float())
    beyond = torch.tensor([top * 1.02, top * 1.2, -top * 3, 1e30, -1e30, math.inf, -math.inf])
    out = fp8_round(beyond, fmt)
    assert not torch.isnan(out).any() and torch.equal(out, torch.sign(beyond) * top)
    assert fp8_round(torch.tensor([1e-12, -1e-12]), fmt).eq(0).all()  # far below the smallest subnormal
    assert torch.isnan(fp8_round(torch.tensor([math.nan]), fmt)).all()
    assert fp8_round(torch.ones(3, dtype=torch.float64), fmt).dtype == torch.float64  # back to its own dtype


def test_a_bad_format_is_a_one_line_value_error():
    for bad in ("e3m4", "E4M3", "", 8):
        with pytest.raises(ValueError, match="fp8 must be one of e4m3, e5m2"):
            fp8_round(torch.ones(2), bad)


def _representable(t: torch.Tensor, fmt: str) -> bool:
    return torch.equal(fp8_round(t, fmt), t)


@pytest.mark.parametrize("config", [
    dict(arch="encoder_decoder", n_layers=1, n_decoder_layers=1, d_model=16, n_heads=2, seq_len=8, max_len=8,
         vocab_size=64),
    dict(input="patches", image_size=8, patch_size=4, channels=1, n_classes=3, n_layers=1, d_model=16, n_heads=2,
         seq_len=4),
    dict(arch="decoder", n_layers=1, d_model=16, n_heads=2, seq_len=8, max_len=8, vocab_size=64, norm="rmsnorm",
         activation="swiglu", position="rope", tie_head=False),
], ids=["encoder_decoder", "vit", "swiglu"])
def test_every_linear_input_and_weight_and_every_table_is_cast_and_restored(config):
    from sigprop.model.config import TransformerConfig
    from sigprop.model.transformer import seeded_model

    cfg = TransformerConfig(**config)
    model = seeded_model(cfg, 0, masks=False).eval()
    with torch.no_grad():  # inputs of a large scale, so that the cast is visible and some values saturate
        for p in model.parameters():
            p.mul_(3.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    if cfg.input == "tokens":
        ids = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len))
        args, kwargs = (ids,), {"decoder_inputs": ids}
    else:
        args, kwargs = (torch.randn(2, 1, 8, 8) * 400.0,), {}
    reference = model(*args, **kwargs)
    seen = []

    def check(module, a, kw):  # registered after the cast's hook, so it sees what the module computes with
        tensors = [t for t in (*a, *kw.values()) if isinstance(t, torch.Tensor) and t.is_floating_point()]
        seen.append((type(module).__name__, sorted(kw), all(_representable(t, "e4m3") for t in tensors)))

    with fp8_direct_cast(model, "e4m3") as stats:
        cast = [m for m in model.modules() if isinstance(m, nn.Linear) or hasattr(m, "w_q") or hasattr(m, "w_gate")]
        handles = [m.register_forward_pre_hook(check, with_kwargs=True) for m in cast]
        low = model(*args, **kwargs)
        for h in handles:
            h.remove()
        for name, p in model.named_parameters():  # every matrix: the linear layers', projections', tables
            if p.dim() >= 2:
                assert _representable(p.detach(), "e4m3"), name
    assert len(seen) == len(cast) and all(ok for _, _, ok in seen), seen
    if cfg.arch == "encoder_decoder":
        assert any(name == "CrossAttention" and "memory" in kw for name, kw, _ in seen)  # the memory is cast too
    assert not torch.equal(low, reference) and torch.isfinite(low).all()
    assert stats.activations["values"] > 0 and stats.weights["values"] > 0
    if cfg.input == "patches":
        assert stats.activations["overflow"] > 0  # pixels of ±400·N(0,1) beyond 448 saturated, not NaN
    for k, v in model.state_dict().items():  # restored bit for bit, hooks gone
        assert torch.equal(v, before[k]), k
    assert torch.equal(model(*args, **kwargs), reference)


# evaluate_run on a tiny trained run -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A 2-layer cpu-deep decoder trained 3 steps on a small corpus of standard-library files (validated once, at
    step 3, on one batch)."""
    from sigprop.train import fit
    from sigprop.train.presets import resolve_train_configs

    corpus = tmp_path_factory.mktemp("fp8-corpus")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in ("json", "email"):
        for f in sorted((stdlib / name).glob("*.py")):
            shutil.copy(f, corpus / f"{name}_{f.name}")
    m, t = resolve_train_configs("cpu-deep", (), ["n_layers=2"],
                                 ["steps=3", "eval_every=3", "eval_batches=1", f"data={corpus}"])
    out = tmp_path_factory.mktemp("fp8-run") / "run"
    fit(m, t, out)
    return out


def test_evaluate_run_reproduces_the_logged_loss_and_casts(run):
    from sigprop.train.fp8 import evaluate_run

    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last_val = [r for r in logged if r.get("val_loss") is not None][-1]
    e4m3 = evaluate_run(run, "e4m3")
    assert e4m3["checkpoint"] == "ckpt-00000003.json" and e4m3["step"] == 3 == last_val["step"]
    assert e4m3["fp32"]["val_loss"] == pytest.approx(last_val["val_loss"], rel=1e-6)
    assert e4m3["fp32"]["val_ppl"] == pytest.approx(math.exp(last_val["val_loss"]), rel=1e-6)
    for key in ("fp32", "fp8_e4m3"):
        assert math.isfinite(e4m3[key]["val_loss"]) and math.isfinite(e4m3[key]["val_ppl"])
    assert e4m3["delta"] == pytest.approx(e4m3["fp8_e4m3"]["val_loss"] - e4m3["fp32"]["val_loss"])
    for key in ("activation_overflow_fraction", "underflow_fraction", "weight_overflow_fraction",
                "weight_underflow_fraction"):
        assert 0.0 <= e4m3[key] < 0.05, (key, e4m3[key])  # DeepScaleLM: unit-scale activations fit FP8 as they are
    e5m2 = evaluate_run(run, "e5m2", batches=1)
    assert e5m2["fp32"] == e4m3["fp32"]
    assert e5m2["fp8_e5m2"]["val_loss"] != e5m2["fp32"]["val_loss"] and e5m2["delta"] != 0.0
    assert "fp8_e4m3" not in e5m2
    plain = evaluate_run(run, None)
    assert plain["fp32"] == e4m3["fp32"] and "delta" not in plain
    json.dumps(e4m3, allow_nan=False)  # JSON-ready


def test_evaluate_run_refuses_bad_input(run, tmp_path):
    from sigprop.train.fp8 import evaluate_run

    with pytest.raises(ValueError, match="fp8 must be one of"):
        evaluate_run(run, "e3m4")
    with pytest.raises(ValueError, match="not a run directory"):
        evaluate_run(tmp_path, "e4m3")
    with pytest.raises(ValueError, match="batches must be"):
        evaluate_run(run, None, batches=0)
    empty = tmp_path / "no-checkpoint"
    empty.mkdir()
    shutil.copy(run / "run.json", empty / "run.json")
    with pytest.raises(ValueError, match="no checkpoint"):
        evaluate_run(empty, "e4m3")


# the command line -------------------------------------------------------------------------------------------------
def _sigprop(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "sigprop", *args], capture_output=True, text=True, timeout=300,
                          env=env)


def test_sigprop_eval_prints_both_losses_and_writes_json(run, tmp_path):
    out = tmp_path / "fp8.json"
    done = _sigprop("eval", str(run), "--fp8", "e4m3", "--json", str(out))
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert "loss fp32" in done.stdout and "loss fp8 e4m3" in done.stdout
    assert f"{data['fp32']['val_loss']:.4f}" in done.stdout
    assert f"{data['fp8_e4m3']['val_loss']:.4f}" in done.stdout
    assert data["format"] == "e4m3" and data["step"] == 3


@pytest.mark.long
@pytest.mark.parametrize("args", [["--fp8", "e3m4"], ["--json", "out.txt"], ["NO_RUN"]], ids=["format", "json",
                                                                                               "not-a-run"])
def test_sigprop_eval_refuses_bad_input_with_one_error_line(run, tmp_path, args):
    args = [str(tmp_path) if a == "NO_RUN" else a for a in args]
    target = [] if str(tmp_path) in args else [str(run)]
    done = _sigprop("eval", *target, *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr and not done.stdout.strip()
