"""Table 3 as data (Kedia et al. Table 3) and its consistency with the closed-form laws."""

import math
from pathlib import Path

import numpy as np
import pytest

from sigprop.laws.dslm import dslm_forward_variance, dslm_scales
from sigprop.laws.growth import (
    COLUMNS,
    GROWTH_TABLE,
    METHODS,
    gradient_fall_order,
    growth_law,
    render_growth_table,
    sensitivity,
)
from sigprop.laws.postln import postln_gradient_profile
from sigprop.laws.preln import hyperbolic_gradient, preln_forward_variance, preln_gradient_growth

PAPERS = Path(__file__).resolve().parents[2].parent / "shared" / "papers"
ROW_NAMES = {"DSLM": "DSLM (Ours)"}


def _printed(entry: str) -> str:
    """Our caret notation back to the extracted text: no '^', Unicode minus in exponents, no spaces."""
    return entry.replace("^", "").replace("N-", "N−").replace(" ", "")


def _table3_line(text: str, name: str, after: int) -> str:
    for line in text[after:].splitlines():
        squeezed, key = line.replace(" ", ""), name.replace(" ", "")
        if squeezed.startswith(key) and squeezed[len(key):len(key) + 2] in ("O(", "(1"):
            return squeezed
    raise AssertionError(f"row {name!r} not found")


@pytest.mark.skipif(not (PAPERS / "deepscalelm-kedia2024-arxiv.txt").exists(), reason="paper text not available")
def test_table_matches_arxiv_extraction():
    text = (PAPERS / "deepscalelm-kedia2024-arxiv.txt").read_text()
    start = text.index("Table 3. Comparison of maximum theoretical")
    for method in METHODS:
        name = ROW_NAMES.get(method, method)
        expected = name.replace(" ", "") + "".join(_printed(GROWTH_TABLE[method][c]) for c in COLUMNS)
        assert _table3_line(text, name, start) == expected


@pytest.mark.skipif(not (PAPERS / "deepscalelm-kedia2024-icml.txt").exists(), reason="paper text not available")
def test_table_matches_icml_extraction():
    """The ICML copy prints the same entries (its "O" letters are displaced in two rows, so they are dropped; its two
    text columns are interleaved, so a row may run on into the other column: compare the row's start)."""
    text = (PAPERS / "deepscalelm-kedia2024-icml.txt").read_text()
    start = text.index("Table3:Comparisonofmaximumtheoretical")
    for method in METHODS:
        row = _table3_line(text, method, start)
        cells = "".join(_printed(GROWTH_TABLE[method][c]) for c in COLUMNS)
        assert row[len(method):].replace("O", "").startswith(cells.replace("O", ""))


def test_table_shape_and_render():
    assert set(GROWTH_TABLE) == set(METHODS)
    assert all(tuple(GROWTH_TABLE[m]) == COLUMNS for m in METHODS)
    md = render_growth_table().strip().splitlines()
    assert md[0] == "| Method | Post-LN backward | Post-LN sensitivity | Pre-LN forward | Pre-LN backward | " \
                    "Pre-LN sensitivity |"
    assert len(md) == 2 + len(METHODS)
    for line, method in zip(md[2:], METHODS, strict=True):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == ROW_NAMES.get(method, method)
        assert cells[1:] == [GROWTH_TABLE[method][c] for c in COLUMNS]


def test_growth_law_functions():
    N = np.array([1.0, 10.0, 100.0])
    assert np.array_equal(growth_law("Vanilla", "Pre-LN", "forward")(N), N)
    assert np.allclose(growth_law("Vanilla", "pre_ln", "sensitivity")(N), np.log(N))
    assert np.array_equal(growth_law("DSInit", "post_ln", "sensitivity")(N), 1 / N)
    assert np.allclose(growth_law("DeepNet", "post_ln", "sensitivity")(N), N**-0.5)
    assert growth_law("DSLM (Ours)", "pre_ln", "forward")(7) == 1.0
    assert growth_law("LayerScale", "pre_ln", "sensitivity", beta=0.1)(50) == pytest.approx(5.0)
    assert growth_law("Vanilla", "post_ln", "backward", c=0.96)(200) == pytest.approx(0.96**200)
    for bad in [("DeepNet", "pre_ln", "forward"), ("Vanilla", "post_ln", "forward"), ("Bogus", "pre_ln", "forward"),
                ("Vanilla", "middle", "forward"), ("Vanilla", "pre_ln", "speed")]:
        with pytest.raises(ValueError):
            growth_law(*bad)
    with pytest.raises(ValueError, match="pass c"):
        growth_law("Vanilla", "post_ln", "backward")
    with pytest.raises(ValueError, match="pass beta"):
        growth_law("LayerScale", "post_ln", "sensitivity")
    with pytest.raises(ValueError, match="N must"):
        growth_law("Vanilla", "pre_ln", "forward")(0.5)


def test_table_consistent_with_laws():
    C1, C2, r = 2.2, 0.4, 0.85
    for N in (8, 64, 512):
        # Pre-LN forward O(N): σ²_N / N − C3 = σ²_in / N exactly
        var = preln_forward_variance(N, C1, C2, r, var_in=1.0)[-1]
        assert var / growth_law("Vanilla", "pre_ln", "forward")(N) - (C1 * r + C2) == pytest.approx(1 / N, rel=1e-12)
        # Pre-LN backward O(N): the hyperbolic law (C_gpre = 1) at the first layer is N itself
        assert preln_gradient_growth(N, C1, C2, r, r, denominator="paper")[0] == pytest.approx(
            growth_law("Vanilla", "pre_ln", "backward")(N), rel=1e-13)
        assert hyperbolic_gradient(1, N) == N
        # Post-LN backward O(c^±N): the whole-model ratio is C5^N
        assert postln_gradient_profile(N, 0.97, include_input=True)[0] == pytest.approx(
            growth_law("Vanilla", "post_ln", "backward", c=0.97)(N), rel=1e-12)
        # DSLM Pre-LN forward "1"
        assert np.allclose(dslm_forward_variance(N, *dslm_scales(N)), growth_law("DSLM", "pre_ln", "forward")(N))


@pytest.mark.parametrize(("alpha", "method"), [(1.0, "DSLM"), (2.0, "DSInit"), (1.5, "DeepNet")])
def test_sensitivity_orders_match_table(alpha, method):
    # Sec. 4.6: sensitivity k N^{1−α}; its ratio to Table 3's order is the constant k
    law = growth_law(method, "post_ln", "sensitivity")
    N = np.array([4.0, 40.0, 400.0])
    assert np.allclose(sensitivity(N, k=2.0, alpha=alpha) / law(N), 2.0, rtol=1e-14, atol=0)
    assert np.allclose(gradient_fall_order(N, k=2.0, alpha=alpha), np.exp(2.0 * N ** (1 - alpha)), rtol=1e-14)
    assert math.isclose(gradient_fall_order(10, k=2.0, alpha=1.0), math.exp(2.0))
