"""Field checks for the frozen configuration dataclasses (validation lives in one place: each dataclass's
``__post_init__`` calls these), with messages that name the field and what it allows."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, TypeVar, cast, overload

import numpy as np
import numpy.typing as npt

from .errors import NotFinite

__all__ = ["check_choice", "check_boolean", "check_integer", "check_number", "integer_value", "check_range",
           "check_approx", "check_corr_hidden", "NormChecks", "as_float64", "clip_corr"]

_Checked = TypeVar("_Checked")


def check_choice(obj: object, name: str, allowed: Collection[Any]) -> None:
    """``obj.name`` must be one of ``allowed``."""
    v = getattr(obj, name)
    if v not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))} (got {v!r})")


def integer_value(v: object, name: str, lo: int) -> int:
    """``v`` as an ``int`` if it is an integer (Python or NumPy) >= ``lo``; booleans are refused. For function
    arguments; :func:`check_integer` is its form for a dataclass field."""
    import numbers

    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo} (got {v!r})")
    return int(v)


def check_boolean(obj: object, name: str, optional: bool = False) -> None:
    """``obj.name`` must be true or false (or None when ``optional``); a NumPy boolean is stored back as ``bool``."""
    v = getattr(obj, name)
    if isinstance(v, np.bool_):
        v = bool(v)
        object.__setattr__(obj, name, v)
    if not (isinstance(v, bool) or (optional and v is None)):
        raise ValueError(f"{name} must be true or false{' (or None)' if optional else ''} (got {v!r})")


def _plain(obj: object, name: str) -> object:
    """``obj.name``, a NumPy integer or float first stored back as the Python ``int`` or ``float`` of the same value
    (so that a field read from an array validates, serialises to JSON and hashes as the number it is; a NumPy
    boolean stays refused, as ``bool`` is)."""
    v = getattr(obj, name)
    if isinstance(v, (np.integer, np.floating)):
        v = v.item()
        object.__setattr__(obj, name, v)  # the configs are frozen dataclasses: this is their own validation
    return v


def check_integer(obj: object, name: str, lo: int, optional: bool = False) -> None:
    """``obj.name`` must be an integer >= ``lo`` (or None when ``optional``); booleans are refused."""
    v = _plain(obj, name)
    if v is None and optional:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo} (got {v!r})")


def check_number(obj: object, name: str, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
                 hi_open: bool = False,
                 optional: bool = False) -> None:
    """``obj.name`` must be a finite number in the interval [lo, hi] (ends open with ``lo_open`` / ``hi_open``,
    unbounded where None), or None when ``optional``; booleans are refused."""
    v = _plain(obj, name)
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


@overload
def as_float64(value: float, name: str) -> float: ...


@overload
def as_float64(value: npt.ArrayLike, name: str) -> float | np.ndarray: ...


def as_float64(value: npt.ArrayLike, name: str) -> float | np.ndarray:
    """``value`` (a number or an array of numbers) as float64: a float for a scalar, else an array; ``ValueError``
    naming ``name`` for a boolean, a string or anything else that is not a real number, and for a non-finite value."""
    raw = np.asarray(value)
    if isinstance(value, (bool, np.bool_)) or raw.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be a real number (got {value!r})")
    arr = raw.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise NotFinite(f"{name} must be finite (got {value!r})", overflow=not np.any(np.isnan(arr)))
    return float(arr) if arr.ndim == 0 else arr


def _allowed(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool, allowed: str | None) -> str:
    """The text describing an allowed range: ``allowed`` if given, else the interval, e.g. "(0, inf)"."""
    if allowed is not None:
        return allowed
    left = "(" if lo_open else "["
    right = ")" if hi_open else "]"
    return f"{left}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}{right}"


@overload
def check_range(value: float, name: str, *, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
                hi_open: bool = False, allowed: str | None = None) -> float: ...


@overload
def check_range(value: npt.ArrayLike, name: str, *, lo: float | None = None, hi: float | None = None,
                lo_open: bool = False, hi_open: bool = False, allowed: str | None = None) -> float | np.ndarray: ...


def check_range(value: npt.ArrayLike, name: str, *, lo: float | None = None, hi: float | None = None,
                lo_open: bool = False, hi_open: bool = False, allowed: str | None = None) -> float | np.ndarray:
    """Validate that ``value`` (scalar or array) is finite and inside [lo, hi]; raise ``ValueError`` naming ``name``.

    ``lo_open``/``hi_open`` make the bound strict. ``allowed`` overrides the text describing the allowed range.
    Returns the value as float64 (a float for scalars, an array otherwise).
    """
    v: float | np.ndarray
    if type(value) in (float, int):  # the common case, without numpy's per-call overhead (same checks, same errors)
        v = float(cast(float, value))
        if not math.isfinite(v):
            raise NotFinite(f"{name} must be finite (got {value!r})", overflow=not math.isnan(v))
        below = lo is not None and (v <= lo if lo_open else v < lo)
        if below or (hi is not None and (v >= hi if hi_open else v > hi)):
            raise ValueError(f"{name} must be in {_allowed(lo, hi, lo_open, hi_open, allowed)} (got {v!r})")
        return v
    v = as_float64(value, name)
    arr = np.asarray(v)
    bad = np.zeros(arr.shape, dtype=bool)
    if lo is not None:
        bad |= (arr <= lo) if lo_open else (arr < lo)
    if hi is not None:
        bad |= (arr >= hi) if hi_open else (arr > hi)
    if np.any(bad):
        got = arr[bad].flat[0] if arr.ndim else float(arr)
        raise ValueError(f"{name} must be in {_allowed(lo, hi, lo_open, hi_open, allowed)} (got {got!r})")
    return v


def check_approx(approx: str, allowed: tuple[str, ...], what: str) -> str:
    """Validate a rule's ``approx`` name against the ones it offers; raise ``ValueError`` listing them."""
    if approx not in allowed:
        raise ValueError(f"{what} approx must be one of {allowed} (got {approx!r})")
    return approx


