"""Fixtures of the training tests: a small corpus of real text (a few standard-library modules, several files so
the held-out split is by file), a tokenizer cache of its own, and a tiny model."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

#: A tiny decoder (2 layers of d = 32) on the small corpus: a step takes milliseconds.
TINY_MODEL = ["arch=decoder", "n_layers=2", "d_model=32", "n_heads=2", "seq_len=16", "max_len=16", "vocab_size=300",
              "init=dslm", "norm_position=pre", "dropout=0.1"]
TINY_TRAIN = ["batch_size=4", "eval_every=4", "eval_batches=1", "warmup_steps=2"]
_MODULES = ("json", "email", "logging")


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """A folder of ~40 real Python files (json, email and logging from the standard library)."""
    root = tmp_path_factory.mktemp("corpus")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in _MODULES:
        for f in sorted((stdlib / name).glob("*.py")):
            shutil.copy(f, root / f"{name}_{f.name}")
    return root


@pytest.fixture(scope="session", autouse=True)
def own_cache(tmp_path_factory):
    """Tokenizers trained for these tests stay in a folder of their own."""
    old = os.environ.get("SIGPROP_CACHE_DIR")
    os.environ["SIGPROP_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        os.environ.pop("SIGPROP_CACHE_DIR", None)
    else:
        os.environ["SIGPROP_CACHE_DIR"] = old


def tiny_args(corpus: Path, *train: str, model: tuple[str, ...] = ()) -> list[str]:
    """Command-line options of a tiny run on ``corpus`` with extra ``--train-set`` items."""
    args = []
    for item in (*TINY_MODEL, *model):
        args += ["--set", item]
    for item in (*TINY_TRAIN, *train):
        args += ["--train-set", item]
    return [*args, "--data", str(corpus)]


def sigprop(*args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    """``python -m sigprop ARGS`` in a fresh process, output captured."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run([sys.executable, "-m", "sigprop", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, **kwargs)
