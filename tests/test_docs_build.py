"""The documentation site's build is strict: a warning fails it, and `make test` shows it.

``mkdocs build --strict`` counts the warnings it logs; ``--quiet`` stops them being logged, so
with it a broken link would pass. These tests hold the Makefile's build to ``--strict``
without ``--quiet``, and show on a copy of the site that a broken link fails that build,
naming the link.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAKEFILE = (REPO / "Makefile").read_text(encoding="utf-8")
# The whole site builds in about 3 s; the bound only stops a hung build holding the suite.
BUILD_TIMEOUT_S = 120
BROKEN_LINK = "no-such-page.md"


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
