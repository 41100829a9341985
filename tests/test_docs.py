"""The README is the front door of the documentation site, and the site documents the API.

The site's pages live under docs/ (built by ``mkdocs build --strict``, which fails on a broken
link or anchor, a page missing from the nav or a name the API reference cannot find). What the
build cannot see is checked here: that the README stays short and links every page, that the
sections the site shares with the README have their one home there, and that the API reference
documents every name the package exports.
"""

from __future__ import annotations

import re

import eks_inference
from tests.helpers.platforms import REPO

DOCS = REPO / "docs"
README = (REPO / "README.md").read_text(encoding="utf-8")
PAGES = sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))
# The README's front-door budget: what it is, the two commands, the diagram, an example, the
# security table, and a link to each page.
README_MAX_LINES = 200
_README_LINK = re.compile(r"\]\(docs/([^)#\s]+\.md)(?:#[^)\s]*)?\)")
_INCLUDE = re.compile(r'^--8<-- "README\.md:([\w-]+)"$', re.MULTILINE)
_API_ENTRY = re.compile(r"^::: eks_inference\.(\w+)$", re.MULTILINE)


def test_the_readme_is_a_front_door() -> None:
    lines = README.count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines"


def test_the_readme_links_every_docs_page() -> None:
    assert PAGES
    linked = set(_README_LINK.findall(README))
    assert not set(PAGES) - linked, f"pages the README does not link: {set(PAGES) - linked}"
    assert not linked - set(PAGES), f"README links to missing pages: {linked - set(PAGES)}"


def test_every_section_a_page_includes_is_marked_in_the_readme() -> None:
    included = {
        name for page in PAGES for name in _INCLUDE.findall((DOCS / page).read_text("utf-8"))
    }
    assert "security" in included
    for name in sorted(included):
        start, end = f"<!-- --8<-- [start:{name}] -->", f"<!-- --8<-- [end:{name}] -->"
        assert README.count(start) == 1, start
        assert README.count(end) == 1, end
        assert README.index(start) < README.index(end), name


def test_the_readme_keeps_the_security_section() -> None:
    heading = "## Security: what is exposed, to whom, and how it is enforced\n"
    assert heading in README
    section = README.split(heading, 1)[1].split("\n## ", 1)[0]
    assert "| what | who can reach it | enforced by |" in section


def test_the_api_reference_documents_every_public_name() -> None:
    entries = _API_ENTRY.findall((DOCS / "api.md").read_text(encoding="utf-8"))
    assert len(entries) == len(set(entries)), "a name is documented twice"
    assert set(entries) == set(eks_inference.__all__)
