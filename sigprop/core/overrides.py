"""``key=value`` overrides of a frozen dataclass (the command line's ``--set`` and ``--train-set``), each value parsed
by its field's type as :func:`typing.get_type_hints` resolves it: ``bool``, ``int``, ``float``, ``str``,
``Literal[...]`` (the value must be one of its members), ``X | None`` and ``tuple[X, ...]`` (comma-separated)."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

if TYPE_CHECKING:
    from _typeshed import DataclassInstance
_Config = TypeVar("_Config", bound="DataclassInstance")
_T = TypeVar("_T")

__all__ = ["parse_field_value", "apply_field_overrides", "describe_type", "dataclass_from_dict", "DictConfig"]

_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")
_NONE = ("none", "null")
_WORDS = {bool: "true/false", int: "an integer", float: "a number", str: "a string"}


def _union_args(annotation: Any) -> tuple | None:
    """The members of a union annotation (``X | Y`` or ``Optional[X]``), None for any other annotation."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return None


def describe_type(annotation: Any) -> str:
    """What a value of ``annotation`` looks like on the command line, for an error message.

    Args:
        annotation: a resolved type annotation (``int``, ``Literal["a", "b"]``, ``float | None``, …).

    Returns:
        Words such as "an integer", "one of pre, post, none", "a number or none".

    Example:
        >>> describe_type(int | None)
        'an integer or none'
    """
    members = _union_args(annotation)
    if members is not None:
        words = [describe_type(m) for m in members if m is not type(None)]
        return " or ".join(words + (["none"] if type(None) in members else []))
    if typing.get_origin(annotation) is Literal:
        return "one of " + ", ".join(str(v) for v in typing.get_args(annotation))
    if typing.get_origin(annotation) is tuple:
        item = typing.get_args(annotation)[0] if typing.get_args(annotation) else str
        return f"comma-separated values, each {describe_type(item)}"
    return _WORDS.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _parse(annotation: Any, text: str) -> Any:
    """``text`` (stripped) as a value of ``annotation``; ``ValueError`` (without a message) where it is not one."""
    members = _union_args(annotation)
    if members is not None:
        if type(None) in members and text.lower() in _NONE:
            return None
        for member in members:
            if member is type(None):
                continue
            try:
                return _parse(member, text)
            except ValueError:
                continue
        raise ValueError
    if typing.get_origin(annotation) is Literal:
        for member in typing.get_args(annotation):
            if str(member) == text:
                return member
        raise ValueError
    if typing.get_origin(annotation) is tuple:
        args = typing.get_args(annotation)
        item = args[0] if args else str
        parts = [p.strip() for p in text.split(",")] if text else []
        return tuple(_parse(item, p) for p in parts)
    if annotation is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError
    if annotation is int:
        return int(text)
    if annotation is float:
        return float(text)
    if annotation is str:
        return text
    raise TypeError(f"a field of type {annotation!r} cannot be set from text")


def parse_field_value(annotation: Any, key: str, text: str, option: str = "--set") -> Any:
    """``text`` as the value of field ``key`` of type ``annotation`` (resolved, as :func:`typing.get_type_hints`
    gives it).

    "none" / "null" is None only for a field that may be None (``norm=none`` is the string "none"); booleans are
    true/false, 1/0, yes/no; a ``Literal`` field takes one of its members; a tuple field comma-separated items.

    Args:
        annotation: the field's type.
        key: the field's name (for the error message).
        text: the value as written.
        option: the option that set it (for the error message).

    Returns:
        The parsed value.

    Raises:
        ValueError: one line naming ``option``, the field, what it accepts and what was given.

    Example:
        >>> from typing import Literal
        >>> parse_field_value(Literal["pre", "post"], "norm_position", "post")
        'post'
    """
    try:
        return _parse(annotation, text.strip())
    except ValueError:
        raise ValueError(f"{option} {key}: expected {describe_type(annotation)} (got {text!r})") from None


def apply_field_overrides(obj: _Config, overrides: Iterable[str], option: str = "--set",
                          what: str = "config field") -> _Config:
    """A copy of the frozen dataclass ``obj`` with ``key=value`` strings applied (dashes in a key read as
    underscores); the dataclass validates the result.

    Args:
        obj: a dataclass instance.
        overrides: ``key=value`` strings.
        option: the option they came from (for error messages).
        what: what a key names (for error messages).

    Returns:
        The new instance.

    Raises:
        ValueError: a malformed item, an unknown field or a value its field's type does not accept (one line naming
            ``option``).

    Example:
        >>> from sigprop.model.config import TransformerConfig
        >>> apply_field_overrides(TransformerConfig(), ["n_layers=3", "lam=none"]).n_layers
        3
    """
    hints = typing.get_type_hints(type(obj))
    types_ = {f.name: hints[f.name] for f in dataclasses.fields(obj)}
    changes = {}
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"{option} expects key=value (got {item!r})")
        key, value = item.split("=", 1)
        key = key.strip().replace("-", "_")
        if key not in types_:
            raise ValueError(f"{option}: unknown {what} {key!r}; known fields: {', '.join(sorted(types_))}")
        changes[key] = parse_field_value(types_[key], key, value, option)
    return dataclasses.replace(obj, **changes)


def dataclass_from_dict(cls: type[_T], data: Any, what: str = "config") -> _T:
    """An instance of the dataclass ``cls`` from a plain dict (a JSON file), rejecting unknown keys by name; the
    dataclass validates the values.

    Args:
        cls: the dataclass.
        data: field name → value.
        what: what it is called in the messages ("config", "training config").

    Returns:
        ``cls(**data)``.

    Raises:
        ValueError: ``data`` is not a dict, or holds keys that are not fields (named, with the known ones).

    Example:
        >>> from sigprop.train.config import TrainConfig
        >>> dataclass_from_dict(TrainConfig, {"steps": 10}, "training config").steps
        10
    """
    if not isinstance(data, dict):
        raise ValueError(f"a {what} must be a JSON object of field: value pairs (got {type(data).__name__})")
    known = {f.name for f in dataclasses.fields(cast(Any, cls))}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown {what} field(s): {', '.join(unknown)}; known fields: {', '.join(sorted(known))}")
    return cls(**data)


_Self = TypeVar("_Self", bound="DictConfig")


class DictConfig:
    """What a frozen configuration dataclass offers besides its fields: a changed copy, a plain dict and JSON."""

    def replace(self: _Self, **changes: Any) -> _Self:
        """A copy with ``changes`` (field name → value), validated again."""
        return dataclasses.replace(cast(Any, self), **changes)

    def to_dict(self) -> dict:
        """Field name → value."""
        return dataclasses.asdict(cast(Any, self))

    def to_json(self) -> str:
        """:meth:`to_dict` as indented JSON."""
        return json.dumps(self.to_dict(), indent=1)
