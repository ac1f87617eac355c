"""The built site renders in headless Chromium (the system package; skipped where it is not installed): the home
page and an API page, opened from the built files, show their content, and their screenshots are not blank. Without
Chromium, the same pages' HTML is checked for that content (``test_site``)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

pytestmark = pytest.mark.docs

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=3000"]


def dom(page) -> str:
    """The page's DOM after Chromium has loaded it and run its scripts."""
    return subprocess.run([CHROMIUM, *FLAGS, "--dump-dom", page.as_uri()], check=True, capture_output=True,
                          text=True, timeout=120).stdout


def inked_rows(page, png) -> int:
    """Rows of a 1200 × 1600 screenshot of ``page`` that hold dark pixels (text, figures), out of 1600."""
    subprocess.run([CHROMIUM, *FLAGS, "--window-size=1200,1600", f"--screenshot={png}", page.as_uri()], check=True,
                   capture_output=True, timeout=120)
    from PIL import Image

    return int((np.asarray(Image.open(png).convert("L")) < 128).any(axis=1).sum())


@pytest.mark.long
@needs_chromium
def test_the_home_page_renders_with_its_figure(site, tmp_path):
    page = site / "index.html"
    rendered = dom(page)
    assert "Signal propagation in deep transformers" in rendered
    assert 'src="results/compare-fig1-preln.png"' in rendered and "md-nav" in rendered  # the figure and the nav
    # a blank or unstyled page has next to no dark rows; text, the nav and the figure give hundreds
    assert inked_rows(page, tmp_path / "home.png") > 400


@pytest.mark.long
@needs_chromium
def test_an_api_page_renders_its_docstrings(site, tmp_path):
    page = site / "reference" / "api" / "theory" / "index.html"
    rendered = dom(page)
    assert 'id="sigprop.theory.predict.predict"' in rendered and "sigprop.predict" in rendered
    assert "doc-signature" in rendered or "doc-contents" in rendered  # mkdocstrings rendered the object
    assert inked_rows(page, tmp_path / "api.png") > 400
