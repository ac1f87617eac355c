"""Thousands of invalid inputs, drawn by hypothesis: every invalid value of every config field is refused by the
config's constructor with a ``ValueError`` naming the field (nothing else escapes, nothing is accepted), and every
invalid option value or ``--set`` value given to a command ends in one ``error:`` line on standard error and status
2, with nothing on standard output and no traceback."""

from __future__ import annotations

import math
from dataclasses import fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sigprop.components.factory import ACTIVATIONS, ATTENTIONS, NORMS
from sigprop.components.shaped_relu import SHAPED_MODES
from sigprop.model.config import (
    ARCHS,
    INPUTS,
    MAX_DROPOUT,
    MAX_NUMBER,
    NORM_POSITIONS,
    POOLS,
    POSITIONS,
    V_INITS,
    TransformerConfig,
)
from sigprop.model.init import SCHEMES
from tests.helpers import run_cli

#: field -> (kind, lower bound, lower bound open, upper bound, may be None) for numbers; the allowed set for choices
INTS = {"vocab_size": 1, "max_len": 1, "n_layers": 1, "d_model": 1, "n_heads": 1, "seq_len": 1, "image_size": 1,
        "patch_size": 1, "channels": 1, "n_classes": 1, "n_segments": 0}
OPTIONAL_INTS = {"n_decoder_layers": 1, "d_ff": 1, "shaped_anneal_steps": 1, "n_kv_heads": 1, "head_dim": 1}
FLOATS = {  # name: (lo, lo_open, hi, optional[, "hi_open"])
    "dropout": (0.0, False, MAX_DROPOUT, False), "attn_dropout": (0.0, False, MAX_DROPOUT, True),
    "embed_dropout": (0.0, False, MAX_DROPOUT, True),
    "norm_eps": (0.0, False, MAX_NUMBER, False), "norm_alpha": (0.0, True, MAX_NUMBER, False),
    "norm_alpha_attn": (0.0, True, MAX_NUMBER, True), "norm_alpha_ffn": (0.0, True, MAX_NUMBER, True),
    "norm_alpha_final": (0.0, True, MAX_NUMBER, True), "head_scale": (0.0, True, MAX_NUMBER, True),
    "beta_k": (0.0, True, MAX_NUMBER, False), "beta_alpha": (0.0, False, MAX_NUMBER, False),
    "lam": (0.0, False, MAX_NUMBER, True), "beta": (0.0, False, MAX_NUMBER, True),
    "qk_gain": (0.0, True, MAX_NUMBER, False), "sigma_ov": (0.0, True, MAX_NUMBER, False),
    "sigma_21": (0.0, True, MAX_NUMBER, False), "input_corr": (0.0, True, 1.0, True),
    "mask_prob": (0.0, True, 1.0, False, "hi_open"), "shaped_tau0": (0.0, True, MAX_NUMBER, False),
    "shaped_gamma1": (-MAX_NUMBER, False, MAX_NUMBER, False), "shaped_gamma2": (-MAX_NUMBER, False, MAX_NUMBER, False),
    "shaped_c_plus": (-MAX_NUMBER, False, MAX_NUMBER, False), "shaped_c_minus": (-MAX_NUMBER, False, MAX_NUMBER, False),
    "shaped_gamma": (0.0, True, 1.0, False), "rope_theta": (1.0, True, None, False),
    "initializer_range": (0.0, True, MAX_NUMBER, False), "embed_scale": (0.0, True, MAX_NUMBER, False),
    "rotary_fraction": (0.0, True, 1.0, False),
}
CHOICES = {"arch": ARCHS, "input": INPUTS, "activation": ACTIVATIONS, "norm": NORMS, "norm_position": NORM_POSITIONS,
           "v_init": V_INITS, "init": tuple(SCHEMES), "attention": ATTENTIONS, "shaped_mode": SHAPED_MODES,
           "position": POSITIONS, "pool": POOLS}
BOOLS = {"tie_head": False, "learnable_beta": False, "shaped_normalize": False, "final_norm": True, "qk_norm": False,
         "parallel_block": False, "head_transform": False}


def test_every_field_is_covered():
    assert set(INTS) | set(OPTIONAL_INTS) | set(FLOATS) | set(CHOICES) | set(BOOLS) == {f.name for f in
                                                                                          fields(TransformerConfig)}


def _below(lo, lo_open):
    top = lo if lo_open else math.nextafter(lo, -math.inf)
    return st.floats(min_value=-1e12, max_value=top, allow_nan=False)


def _above(hi, hi_open) -> list:
    """The strategy of finite values above a field's upper bound, none for a field without one (``hi`` None)."""
    if hi is None:
        return []
    return [st.floats(min_value=hi if hi_open else math.nextafter(hi, math.inf), max_value=1e300)]


def invalid_values(name: str):
    """A strategy of values field ``name`` must refuse."""
    junk = st.sampled_from(["x", "", "1e", "[1]", object()])
    if name in INTS or name in OPTIONAL_INTS:
        lo = INTS.get(name, OPTIONAL_INTS.get(name))
        values = [st.integers(max_value=lo - 1), st.floats(allow_nan=True).filter(lambda v: v != int(v) if
                                                                                  math.isfinite(v) else True),
                  st.booleans(), junk]
        return st.one_of(*values, *([st.none()] if name in INTS else []))
    if name in FLOATS:
        lo, lo_open, hi, optional, *hi_open = FLOATS[name]
        values = [_below(lo, lo_open), *_above(hi, hi_open), st.sampled_from([math.nan, math.inf, -math.inf]),
                  st.booleans(), junk]
        return st.one_of(*values, *([] if optional else [st.none()]))
    if name in CHOICES:
        return st.one_of(st.text(max_size=12).filter(lambda s: s not in CHOICES[name]), st.integers(), st.none())
    return st.one_of(st.sampled_from(["yes", "no", "true", 1, 0, 1.0]), *([] if BOOLS[name] else [st.none()]))


