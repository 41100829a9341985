"""The documentation site's build is strict and offline, and `make test` shows its warnings.

``mkdocs build --strict`` counts the warnings it logs; ``--quiet`` stops them being logged, so
with it a broken link would pass. These tests hold the Makefile's build to ``--strict``
without ``--quiet``, show on a copy of the site that a broken link fails that build, naming
the link, and hold the site to drawing its diagrams with the mermaid the project pins.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from mkdocs.config import load_config
from mkdocs.structure.files import Files

REPO = Path(__file__).resolve().parents[1]
MAKEFILE = (REPO / "Makefile").read_text(encoding="utf-8")
# The whole site builds in about 3 s; the bound only stops a hung build holding the suite.
BUILD_TIMEOUT_S = 120
BROKEN_LINK = "no-such-page.md"
MERMAID_PACKAGE = "@mermaid-js/tiny"
# What the pinned build draws of the diagram kinds: all of mermaid's but these.
NOT_IN_THE_PINNED_MERMAID = ("mindmap", "architecture-beta")
_DIAGRAM_KIND = re.compile(r"^```mermaid\n(\S+)", re.MULTILINE)


def _lint_recipe() -> list[str]:
    recipe = MAKEFILE.split("\nlint:", 1)[1]
    return [line.strip() for line in recipe.split("\n\n", 1)[0].splitlines()[1:]]


def test_make_lint_builds_the_docs_strictly_and_shows_the_warnings() -> None:
    builds = [line.split() for line in _lint_recipe() if "mkdocs" in line]
    assert len(builds) == 1, builds
    build = builds[0]
    assert build[1:3] == ["build", "--strict"], build
    assert not {"-q", "--quiet"} & set(build), f"{' '.join(build)} hides the warnings it counts"


# Copied, so that a test may change them; every other entry of the checkout is linked, since
# pages include files from anywhere in it (the README's sections, bench/results.json) and the
# API reference reads the package.
COPIED = ("docs", "mkdocs.yml")
NOT_LINKED = {*COPIED, ".git", "site"}


def _site_copy(root: Path) -> Path:
    """A checkout under ``root`` whose pages and config are copies, the rest links."""
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / name)
        else:
            shutil.copy(source, root / name)
    for entry in REPO.iterdir():
        if entry.name not in NOT_LINKED:
            (root / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return root


def test_a_broken_link_fails_the_strict_build_naming_it(tmp_path: Path) -> None:
    site = _site_copy(tmp_path)
    page = site / "docs" / "index.md"
    page.write_text(
        page.read_text(encoding="utf-8") + f"\nSee [the missing page]({BROKEN_LINK}).\n",
        encoding="utf-8",
    )
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "out")],
        cwd=site,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    log = build.stdout + build.stderr
    assert build.returncode != 0, log
    warnings = [line for line in log.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, log
    assert re.search(rf"'index\.md' contains a link '{re.escape(BROKEN_LINK)}'", warnings[0]), log
    assert "Aborted with 1 warnings in strict mode" in log, log


def test_the_pinned_mermaid_is_the_one_the_lock_installs() -> None:
    package = json.loads((REPO / "package.json").read_text(encoding="utf-8"))
    lock = json.loads((REPO / "package-lock.json").read_text(encoding="utf-8"))
    pinned = package["devDependencies"][MERMAID_PACKAGE]
    assert re.fullmatch(r"\d+\.\d+\.\d+", pinned), f"{MERMAID_PACKAGE} {pinned} is not exact"
    assert lock["packages"][f"node_modules/{MERMAID_PACKAGE}"]["version"] == pinned


def test_the_site_serves_the_pinned_mermaid_to_every_page() -> None:
    """The hook adds the installed file to the site where every page's script tag points."""
    config = load_config(str(REPO / "mkdocs.yml"))
    hooks: dict[str, ModuleType] = config["hooks"]
    (hook,) = hooks.values()
    assert str(hook.INSTALLED).startswith(f"node_modules/{MERMAID_PACKAGE}/")
    assert [str(script) for script in config.extra_javascript] == [hook.SITE_PATH]
    (served,) = config.plugins.on_files(Files([]), config=config)
    assert served.dest_uri == hook.SITE_PATH
    assert served.abs_src_path == str(REPO / hook.INSTALLED)


def test_every_diagram_is_of_a_kind_the_pinned_mermaid_draws() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    kinds = {
        (page.name, kind) for page in pages for kind in _DIAGRAM_KIND.findall(page.read_text())
    }
    assert ("README.md", "flowchart") in kinds
    assert not {kind for _, kind in kinds} & set(NOT_IN_THE_PINNED_MERMAID), kinds