def check_corr_hidden(c: _Checked, d: npt.ArrayLike, what: str) -> _Checked:
    """A normaliser's input must have a valid hidden covariance (corr_hidden ≥ −1/(d−1)) and variance left to
    normalise (corr_hidden < 1); raise ``ValueError`` naming ``Moments.corr_hidden`` otherwise."""
    c_arr, d_arr = np.broadcast_arrays(np.asarray(c, dtype=np.float64), np.asarray(d, dtype=np.float64))
    bad = (c_arr < -1.0 / (d_arr - 1.0) - 1e-12) | (c_arr >= 1.0)
    if np.any(bad):
        got = c_arr[bad].flat[0] if c_arr.ndim else float(c_arr)
        raise ValueError(f"Moments.corr_hidden must be in [-1/(d-1), 1) for {what} input (got {got!r})")
    return c


@dataclass(frozen=True)
class NormChecks:
    """The checks of a normaliser's rule arguments, each message naming the normaliser.

    Attributes:
        name: the normaliser in the messages on its arguments ("layernorm": "layernorm d must be in …").
        article: the normaliser in the message on its input ("a LayerNorm": "… for a LayerNorm input").
        min_width: the smallest width d its rules accept.
        approxes: the approximations its rules offer.

    Example:
        >>> checks = NormChecks("layernorm", "a LayerNorm", 8, ("exact",))
        >>> checks.rule(256, 1e-5, "exact")
        (256.0, 1e-05)
        >>> checks.width(4)
        Traceback (most recent call last):
        ...
        ValueError: layernorm d must be in [8, inf) (got 4.0)
    """

    name: str
    article: str
    min_width: int
    approxes: tuple[str, ...]

    def width(self, d: npt.ArrayLike) -> float | np.ndarray:
        """The width d, at least :attr:`min_width`."""
        return check_range(d, f"{self.name} d", lo=self.min_width, allowed=f"[{self.min_width}, inf)")

    def eps(self, eps: npt.ArrayLike) -> float | np.ndarray:
        """The eps added to the variance, at least 0."""
        return check_range(eps, f"{self.name} eps", lo=0.0)

    def approx(self, approx: str) -> str:
        """One of :attr:`approxes`."""
        return check_approx(approx, self.approxes, self.name)

    def corr_hidden(self, c: _Checked, d: npt.ArrayLike) -> _Checked:
        """The input's hidden correlation, as :func:`check_corr_hidden`."""
        return check_corr_hidden(c, d, self.article)

    def rule(self, d: npt.ArrayLike, eps: npt.ArrayLike, approx: str) -> tuple[float | np.ndarray, float | np.ndarray]:
        """The arguments every rule of the normaliser takes: (d, eps) checked, and ``approx``."""
        d = self.width(d)
        eps = self.eps(eps)
        self.approx(approx)
        return d, eps


@overload
def clip_corr(c: float, tol: float = 1e-6) -> float: ...


@overload
def clip_corr(c: npt.ArrayLike, tol: float = 1e-6) -> float | np.ndarray: ...


def clip_corr(c: npt.ArrayLike, tol: float = 1e-6) -> float | np.ndarray:
    """Clip a computed correlation into [-1, 1], tolerating excursions up to ``tol`` (round-off, and the O(1e-9)
    truncation error of an approximate rule near corr = 1); larger excursions are bugs and raise."""
    arr = np.asarray(c, dtype=np.float64)
    if np.any(np.abs(arr) > 1.0 + tol):
        raise ValueError(f"computed correlation outside [-1, 1] beyond round-off: {arr[np.abs(arr) > 1 + tol].flat[0]}")
    arr = np.clip(arr, -1.0, 1.0)
    return float(arr) if arr.ndim == 0 else arr
