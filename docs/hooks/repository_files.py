"""Repository files shown as site pages: a page whose Markdown is the line ``--8<-- "FILE"`` shows FILE (the README,
the changelog) from the repository's root, its links rewritten for the page's place in the site.

A link into ``docs/`` becomes a link relative to the page; a link to any other file of the repository (the
architecture, a test, a benchmark) becomes a link to that file in the repository on GitHub (``repo_url``). Anchors and
web addresses are left alone.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

INCLUDE = re.compile(r'^--8<-- "([^"]+)"\s*$', re.M)
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")


def rewrite_link(target: str, page_dir: str, repo_blob: str) -> str:
    """Where a link of a repository-root file points from a site page in ``page_dir``.

    Args:
        target: the link as the root file writes it, e.g. ``docs/results/accuracy.md#decoders``.
        page_dir: the page's folder inside ``docs/``, ``""`` for the home page.
        repo_blob: the repository's address for files, e.g. ``https://github.com/o/r/blob/main``.

    Returns:
        The rewritten link.

    Example:
        >>> rewrite_link("docs/results/accuracy.md#decoders", "", "https://x/blob/main")
        'results/accuracy.md#decoders'
        >>> rewrite_link("ARCHITECTURE.md", "", "https://x/blob/main")
        'https://x/blob/main/ARCHITECTURE.md'
    """
    if "://" in target or target.startswith(("#", "mailto:")):
        return target
    if target.startswith("docs/"):
        return posixpath.relpath(target.removeprefix("docs/"), page_dir or ".")
    return f"{repo_blob}/{target}"


def expand(markdown: str, root: Path, page_dir: str, repo_blob: str) -> str:
    """``markdown`` with each include line replaced by the named root file, its links rewritten.

    Args:
        markdown: a page's Markdown.
        root: the repository's root folder.
        page_dir: the page's folder inside ``docs/``.
        repo_blob: the repository's address for files.

    Returns:
        The page's Markdown with the files in place.
    """
    def include(match: re.Match) -> str:
        text = (root / match.group(1)).read_text(encoding="utf-8")
        return LINK.sub(lambda m: m.group(1) + rewrite_link(m.group(2), page_dir, repo_blob) + m.group(3), text)

    return INCLUDE.sub(include, markdown)


def on_page_markdown(markdown, page, config, files):
    """MkDocs hook: expand the include lines of a page."""
    if not INCLUDE.search(markdown):
        return markdown
    root = Path(config["config_file_path"]).parent
    repo_blob = config["repo_url"].rstrip("/") + "/blob/main"
    return expand(markdown, root, posixpath.dirname(page.file.src_uri), repo_blob)
