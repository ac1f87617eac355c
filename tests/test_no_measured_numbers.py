"""No docstring or ``#:`` comment of sigprop carries a measured result.

A figure found in a run (a percent error, a timing, "measured: 0.425", "4.07 against 4.41 ± 0.11") goes stale the
day the code changes, and a reader cannot tell how it was obtained. Such figures live in the documentation
(README.md, docs/*.md) beside the command that reproduces them; the code points to the page and section by name.
Derivations and exact mathematics stay in the code.

The scanner reads every docstring (any string standing alone as a statement: module, class, function and attribute
docstrings) and every ``#:`` comment of ``sigprop/``, except ``sigprop/verify/specs/``, whose figures are the
papers' stated sweep ranges. It flags the patterns of :data:`PATTERNS`; what is a constant of a protocol or a
derivation rather than a measurement is listed in :data:`ALLOWED`, each with its reason.
"""

from __future__ import annotations

import ast
import doctest
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "sigprop"
#: Folders whose figures are inputs, not results: the verify specs state the papers' sweep ranges.
EXCLUDED = (ROOT / "verify" / "specs",)

#: What a measured result looks like in prose, by kind.
PATTERNS = {
    # A confidence level ("the 95% interval", "with 90% probability") is a setting of a statistic, not a result.
    "percent": re.compile(r"\d+(?:\.\d+)?\s?%(?!\s?(?:interval|CI|confidence|coverage|probability|prediction))"),
    # A number, then a unit of time: "~2.5 s", "0.45 s per layer", "1.9 ms", "2 minutes". A bare "s" must stand apart
    # from the number and from what follows, so that s² = 0.3, 2s + 3 and 2 s₋ (mathematics) are not times.
    "time": re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:\s?(?:ms|µs|sec|seconds?|min|minutes?|hours?)|\ss)\b"
                       r"(?![²³⁴₊₋=(])"),
    "value ± error": re.compile(r"\d\s?±\s?\d"),
    "measured value": re.compile(r"\bmeasured?\b\s*:?\s*[-+−]?\d", re.IGNORECASE),
    "run report": re.compile(r"\bwe found\b|\btakes about\b|\btook about\b", re.IGNORECASE),
}


@dataclass(frozen=True)
class Allowed:
    """A figure that matches a pattern but is not a measured result.

    Attributes:
        path: the file, relative to ``sigprop/``.
        text: the text that matches, exactly as it stands in the docstring or comment.
        reason: why it is not a measurement.
    """

    path: str
    text: str
    reason: str


ALLOWED = (
    Allowed("model/objective.py", "80% [MASK], 10% random, 10% kept",
            "BERT's masking protocol, an input of the objective"),
    Allowed("hf/measure.py", "15% of the tokens", "BERT's masking rate, an input of the objective"),
    Allowed("theory/resolved.py", "labelled 15% of", "BERT's masking rate, an input of the objective"),
    Allowed("train/data.py", "BERT's 15 % selection", "BERT's masking rate, an input of the objective"),
    Allowed("components/attention_gram.py", "the 15% of positions", "BERT's masking rate, an input of the objective"),
    Allowed("analysis/doctor.py", '"grad_var 6.21% (noise 5.90%), …"', "an example of the line's format"),
    Allowed("cli/train.py", "every 10 s", "the progress line's interval (TrainDisplay.EVERY_S), a setting"),
    Allowed("verify/plot.py", "the 1% and 5% targets", "the sweep's p50 and p99 targets, settings"),
    Allowed("verify/registry.py", "noise below 1%", "the sweep's noise target, a setting"),
)


@dataclass(frozen=True)
class Finding:
    """One match of a pattern in a docstring or ``#:`` comment.

    Attributes:
        path: the file, relative to ``sigprop/``.
        line: the line the docstring or comment starts on.
        kind: the pattern's key in :data:`PATTERNS`.
        text: the docstring or comment, whitespace collapsed.
        match: the matched characters.
    """

    path: str
    line: int
    kind: str
    text: str
    match: str


def prose(source: str) -> list[tuple[int, str]]:
    """The docstrings and ``#:`` comments of a module's source, with the line each starts on.

    Args:
        source: a Python module's text.

    Returns:
        (line, text) pairs; consecutive ``#:`` lines are one comment.

    Example:
        >>> prose("'''Doc.'''\\n#: a note\\n#: goes on\\nX = 1\\n")
        [(1, 'Doc.'), (2, 'a note goes on')]
    """
    found = [(node.lineno, node.value.value) for node in ast.walk(ast.parse(source))
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
             and isinstance(node.value.value, str)]
    comments: list[tuple[int, str]] = []
    last = -2
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and tok.string.startswith("#:"):
            text = tok.string[2:].strip()
            if tok.start[0] == last + 1 and comments:
                comments[-1] = (comments[-1][0], f"{comments[-1][1]} {text}")
            else:
                comments.append((tok.start[0], text))
            last = tok.start[0]
    return sorted(found + comments)


