"""The documentation site, built once per test session with ``mkdocs build --strict`` into a temporary folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The built site's folder; the build's output is the failure message when it fails."""
    pytest.importorskip("mkdocs", reason="the documentation extra (mkdocs) is not installed")
    pytest.importorskip("mkdocstrings", reason="the documentation extra (mkdocstrings) is not installed")
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    return out
