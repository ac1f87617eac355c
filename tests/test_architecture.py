"""The tree's architecture, checked: no import cycle between modules or between packages, no private name imported
across packages (ARCHITECTURE.md, "Layers"). Every import counts, those inside functions too; an import for the type
checker alone (under ``if TYPE_CHECKING:``) counts in the packages' order, not in a cycle between modules."""

from __future__ import annotations

import ast
from pathlib import Path

import sigprop

ROOT = Path(sigprop.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_only(tree: ast.AST) -> set[int]:
    """The ids of the import statements under ``if TYPE_CHECKING:`` in ``tree``."""
    out = set()
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.If) else None
        if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.Import | ast.ImportFrom)}
    return out


def _imports(path: Path, type_only: bool = True) -> list[tuple[str, str | None]]:
    """(imported module, imported name or None) of every import statement in ``path``, made absolute; without
    ``type_only``, not those for the type checker alone."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    tree = ast.parse(path.read_text())
    skip = set() if type_only else _type_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names if a.name.startswith("sigprop")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.startswith("sigprop"):
                out += [(module, a.name) for a in node.names]
    return out


def _graph(type_only: bool = True) -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph = {m: set() for m in modules}
    for m, path in modules.items():
        for target, name in _imports(path, type_only):
            full = f"{target}.{name}" if name else target
            dest = full if full in modules else target  # "from pkg import module" imports the module
            if dest in modules and dest != m:
                graph[m].add(dest)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of nodes, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _package(module: str) -> str:
    """A module's package: its first folder under sigprop/ (``sigprop.theory``), or itself for a top-level module
    (``sigprop.__main__``, and ``sigprop``'s own __init__)."""
    return ".".join(module.split(".")[:2])


def test_no_import_cycle_between_modules():
    graph = _graph(type_only=False)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_packages_import_one_way():
    packages: dict[str, set[str]] = {}
    for m, deps in _graph().items():
        packages.setdefault(_package(m), set()).update(_package(d) for d in deps if _package(d) != _package(m))
    assert _cycle(packages) is None, " -> ".join(_cycle(packages))
    assert [p for p, deps in packages.items() if "sigprop.cli" in deps] == ["sigprop.__main__"], packages


def test_no_private_name_is_imported_across_packages():
    bad = []
    for path in ROOT.rglob("*.py"):
        here = _package(_module_name(path))
        for target, name in _imports(path):
            if name and name.startswith("_") and not name.startswith("__") and _package(target) != here:
                bad.append(f"{_module_name(path)} imports {target}.{name}")
    assert not bad, bad


def _type_only_names_used_at_run_time(tree: ast.AST) -> list[str]:
    """Names imported for the type checker alone (and nowhere else in the module) that code uses outside an
    annotation: at run time they are not defined (``typing.cast`` takes such a type as a string)."""
    type_only = _type_only(tree)
    imported: dict[bool, set[str]] = {True: set(), False: set()}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            imported[id(node) in type_only] |= {(a.asname or a.name).split(".")[0] for a in node.names}
    names = imported[True] - imported[False]
    annotations = set()
    for node in ast.walk(tree):
        for part in (getattr(node, "annotation", None), getattr(node, "returns", None)):
            if part is not None:
                annotations |= {id(n) for n in ast.walk(part)}
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            annotations |= {id(n) for n in ast.walk(node)}
    return sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in names
                   and id(n) not in annotations})


def test_names_for_the_type_checker_are_not_used_at_run_time():
    bad = {_module_name(p): used for p in ROOT.rglob("*.py")
           if (used := _type_only_names_used_at_run_time(ast.parse(p.read_text())))}
    assert not bad, bad


def test_the_checks_can_fail():
    """The cycle finder finds a cycle where there is one, and the package of a module is its first folder."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    assert _package("sigprop.theory.predict") == "sigprop.theory" and _package("sigprop.cli") == "sigprop.cli"
    tree = ast.parse("from typing import TYPE_CHECKING\nimport a\nif TYPE_CHECKING:\n    from b import c\n")
    assert [type(n).__name__ for n in ast.walk(tree) if id(n) in _type_only(tree)] == ["ImportFrom"]
    used = ast.parse("from typing import TYPE_CHECKING, cast\nif TYPE_CHECKING:\n    from b import C\n"
                     "def f(x: C) -> C:\n    return cast(C, x)\n")
    assert _type_only_names_used_at_run_time(used) == ["C"]
