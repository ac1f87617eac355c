"""Field checks for the frozen configuration dataclasses (validation lives in one place: each dataclass's
``__post_init__`` calls these), with messages that name the field and what it allows."""

from __future__ import annotations

import math

__all__ = ["check_choice", "check_integer", "check_number", "integer_value"]


def check_choice(obj, name: str, allowed) -> None:
    """``obj.name`` must be one of ``allowed``."""
    v = getattr(obj, name)
    if v not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))} (got {v!r})")


def integer_value(v, name: str, lo: int) -> int:
    """``v`` as an ``int`` if it is an integer (Python or NumPy) >= ``lo``; booleans are refused. For function
    arguments; :func:`check_integer` is its form for a dataclass field."""
    import numbers

    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo} (got {v!r})")
    return int(v)


def check_integer(obj, name: str, lo: int, optional: bool = False) -> None:
    """``obj.name`` must be an integer >= ``lo`` (or None when ``optional``); booleans are refused."""
    v = getattr(obj, name)
    if v is None and optional:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo} (got {v!r})")


def check_number(obj, name: str, lo=None, hi=None, lo_open: bool = False, hi_open: bool = False,
                 optional: bool = False) -> None:
    """``obj.name`` must be a finite number in the interval [lo, hi] (ends open with ``lo_open`` / ``hi_open``,
    unbounded where None), or None when ``optional``; booleans are refused."""
    v = getattr(obj, name)
    if v is None and optional:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number (got {v!r})")
    bad = (lo is not None and (v <= lo if lo_open else v < lo)) or (
        hi is not None and (v >= hi if hi_open else v > hi))
    if bad:
        lb = "(" if lo_open else "["
        hb = ")" if hi_open else "]"
        raise ValueError(f"{name} must be in {lb}{lo if lo is not None else '-inf'}, "
                         f"{hi if hi is not None else 'inf'}{hb} (got {v!r})")
