"""``sigprop doctor --html`` renders in headless Chromium (the system package; skipped where it is not installed):
a screenshot of the report shows its figures, non-blank, where the same page without them is mostly white."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from sigprop.analysis.doctor import doctor
from sigprop.model.config import TransformerConfig
from sigprop.report.doctor import write_doctor_html

from .test_doctor import SMALL

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def _screenshot(html_path, png_path):
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1200,2600", f"--screenshot={png_path}", html_path.as_uri()],
                   check=True, capture_output=True, timeout=120)
    from PIL import Image

    return np.asarray(Image.open(png_path).convert("L"), dtype=np.float64)


@pytest.mark.long
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed")
def test_report_renders_with_its_figures(tmp_path):
    report = doctor(TransformerConfig(**{**SMALL, "norm_position": "post", "init": "xavier"}), seeds=0)
    page = write_doctor_html(report, tmp_path / "report.html", "post-LN Xavier")
    bare = tmp_path / "bare.html"
    bare.write_text(re.sub(r"<img [^>]*>", "", page.read_text()))
    full, empty = _screenshot(page, tmp_path / "full.png"), _screenshot(bare, tmp_path / "bare.png")
    # rows holding dark pixels (< 200 of 255: text, axes, curves; not the images' light borders or a white image):
    # each figure (15 × 4.2 in at 120 dpi, scaled to the page's width) is ~300 rows tall, so the two drawn figures
    # add at least 2 × 200 such rows, and a blank or missing figure adds none
    inked = lambda img: int((img < 200).any(axis=1).sum())  # noqa: E731
    assert inked(full) - inked(empty) >= 400, (inked(full), inked(empty))
