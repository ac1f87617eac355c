"""``--set`` values parsed by their field's resolved type: each kind of type, and the one-line errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest

from sigprop.core.overrides import apply_field_overrides, describe_type, parse_field_value
from sigprop.model.config import TransformerConfig
from sigprop.train.config import TrainConfig

Mode = Literal["fast", "slow"]


@dataclass(frozen=True)
class Fields:
    count: int = 1
    rate: float = 0.5
    flag: bool = False
    name: str = "a"
    mode: Mode = "fast"
    limit: int | None = None
    scale: float | None = 1.0
    label: str | None = None
    sizes: tuple[int, ...] = (1, 2)


def _set(*items: str) -> Fields:
    return apply_field_overrides(Fields(), list(items))


@pytest.mark.parametrize(("item", "field", "value"), [
    ("count=7", "count", 7), ("count= -2 ", "count", -2),
    ("rate=1e-3", "rate", 1e-3), ("rate=3", "rate", 3.0),
    ("flag=yes", "flag", True), ("flag=TRUE", "flag", True), ("flag=0", "flag", False), ("flag=no", "flag", False),
    ("name=none", "name", "none"), ("name=x y", "name", "x y"),
    ("mode=slow", "mode", "slow"),
    ("limit=none", "limit", None), ("limit=null", "limit", None), ("limit=4", "limit", 4),
    ("scale=NONE", "scale", None), ("scale=2.5", "scale", 2.5),
    ("label=none", "label", None), ("label=b", "label", "b"),
    ("sizes=3, 4,5", "sizes", (3, 4, 5)), ("sizes=", "sizes", ()),
])
def test_each_kind_of_type_is_parsed(item, field, value):
    got = getattr(_set(item), field)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(("item", "message"), [
    ("count=1.5", "--set count: expected an integer (got '1.5')"),
    ("rate=fast", "--set rate: expected a number (got 'fast')"),
    ("flag=maybe", "--set flag: expected true/false (got 'maybe')"),
    ("mode=medium", "--set mode: expected one of fast, slow (got 'medium')"),
    ("limit=x", "--set limit: expected an integer or none (got 'x')"),
    ("scale=x", "--set scale: expected a number or none (got 'x')"),
    ("sizes=1,x", "--set sizes: expected comma-separated values, each an integer (got '1,x')"),
])
def test_a_bad_value_is_one_line_naming_the_field_and_what_it_accepts(item, message):
    with pytest.raises(ValueError) as error:
        _set(item)
    assert str(error.value) == message


def test_malformed_items_and_unknown_fields_are_refused():
    with pytest.raises(ValueError, match="--set expects key=value"):
        _set("count")
    with pytest.raises(ValueError, match="unknown config field 'nope'; known fields: count, flag"):
        _set("nope=1")


def test_dashes_read_as_underscores_and_the_option_is_named():
    assert apply_field_overrides(TransformerConfig(), ["n-layers=3"]).n_layers == 3
    with pytest.raises(ValueError, match="^--train-set schedule: expected one of cosine, linear, constant"):
        apply_field_overrides(TrainConfig(), ["schedule=exp"], "--train-set")


def test_literal_fields_of_the_configs_validate_membership():
    assert apply_field_overrides(TransformerConfig(), ["norm_position=none"]).norm_position == "none"
    with pytest.raises(ValueError, match="^--set arch: expected one of encoder, decoder, encoder_decoder"):
        apply_field_overrides(TransformerConfig(), ["arch=transformer"])


def test_describe_and_parse_a_single_value():
    assert describe_type(Literal["pre", "post"] | None) == "one of pre, post or none"
    assert parse_field_value(bool | None, "final_norm", "none") is None
