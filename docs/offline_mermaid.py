"""The diagrams' mermaid, served by the site itself, so that the pages draw them offline.

Material for MkDocs draws the ```` ```mermaid ```` blocks with the page's global ``mermaid``
when there is one, and otherwise loads the newest mermaid 11 from a CDN when a page is read:
unpinned, and nothing at all without the network. The project pins the browser build of
mermaid 11 in package-lock.json (``@mermaid-js/tiny``: one file, no dependencies; it leaves
out only mindmaps, architecture diagrams and KaTeX, which no page uses), and ``make setup``
installs it with the CDK CLI. This hook adds that file to the site at :data:`SITE_PATH`,
which mkdocs.yml lists in ``extra_javascript`` so that every page loads it before the theme
looks for ``mermaid``; ``mkdocs serve`` serves it the same way.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

INSTALLED = Path("node_modules/@mermaid-js/tiny/dist/mermaid.tiny.js")
SITE_PATH = "assets/javascripts/mermaid.tiny.js"


def on_files(files: Files, *, config: MkDocsConfig) -> Files:
    """Add the installed mermaid to the site's files, or fail the build naming the fix."""
    source = Path(config.config_file_path).parent / INSTALLED
    if not source.is_file():
        raise PluginError(
            f"{INSTALLED} is missing: `make setup` installs the mermaid the diagrams are drawn "
            "with (pinned in package-lock.json)"
        )
    files.append(File.generated(config, SITE_PATH, abs_src_path=str(source)))
    return files
