"""sigprop.compare: summaries per quantity, including the discrepancy measured in the measurement's standard errors."""

import math

import numpy as np
import pytest

from sigprop.comparison import summarise


def test_share_within_two_standard_errors_and_median_z():
    pred = np.array([1.0, 1.0, 1.0, 1.0])
    meas = np.array([1.1, 1.3, 0.95, 1.0])
    se = np.array([0.1, 0.1, 0.1, 0.0])  # the last row has no usable SE
    s = summarise("fwd_var", pred, meas, se)
    # |err|/SE = 1, 3, 0.5 over the rows with an SE
    assert s.within_2se == 2 / 3
    assert s.median_z == pytest.approx(1.0, rel=1e-12)


def test_without_standard_errors_the_se_numbers_are_undefined():
    s = summarise("fwd_var", [1.0, 2.0], [1.0, 2.1])
    assert math.isnan(s.within_2se) and math.isnan(s.median_z)
    assert s.to_dict()["within_2se"] is None
