"""Fixtures of the sigprop.data tests: a private cache folder and a small text corpus per test."""

import pytest

from tests.data import make_corpus


@pytest.fixture(autouse=True)
def cache_env(tmp_path, monkeypatch):
    """Every test caches under its own temporary folder, never the user's home."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SIGPROP_CACHE_DIR", str(cache))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return cache


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "corpus"
    make_corpus(root)
    return root
