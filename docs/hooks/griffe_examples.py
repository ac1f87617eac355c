"""A griffe extension for the API reference: a docstring's ``Example:`` heading is read as the Google-style examples
section it is (griffe knows only the plural, ``Examples:``, and would show the doctest as prose).

sigprop's docstrings head their doctests ``Example:``; this rewrites the heading line, at any indentation, to
``Examples:`` in the docstring griffe parses, so each doctest is rendered as code. The source is not touched.
"""

from __future__ import annotations

import re

import griffe

HEADING = re.compile(r"^(\s*)Example:\s*$", re.M)


def as_examples_section(text: str) -> str:
    """``text`` with each ``Example:`` heading line renamed ``Examples:``.

    Args:
        text: a docstring.

    Returns:
        The docstring with its example headings in the plural.

    Example:
        >>> as_examples_section("Summary.\\n\\nExample:\\n    >>> 1 + 1\\n    2\\n")
        'Summary.\\n\\nExamples:\\n    >>> 1 + 1\\n    2\\n'
    """
    return HEADING.sub(r"\1Examples:", text)


class ExampleSections(griffe.Extension):
    """Renames every object's ``Example:`` headings as it is loaded (module docstring)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = as_examples_section(obj.docstring.value)
