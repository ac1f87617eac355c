"""Every Python name the README and the documentation site's pages show (``sigprop.a.b`` and ``from sigprop.a import
b`` in their code blocks and inline code, and each API page's ``::: sigprop.a.b``) is importable at the path shown."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The README and every Markdown page of the site's sources (the generated tables of experiment folders included).
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
_INLINE = re.compile(r"(`+)(.+?)\1", re.S)
_FROM = re.compile(r"\bfrom\s+(sigprop(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n#;`]+)")
_DOTTED = re.compile(r"(?<![\w./-])sigprop(?:\.[A-Za-z_]\w*)+")
_DIRECTIVE = re.compile(r"^:::[ \t]+(\S+)", re.M)


def code_of(markdown: str) -> list[str]:
    """The code a Markdown text shows: its fenced blocks, then the inline code of the rest.

    Args:
        markdown: the text of a Markdown file.

    Returns:
        Each fenced block's body, each inline code span and each mkdocstrings ``::: identifier``, in that order.

    Example:
        >>> code_of("run `sigprop.predict`\\n```python\\nimport sigprop\\n```\\n")
        ['import sigprop\\n', 'sigprop.predict']
    """
    blocks = _FENCE.findall(markdown)
    prose = _FENCE.sub("", markdown)
    return blocks + [m.group(2) for m in _INLINE.finditer(prose)] + _DIRECTIVE.findall(prose)


def names_in(code: str) -> set[str]:
    """The dotted sigprop names a piece of code shows: ``sigprop.a.b`` and, for ``from sigprop.a import b, c``,
    ``sigprop.a.b`` and ``sigprop.a.c``.

    Args:
        code: a code block or an inline code span.

    Returns:
        The dotted names, each beginning with ``sigprop.``.

    Example:
        >>> sorted(names_in("from sigprop.train import fit, resume as r\\nsigprop.predict(config)"))
        ['sigprop.predict', 'sigprop.train', 'sigprop.train.fit', 'sigprop.train.resume']
    """
    found = set(_DOTTED.findall(code))
    for module, imported in _FROM.findall(code):
        for item in imported.strip("()").replace("\\", " ").split(","):
            name = item.split(" as ")[0].strip()
            if name and name != "*":
                found.add(f"{module}.{name}")
    return found


def resolve(dotted: str) -> object:
    """The object a dotted name names: each part an attribute of the one before or, on a module, its submodule.

    Args:
        dotted: a name such as ``"sigprop.fix.export.export_hf"``.

    Returns:
        The object at that path.

    Raises:
        AttributeError: a part is neither an attribute nor a submodule of what comes before it.

    Example:
        >>> resolve("sigprop.core.versions.VERSION") == __import__("sigprop").__version__
        True
    """
    head, *parts = dotted.split(".")
    obj: object = importlib.import_module(head)
    path = head
    for part in parts:
        path = f"{path}.{part}"
        if hasattr(obj, part):
            obj = getattr(obj, part)
        elif hasattr(obj, "__path__") and importlib.util.find_spec(path) is not None:
            obj = importlib.import_module(path)
        else:
            raise AttributeError(f"{dotted}: {path.rsplit('.', 1)[0]} has no {part!r}")
    return obj


def shown_in(page: Path) -> set[str]:
    """The dotted sigprop names a Markdown file shows."""
    return set().union(*(names_in(code) for code in code_of(page.read_text(encoding="utf-8"))))


#: (the file, relative to the repository, a name it shows), every pair once
SHOWN = sorted({(str(page.relative_to(ROOT)), dotted) for page in PAGES for dotted in shown_in(page)})


def test_the_readme_and_the_site_show_names_to_check():
    names = {dotted for _, dotted in SHOWN}
    assert {"sigprop.predict", "sigprop.measure", "sigprop.Monitor", "sigprop.train.fit"} <= names
    assert {"sigprop.theory.predict.predict", "sigprop.fix.export.export_hf"} <= names  # an API entry, a guide's
    assert {page for page, _ in SHOWN} > {"README.md", "docs/how-to/use-the-library.md"}


@pytest.mark.parametrize(("page", "dotted"), SHOWN, ids=[f"{page}:{dotted}" for page, dotted in SHOWN])
def test_a_name_shown_is_importable_where_shown(page, dotted):
    try:
        resolve(dotted)
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] != "sigprop":
            pytest.skip(f"{dotted} needs {err.name}, which is not installed")
        raise


def test_collection_reads_imports_inline_code_and_fenced_blocks():
    text = ("Use `sigprop.fix.export_hf(model)` or\n```python\nfrom sigprop.data import (load_batch,\n"
            "    make_batch as mb)\nimport sigprop\n```\nnot `sigprop-report/` nor a.sigprop.x\n"
            "::: sigprop.model.config.TransformerConfig\n    options:\n      heading: x\n")
    shown = set().union(*(names_in(code) for code in code_of(text)))
    assert shown == {"sigprop.fix.export_hf", "sigprop.data", "sigprop.data.load_batch", "sigprop.data.make_batch",
                     "sigprop.model.config.TransformerConfig"}


@pytest.mark.parametrize("dotted", ["sigprop.no_such_name", "sigprop.fix.no_such_function", "sigprop.core.nothing.x"])
def test_a_name_that_does_not_exist_fails_with_its_path(dotted):
    with pytest.raises(AttributeError, match=re.escape(dotted)):
        resolve(dotted)