def findings(path: str, source: str, allowed=ALLOWED) -> list[Finding]:
    """Every measured-result pattern in the docstrings and ``#:`` comments of one module, less the allowed ones.

    Args:
        path: the module's path relative to ``sigprop/`` (matched against :attr:`Allowed.path`).
        source: the module's text.
        allowed: the figures that are not measurements.

    Returns:
        The findings, in the order of the source.

    Example:
        >>> [f.kind for f in findings("x.py", "'''Off by 8% here (measured: 4.07).'''")]
        ['percent', 'measured value']
    """
    out = []
    for line, raw in prose(source):
        text = " ".join(raw.split())
        spans = [(m.start(), m.end()) for a in allowed if a.path == path
                 for m in re.finditer(re.escape(a.text), text)]
        for kind, pattern in PATTERNS.items():
            for m in pattern.finditer(text):
                if not any(a <= m.start() and m.end() <= b for a, b in spans):
                    out.append(Finding(path, line, kind, text, m.group()))
    return out


def modules() -> list[Path]:
    """The modules of ``sigprop/`` the scan covers."""
    return sorted(p for p in ROOT.rglob("*.py") if not any(p.is_relative_to(e) for e in EXCLUDED))


def test_scanner_catches_measured_results():
    """Each kind of measured result is found, in a docstring and in a ``#:`` comment alike."""
    source = '''"""Rule X. The Gaussian rule is off by 8% here (4.07 against 4.41 ± 0.11 measured over 24 seeds)."""

#: Closed form within 0.9% of the sampled rule; measured: 0.425 and 5.32; a sweep takes about ~2.5 s,
#: 0.45 s per layer.
LIMIT = 1.0


def f():
    """We found +2.4% per layer."""
'''
    kinds = {(f.line, f.kind) for f in findings("x.py", source)}
    assert kinds == {(1, "percent"), (1, "value ± error"), (3, "percent"), (3, "measured value"), (3, "time"),
                     (3, "run report"), (9, "percent"), (9, "run report")}


def test_scanner_leaves_mathematics_alone():
    """Derivations, exact values and score variances are not results: nothing is flagged."""
    source = '''"""s± = 1 + c±/√n; T(h, ±inf) = ±1/4 at h = 0; at s² = 0.3 the closed form; 2 seeds per layer."""

#: E[ReLU(x)²] = σ²/2 exactly; O(s⁴/L) terms; the width n > 6.
N = 6
'''
    assert findings("x.py", source) == []


def test_scanner_leaves_confidence_levels_alone():
    """A confidence level is a setting of a statistic: "95% interval" passes where "4% off" beside it does not."""
    source = '"""The paired 95% interval, the 95 % CI and a 90% probability; the rule is 4% off."""\n'
    assert [f.match for f in findings("x.py", source)] == ["4%"]


def test_allow_list_covers_only_its_own_text():
    """An allowed figure is allowed in its own file only, and another figure beside it is still found."""
    allowed = (Allowed("x.py", "15% of the tokens", "a protocol constant"),)
    source = "'''Masks 15% of the tokens; off by 3% (measured).'''"
    assert [f.match for f in findings("x.py", source, allowed)] == ["3%"]
    assert [f.match for f in findings("y.py", source, allowed)] == ["15%", "3%"]


def test_every_allowed_figure_is_still_there():
    """An allow-list entry whose text is gone is removed, so that the list stays small and each entry current."""
    texts = {str(p.relative_to(ROOT)): " ".join(" ".join(t for _, t in prose(p.read_text())).split())
             for p in modules()}
    stale = [a for a in ALLOWED if a.text not in texts.get(a.path, "")]
    assert not stale, f"allow-list entries no longer found: {stale}"


def test_examples_run():
    """The examples in this module's docstrings hold."""
    result = doctest.testmod(sys.modules[__name__], verbose=False)
    assert result.attempted and not result.failed


def test_no_measured_numbers():
    """No docstring or ``#:`` comment of ``sigprop/`` carries a measured result (see the module docstring)."""
    found = [f for p in modules() for f in findings(str(p.relative_to(ROOT)), p.read_text())]
    assert not found, "measured results in docstrings or #: comments (move them to the docs, with the command " \
                      "that reproduces them, and point there by page and section):\n" + "\n".join(
        f"  {f.path}:{f.line}: {f.kind} {f.match!r} in: …{_around(f)}…" for f in found)


def _around(f: Finding, width: int = 60) -> str:
    i = f.text.find(f.match)
    return f.text[max(0, i - width): i + len(f.match) + width]
