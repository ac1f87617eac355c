"""The documentation site builds strictly (a broken link, anchor or API reference fails it), its command-line
reference has an entry for every command of the ``sigprop`` command tree, generated and not written by hand, and its
API reference an entry for every name in ``sigprop.__all__``."""

from __future__ import annotations

import html
import re

import pytest
import typer

import sigprop
from sigprop.cli.app import app

from ..test_readme_names import resolve
from .conftest import ROOT

pytestmark = pytest.mark.docs

API_PAGES = sorted((ROOT / "docs" / "reference" / "api").glob("*.md"))
_DIRECTIVE = re.compile(r"^:::\s+(\S+)", re.M)


def commands(command, parent=None, path=("sigprop",)):
    """Every command of the click tree below ``command`` (the root included): the words that call it and its usage
    line, as ``sigprop ... --help`` prints it."""
    context = type(command).context_class(command, info_name=path[-1], parent=parent)
    yield path, command.get_usage(context).removeprefix("Usage:").strip()
    for name in getattr(command, "list_commands", lambda _: [])(context):
        sub = command.get_command(context, name)
        if not sub.hidden:
            yield from commands(sub, context, (*path, name))


COMMANDS = dict(commands(typer.main.get_command(app)))


def ids_in(page) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', page.read_text(encoding="utf-8")))


def test_the_command_tree_is_walked_into_its_groups():
    assert {("sigprop", "predict"), ("sigprop", "train"), ("sigprop", "track", "plot")} <= set(COMMANDS)
    assert COMMANDS[("sigprop", "fold")].startswith("sigprop fold [OPTIONS]")


@pytest.mark.long
@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_command_has_a_generated_reference_entry(site, path):
    page = site / "reference" / "cli" / "index.html"
    assert "-".join(path) in ids_in(page)
    assert html.escape(COMMANDS[path], quote=False) in page.read_text(encoding="utf-8")


def test_the_command_reference_is_not_a_file_of_the_sources():
    assert not (ROOT / "docs" / "reference" / "cli.md").exists()


def shown_objects() -> dict[str, tuple[str, str]]:
    """Each ``::: identifier`` of the API pages: identifier -> (page stem, identifier)."""
    return {ident: (page.stem, ident) for page in API_PAGES for ident in _DIRECTIVE.findall(page.read_text())}


@pytest.mark.long
@pytest.mark.parametrize("name", sigprop.__all__)
def test_every_public_name_has_an_api_entry(site, name):
    public = getattr(sigprop, name)
    entries = [(stem, ident) for ident, (stem, _) in shown_objects().items() if resolve(ident) is public]
    assert entries, f"no ::: entry in docs/reference/api/ documents sigprop.{name}"
    stem, ident = entries[0]
    assert ident in ids_in(site / "reference" / "api" / stem / "index.html")


def test_every_api_entry_names_an_object_that_exists():
    assert shown_objects(), "no ::: entries found"
    for ident in shown_objects():
        resolve(ident)  # raises, naming the path, where it does not


@pytest.mark.long
def test_the_home_page_is_the_readme_with_its_links_made_site_links(site):
    page = (site / "index.html").read_text(encoding="utf-8")
    assert "<!-- ci:step -->" in page and not re.findall(r'(?:href|src)="docs/', page)
    assert 'src="results/compare-fig1-preln.png"' in page


@pytest.mark.long
def test_every_results_figure_a_page_shows_is_copied(site):
    pngs = {p.relative_to(ROOT / "docs") for p in (ROOT / "docs" / "results").rglob("*.png")}
    assert pngs and all((site / p).is_file() for p in pngs)
