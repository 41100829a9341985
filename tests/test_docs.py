"""The README is the front door of the documentation site, and the site documents the API.

The site's pages live under docs/ (built by ``mkdocs build --strict``, which fails on a broken
link or anchor, a page missing from the nav or a name the API reference cannot find). What the
build cannot see is checked here: that the README stays short and links every page, that the
sections the site shares with the README have their one home there, that the API reference
documents every name the package exports, and that every list renders as it reads.
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
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_LIST_ITEM = re.compile(r"^ *(?:[-*+]|\d+\.) ")
# Python-Markdown (unlike GitHub) nests a block in a list item only when it is indented by 4
# spaces per level: a sub-list, a paragraph or a fence indented by 2 or 3 joins the item's
# text or leaves the list.
NESTING_INDENT = 4


def test_the_readme_is_a_front_door() -> None:
    # A block's marker (tests/test_docs_blocks.py) is a comment no reader sees.
    lines = README.count("\n") - README.count("\n<!-- docs: ")
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


def _misnested_lines(text: str) -> list[tuple[int, str]]:
    """Lines outside fences that Python-Markdown does not nest as they read.

    A line that starts a block (a list item, a paragraph after a blank line, a fence) nests
    only at a multiple of 4 spaces; a line continuing the text above it (lazy continuation)
    may be indented any way. A list item less indented than the block it ends belongs to that
    block (a nested paragraph swallows the next item of its list) unless a blank line comes
    first.
    """
    found: list[tuple[int, str]] = []
    fence: str | None = None
    after_blank = True
    block_indent = 0
    for number, line in enumerate(text.splitlines(), 1):
        opening = _FENCE.match(line)
        if fence is not None:
            if opening and opening.group(1).startswith(fence):
                fence = None
            after_blank = False
            continue
        indent = len(line) - len(line.lstrip(" "))
        item = _LIST_ITEM.match(line) is not None
        if after_blank:
            block_indent = indent
        starts_block = (item and indent > 0) or after_blank or opening is not None
        not_nested = bool(line.strip()) and indent % NESTING_INDENT != 0 and starts_block
        swallowed = item and not after_blank and indent < block_indent
        if not_nested or swallowed:
            found.append((number, line))
        if opening:
            fence = opening.group(1)
        after_blank = not line.strip()
    return found


def test_the_nesting_check_sees_a_sub_list_indented_by_two() -> None:
    assert _misnested_lines("- a:\n  - b\n\n    ```\n  - not a list\n    ```\n") == [(2, "  - b")]


def test_the_nesting_check_sees_an_item_a_nested_paragraph_swallows() -> None:
    text = "1. a\n\n    more of a\n2. b\n\n    more of b\n\n3. c\n"
    assert _misnested_lines(text) == [(4, "2. b")]


def test_every_nested_block_is_indented_as_python_markdown_nests_it() -> None:
    sources = [REPO / "README.md", *(DOCS / page for page in PAGES)]
    found = {
        source.relative_to(REPO).as_posix(): lines
        for source in sources
        if (lines := _misnested_lines(source.read_text(encoding="utf-8")))
    }
    assert not found, found
