"""GMFE (Alekseev Eq. 20) and the early / middle / deep split: identities and hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sigprop.apjn.gmfe import block_thirds, gmfe, gmfe_by_third, strided_blocks

MEASURED = np.array([12.0, 5.5, 3.1, 1.7, 1.05])


def test_identity_is_one():
    assert gmfe(MEASURED, MEASURED) == 1.0


@pytest.mark.parametrize("factor", [1.25, 3.0, 0.5])
def test_constant_factor_gives_that_factor_either_way(factor):
    over = gmfe(MEASURED * factor, MEASURED)
    under = gmfe(MEASURED / factor, MEASURED)
    expected = max(factor, 1.0 / factor)
    assert over == pytest.approx(expected, rel=1e-14) and under == pytest.approx(expected, rel=1e-14)


def test_symmetric_in_its_arguments_and_hand_value():
    theory = np.array([10.0, 6.0, 3.1, 1.6, 1.0])
    assert gmfe(theory, MEASURED) == pytest.approx(gmfe(MEASURED, theory), rel=1e-15)
    logs = [abs(math.log(t / m)) for t, m in zip(theory, MEASURED, strict=True)]
    assert gmfe(theory, MEASURED) == pytest.approx(math.exp(sum(logs) / len(logs)), rel=1e-14)
    # mixed over- and under-prediction by 2 and 1/2 is a fold error of 2, not 1
    assert gmfe([2.0, 0.5], [1.0, 1.0]) == pytest.approx(2.0, rel=1e-15)


def test_rows_are_samples():
    theory = np.stack([MEASURED * 2.0, MEASURED / 3.0])
    out = gmfe(theory, MEASURED)
    np.testing.assert_allclose(out, [2.0, 3.0], rtol=1e-14)


def test_errors():
    with pytest.raises(ValueError, match="positive"):
        gmfe([1.0, -1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="positive"):
        gmfe([1.0, 1.0], [1.0, np.inf])
    with pytest.raises(ValueError, match="broadcastable"):
        gmfe([1.0, 1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="at least one"):
        gmfe([], [])


def test_block_thirds_of_the_papers_128_block_strided_set():
    blocks = strided_blocks(128, 4)
    assert blocks[0] == 4 and blocks[-1] == 124 and len(blocks) == 31  # every 4th, endpoints 0 and 128 excluded
    parts = block_thirds(blocks, 128)
    assert parts["early"].tolist() == list(range(4, 43, 4))  # b < 128/3 = 42.67
    assert parts["middle"].tolist() == list(range(44, 86, 4))  # 42.67 <= b < 85.33
    assert parts["deep"].tolist() == list(range(88, 125, 4))
    assert sum(len(v) for v in parts.values()) == len(blocks)
    exact = block_thirds([0, 3, 4, 5, 6, 9], 9)  # boundaries B/3 = 3 and 2B/3 = 6 belong to the later third
    assert exact["early"].tolist() == [0] and exact["middle"].tolist() == [3, 4, 5] and exact["deep"].tolist() == [6, 9]


def test_gmfe_by_third():
    blocks = np.array([1, 2, 5, 8])
    theory = np.array([2.0, 2.0, 3.0, 5.0])
    out = gmfe_by_third(theory, np.ones(4), blocks, 9)
    assert out == pytest.approx({"early": 2.0, "middle": 3.0, "deep": 5.0}, rel=1e-14)
    assert set(gmfe_by_third([2.0], [1.0], [8], 9)) == {"deep"}  # empty thirds are left out
    with pytest.raises(ValueError, match="blocks"):
        gmfe_by_third(theory, np.ones(4), blocks[:3], 9)
    with pytest.raises(ValueError, match="blocks"):
        block_thirds([10], 9)
    with pytest.raises(ValueError, match="n_blocks"):
        block_thirds([1], 0)