FIELDS = sorted(set(INTS) | set(OPTIONAL_INTS) | set(FLOATS) | set(CHOICES) | set(BOOLS))


@settings(max_examples=700, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FIELDS).flatmap(lambda name: st.tuples(st.just(name), invalid_values(name))))
def test_the_config_refuses_every_invalid_value(case):
    name, value = case
    with pytest.raises(ValueError, match=name):
        TransformerConfig(**{name: value})


def _set_text(name: str):
    """Texts that ``--set name=TEXT`` must refuse."""
    if name in CHOICES:
        return st.text(alphabet="abcdefghij_xyz0123456789.-", min_size=1, max_size=10).filter(
            lambda s: s not in CHOICES[name] and s.lower() not in ("none", "null"))
    if name in BOOLS:
        return st.sampled_from(["maybe", "2", "truth", "-1", "nan", "1.0"])
    if name in INTS or name in OPTIONAL_INTS:
        lo = INTS.get(name, OPTIONAL_INTS.get(name))
        return st.one_of(st.integers(max_value=lo - 1).map(str), st.sampled_from(["1.5", "x", "1e3", "nan", "0x1"]))
    lo, lo_open, hi, _, *hi_open = FLOATS[name]
    return st.one_of(st.sampled_from(["nan", "inf", "-inf", "x", "1e400", "1,5"]), _below(lo, lo_open).map(repr),
                     *(above.map(repr) for above in _above(hi, hi_open)))


BAD_OPTIONS = [  # (command and the options it needs, option, invalid values)
    (["measure"], "--seeds", ["0", "-3", "x", "1.5"]),
    (["compare"], "--seeds", ["0", "-1"]),
    (["measure"], "--batch-size", ["0", "-1", "two"]),
    (["predict"], "--batch-size", ["0", "-7"]),
    (["measure"], "--first-seed", ["-1", "x"]),
    (["predict"], "--attention-heads", ["1", "0", "-2"]),
    (["measure"], "--device", ["", "gpu", "cuda:99", ",", "cpu,", "tpu:0"]),
    (["compare"], "--grad-boundary", ["both", "", "measure"]),
    (["predict"], "--json", ["", "/proc/self/x.json", "/proc/version/x.json", "/"]),
    (["predict"], "--plot", ["p.txt", "", "/proc/self/p.png", "/"]),
    (["predict"], "--config", ["/missing.json", "/"]),
    (["predict"], "--data", ["/missing/text"]),
    (["compare"], "--measured", ["/missing.json", "/", "/etc/hostname"]),
    (["inits"], "--depths", ["0", "x", "12,y", ",", "-4"]),
    (["inits"], "--inits", ["nope", "xavier,zzz", ","]),
    (["apjn"], "--alpha", ["-1", "0", "nan", "x", "1e308"]),
    (["apjn"], "--blocks", ["0", "1", "-2"]),
    (["apjn"], "--norm", ["batchnorm", "", ","]),
    (["apjn"], "--tokens", ["15", "1"]),
    (["apjn", "--phase"], "--grid", ["1", "0"]),
    (["apjn", "--phase"], "--max-sigma", ["0", "-1", "1e9"]),
    (["sde"], "--figure", ["6", "0", "9"]),
    (["sde"], "--samples", ["1", "0"]),
    (["sde"], "--gamma", ["2", "-0.1", "nan"]),
    (["sde"], "--dt", ["0", "-1", "nan"]),
    (["sde"], "--seed", ["-1"]),
    (["experiment", "fp8"], "--workers", ["0", "-1"]),
    (["experiment", "fp8", "--table-only"], "--runs-dir", ["/nonexistent"]),
    (["sde", "--tokens", "8"], "--width", ["2", "15"]),
    (["verify"], "--configs", ["0", "-1"]),
    (["verify"], "--seed", ["-1"]),
    (["verify"], "--approx", ["paper", "x"]),
    (["verify", "nonsense"], "--quick", [None]),
    (["demo"], "--seeds", ["0", "-1"]),
    (["demo"], "--out", ["/proc/version", "/proc/self/report"]),
]


@pytest.mark.long
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FIELDS).flatmap(lambda name: st.tuples(st.just(name), _set_text(name))),
       st.sampled_from(["predict", "measure", "compare", "inits"]))
def test_every_command_refuses_every_invalid_set_value(case, command):
    name, text = case
    _refused([command, "--set", f"{name}={text}"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(BAD_OPTIONS).flatmap(lambda o: st.tuples(st.just(o[0]), st.just(o[1]), st.sampled_from(o[2]))))
def test_every_command_refuses_every_invalid_option_value(case):
    command, option, value = case
    _refused([*command, option] + ([] if value is None else [value]))


def _refused(args):
    result = run_cli(args)
    lines = [line for line in result.stderr.splitlines() if not line.startswith("[")]  # progress lines aside
    assert result.exit_code == 2, (args, result.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), (args, result.stderr)
    assert "Traceback" not in result.output and not result.stdout.strip(), (args, result.output)
