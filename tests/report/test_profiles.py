"""Whole-model figures (:mod:`sigprop.report.profiles`): theory lines, measured points, hollow where the seed mean is
skewed."""

from __future__ import annotations

import numpy as np

import sigprop.report.profiles as plots
from sigprop.core.profile import Profile, Row
from sigprop.measurement.average import average_profiles
from tests.helpers import lognormal_seed_profiles


def _profiles(layers: int, skewed_layer: int):
    sds = {lyr: 1.5 if lyr == skewed_layer else 0.01 for lyr in range(layers)}
    measured = average_profiles(lognormal_seed_profiles(np.random.default_rng(0), sds, 16), {},
                                {"seeds": list(range(16))})
    predicted = Profile("predicted", {}, tuple(Row(lyr, "layer", 0.0, 1.0, 0.5, 1.0, 0.3) for lyr in range(layers)))
    return predicted, measured


def test_a_skewed_layer_is_drawn_hollow_even_between_the_subsampled_points(tmp_path, monkeypatch):
    """192 layers are drawn as every third point; layer 1 (not one of them) has a skewed gradient-variance seed mean
    and is drawn anyway, hollow, under its own legend entry."""
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path, dpi: figures.append(fig) or path)
    predicted, measured = _profiles(192, skewed_layer=1)
    plots.plot_profiles(tmp_path / "f.png", predicted, measured)
    grad_panel = figures[0].axes[1]
    series = {c.get_label(): c for c in grad_panel.containers}
    hollow = series["measured, seed mean skewed"]
    assert list(hollow.lines[0].get_xdata()) == [1.0] and hollow.lines[0].get_markerfacecolor() == "none"
    filled = series["measured"].lines[0].get_xdata()
    assert 1.0 not in filled and len(filled) == 64
    forward = {c.get_label() for c in figures[0].axes[0].containers}
    assert forward == {"measured"}
