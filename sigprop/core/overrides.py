"""``key=value`` overrides of a frozen dataclass (the command line's ``--set`` and ``--train-set``), each value parsed
by its field's declared type."""

from __future__ import annotations

import dataclasses

__all__ = ["parse_field_value", "apply_field_overrides"]


def parse_field_value(field_type: str, key: str, text: str, option: str = "--set"):
    """``text`` as the value of field ``key`` of (string-annotated) type ``field_type``: "none" / "null" is None only
    for a field that may be None (``norm=none`` is the string "none"); booleans are true/false, 1/0, yes/no.
    ``ValueError`` naming ``option`` and the field otherwise."""
    t = text.strip()
    if t.lower() in ("none", "null") and "None" in field_type:
        return None
    if "bool" in field_type:
        if t.lower() in ("true", "1", "yes"):
            return True
        if t.lower() in ("false", "0", "no"):
            return False
        raise ValueError(f"{option} {key}: expected true/false (got {text!r})")
    if "int" in field_type and "float" not in field_type:
        try:
            return int(t)
        except ValueError:
            raise ValueError(f"{option} {key}: expected an integer (got {text!r})") from None
    if "float" in field_type:
        try:
            return float(t)
        except ValueError:
            raise ValueError(f"{option} {key}: expected a number (got {text!r})") from None
    return t


def apply_field_overrides(obj, overrides, option: str = "--set", what: str = "config field"):
    """A copy of the frozen dataclass ``obj`` with ``key=value`` strings applied (dashes in a key read as
    underscores); the dataclass validates the result. ``ValueError`` naming ``option`` on a malformed item or an
    unknown field."""
    types = {f.name: str(f.type) for f in dataclasses.fields(obj)}
    changes = {}
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"{option} expects key=value (got {item!r})")
        key, value = item.split("=", 1)
        key = key.strip().replace("-", "_")
        if key not in types:
            raise ValueError(f"{option}: unknown {what} {key!r}; known fields: {', '.join(sorted(types))}")
        changes[key] = parse_field_value(types[key], key, value, option)
    return dataclasses.replace(obj, **changes)
