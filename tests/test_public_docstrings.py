"""Every name of ``sigprop.__all__`` is documented in Google style and its examples run.

A docstring has a one-line summary, ``Args:`` naming every parameter of the callable (its signature, read with
:func:`inspect.signature`), ``Returns:`` (a function) or ``Attributes:`` (a class; every field of a dataclass),
and an ``Example:`` whose ``>>>`` lines :mod:`doctest` runs here: a failing example fails the test, naming it.
``__version__`` is a string, documented in the package's own docstring, whose example runs the same way.
"""

from __future__ import annotations

import dataclasses
import doctest
import importlib.util
import inspect
import io
import re

import pytest

import sigprop

#: The Google sections a docstring may hold, each on a line of its own at the docstring's indentation.
SECTIONS = ("Args", "Returns", "Raises", "Attributes", "Example", "Examples")
_HEADER = re.compile(rf"^({'|'.join(SECTIONS)}):\s*$")
#: An entry of Args / Attributes / Raises: a name at the section's indentation + 4, optionally "(type)", a colon.
_ENTRY = re.compile(r"^ {4}(\*{0,2}[A-Za-z_]\w*)(?: \([^)]*\))?:(?:\s|$)")
#: Public names whose examples need an optional extra, and the module that extra provides.
EXTRAS = {"from_hf": "transformers"}

NAMES = [n for n in sigprop.__all__ if n != "__version__"]


def sections(doc: str) -> tuple[str, dict[str, list[str]]]:
    """The summary line of a docstring and the lines of each of its Google sections.

    Args:
        doc: the docstring as ``__doc__`` holds it.

    Returns:
        (the first line, {section name: the lines below its header up to the next header}).

    Example:
        >>> summary, parts = sections("One line.\\n\\n    Args:\\n        x: a value.\\n")
        >>> summary, parts["Args"]
        ('One line.', ['    x: a value.'])
    """
    lines = inspect.cleandoc(doc).splitlines()
    found: dict[str, list[str]] = {}
    current = None
    for line in lines[1:]:
        header = _HEADER.match(line)
        if header:
            current = header.group(1)
            found[current] = []
        elif current is not None:
            found[current].append(line)
    return lines[0], found


def entries(lines: list[str]) -> list[str]:
    """The names an Args / Attributes / Raises section documents (``*args`` and ``**kwargs`` without their stars)."""
    return [m.group(1).lstrip("*") for m in map(_ENTRY.match, lines) if m]


def parameters(obj) -> list[str]:
    """The parameters a caller passes to ``obj``: a function's, or a class's constructor's (``self`` excluded)."""
    return list(inspect.signature(obj).parameters)


def docstring_problems(name: str, obj) -> list[str]:
    """What the docstring of ``obj`` lacks, in words; empty when it is complete."""
    doc = obj.__doc__ or ""
    if not doc.strip():
        return [f"{name} has no docstring"]
    summary, parts = sections(doc)
    lines = inspect.cleandoc(doc).splitlines()
    problems = []
    if not summary.strip() or not summary.rstrip().endswith(".") or (len(lines) > 1 and lines[1].strip()):
        problems.append(f"{name}: the first line is not a one-line summary ending in a full stop, followed by a "
                        f"blank line: {summary!r}")
    example = parts.get("Example", parts.get("Examples"))
    if example is None or not any(line.lstrip().startswith(">>>") for line in example):
        problems.append(f"{name}: no Example section with a >>> line")
    is_class = inspect.isclass(obj)
    if is_class:
        if "Attributes" not in parts:
            problems.append(f"{name}: a class without an Attributes section")
        attributes = set(entries(parts.get("Attributes", [])))
        if dataclasses.is_dataclass(obj):
            missing = [f.name for f in dataclasses.fields(obj) if f.name not in attributes]
            if missing:
                problems.append(f"{name}: fields missing from Attributes: {', '.join(missing)}")
        documented = attributes | set(entries(parts.get("Args", [])))
    else:
        if "Returns" not in parts:
            problems.append(f"{name}: a function without a Returns section")
        documented = set(entries(parts.get("Args", [])))
    undocumented = [p for p in parameters(obj) if p not in documented]
    if undocumented:
        problems.append(f"{name}: parameters missing from Args{' or Attributes' if is_class else ''}: "
                        f"{', '.join(undocumented)}")
    raises = parts.get("Raises", [])
    not_exceptions = [e for e in entries(raises) if not re.fullmatch(r"[A-Z]\w*(Error|Exception|Warning)", e)]
    if not_exceptions:
        problems.append(f"{name}: Raises entries that are not exception classes: {', '.join(not_exceptions)}")
    return problems


def run_examples(tests: list[doctest.DocTest]) -> tuple[int, str]:
    """Run doctests; (the examples attempted, the report of every failure: empty when all passed)."""
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = io.StringIO()
    attempted = 0
    for test in tests:
        result = runner.run(test, out=report.write, clear_globs=True)
        attempted += result.attempted
    return attempted, report.getvalue() if runner.failures else ""


@pytest.mark.parametrize("name", NAMES)
def test_the_public_name_has_a_google_docstring(name):
    assert docstring_problems(name, getattr(sigprop, name)) == []


@pytest.mark.parametrize("name", NAMES)
def test_the_public_names_examples_run(name):
    if name in EXTRAS and importlib.util.find_spec(EXTRAS[name]) is None:
        pytest.skip(f"the example of {name} needs {EXTRAS[name]}")
    obj = getattr(sigprop, name)
    tests = doctest.DocTestFinder(recurse=inspect.isclass(obj)).find(obj, f"sigprop.{name}")
    own = [t for t in tests if t.name == f"sigprop.{name}"]
    assert own and own[0].examples, f"sigprop.{name} has no doctest example"
    attempted, failures = run_examples(tests)
    assert attempted, f"every example of sigprop.{name} is skipped"
    assert not failures, failures


def test_the_package_docstring_documents_the_version_and_its_example_runs():
    doc = sigprop.__doc__ or ""
    assert "__version__" in doc
    test = doctest.DocTestParser().get_doctest(doc, {}, "sigprop", sigprop.__file__, 0)
    attempted, failures = run_examples([test])
    assert attempted and "__version__" in "".join(e.source for e in test.examples)
    assert not failures, failures


def test_the_checker_finds_what_a_docstring_lacks():
    """The checks above can fail: a docstring without its sections, or with a parameter left out, is reported."""

    def documented(alpha, beta=1, **options):
        """Add two numbers.

        Args:
            alpha: the first.
            **options: ignored.

        Example:
            >>> documented(1)
            2
        """
        return alpha + beta

    problems = docstring_problems("documented", documented)
    assert any("Returns" in p for p in problems) and any("beta" in p and "alpha" not in p for p in problems)
    assert docstring_problems("bare", lambda x: x) == ["bare has no docstring"]

    @dataclasses.dataclass
    class Point:
        """A point.

        Attributes:
            x: across.
        """

        x: float
        y: float

    problems = docstring_problems("Point", Point)
    assert any("Example" in p for p in problems) and any("y" in p.split(":")[-1] for p in problems)


def test_a_failing_example_is_reported_by_name():
    def wrong():
        """Return one.

        Returns:
            One.

        Example:
            >>> wrong()
            2
        """
        return 1

    attempted, failures = run_examples(doctest.DocTestFinder().find(wrong, "wrong", globs={"wrong": wrong}))
    assert attempted == 1 and "wrong" in failures and "Expected" in failures
