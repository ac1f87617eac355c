"""Moments / GradMoments: validation names the field and the allowed range; arrays broadcast."""

import numpy as np
import pytest

from sigprop import GradMoments, Moments


def test_defaults_and_alekseev_quantities():
    m = Moments(mean=2.0, var=3.0, corr=0.5)
    assert m.second_moment == 7.0  # q = σ² + μ²
    assert m.token_second_moment == 0.5 * 3.0 + 4.0  # p = rσ² + μ²


@pytest.mark.parametrize(
    "kwargs, field",
    [({"var": 0.0}, "Moments.var"), ({"var": -1.0}, "Moments.var"), ({"corr": 1.5}, "Moments.corr"),
     ({"corr_hidden": -1.01}, "Moments.corr_hidden"), ({"mean": np.nan}, "Moments.mean"),
     ({"var": np.inf}, "Moments.var")],
)
def test_bad_moments_raise_naming_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        Moments(**kwargs)


@pytest.mark.parametrize("kwargs, field", [({"var": 0.0}, "GradMoments.var"), ({"corr": -2.0}, "GradMoments.corr")])
def test_bad_grad_moments_raise(kwargs, field):
    with pytest.raises(ValueError, match=field) as err:
        GradMoments(**kwargs)
    assert "must be in" in str(err.value)


def test_arrays_are_validated_elementwise():
    m = Moments(mean=np.zeros(3), var=np.array([1.0, 2.0, 3.0]), corr=np.array([0.0, 0.5, 1.0]))
    assert m.var.shape == (3,)
    with pytest.raises(ValueError, match="Moments.corr"):
        Moments(var=np.ones(2), corr=np.array([0.1, 1.2]))


@pytest.mark.parametrize("value", [1, 2.5, 0.0, -3, 10.0, float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("bounds", [{}, {"lo": 0.0}, {"lo": 0.0, "lo_open": True}, {"hi": 2.5, "hi_open": True},
                                    {"lo": 1.0, "hi": 2.5, "allowed": "[1, 2.5]"}])
def test_scalar_fast_path_agrees_with_the_array_path(value, bounds):
    """check_range takes a shortcut for Python floats and ints: same value returned, same error message."""
    from sigprop.core.validate import check_range

    def outcome(v):
        try:
            return ("ok", check_range(v, "x", **bounds))
        except ValueError as e:
            return ("error", str(e).replace("np.float64(", "").replace(")", ""))  # the repr of the input differs

    fast, slow = outcome(value), outcome(np.float64(value))
    assert fast[0] == slow[0]
    if fast[0] == "ok":
        assert type(fast[1]) is float and fast[1] == slow[1]
    else:
        assert fast[1] == slow[1]
