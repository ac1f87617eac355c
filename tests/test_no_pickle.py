"""Nothing in the package unpickles: checkpoints are safetensors + JSON, arrays are read with allow_pickle=False.
The test walks every module's syntax tree (not its text, so a docstring that says "pickle" is no hit)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "sigprop"
UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "joblib", "shelve", "cloudpickle", "marshal"}


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return ""


def unsafe_loads(source: str) -> list[str]:
    """The pickle-capable loads in ``source``: an import of a pickling module, ``torch.load``, any
    ``….Unpickler``, and ``np.load`` / ``numpy.load`` without ``allow_pickle=False``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] in UNSAFE_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UNSAFE_MODULES:
            found.append(f"from {node.module} import …")
        elif isinstance(node, ast.Call):
            name = _name(node.func)
            if name in ("torch.load", "torch.serialization.load") or name.endswith("Unpickler"):
                found.append(name)
            if name in ("np.load", "numpy.load"):
                safe = any(k.arg == "allow_pickle" and isinstance(k.value, ast.Constant) and k.value.value is False
                           for k in node.keywords)
                if not safe:
                    found.append(f"{name} without allow_pickle=False")
    return found


def test_the_checker_finds_each_kind_of_unpickling():
    bad = ("import pickle\nfrom joblib import load\ntorch.load('x')\nnp.load('a.npy')\n"
           "numpy.load('a', allow_pickle=True)\nx = pickle.Unpickler(f)\n")
    assert len(unsafe_loads(bad)) == 6
    assert unsafe_loads("np.load('a.npy', allow_pickle=False)\n'''torch.load in a docstring'''\n") == []


def test_no_module_of_the_package_can_unpickle():
    hits = {str(p.relative_to(PACKAGE)): unsafe_loads(p.read_text(encoding="utf-8"))
            for p in sorted(PACKAGE.rglob("*.py"))}
    assert {k: v for k, v in hits.items() if v} == {}
