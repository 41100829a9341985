"""The plotting stack is the ``plot`` extra: without it, a picture option is one line saying
how to install it (exit 2), and everything else of ``plan`` works.

matplotlib is made unimportable in a subprocess by a meta path finder that refuses it, as an
environment without the extra would; nothing is uninstalled.
"""

from __future__ import annotations

import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.helpers.platforms import REFERENCE_PLATFORM, REPO

# Runs the CLI with matplotlib (and every module under it) refused at import.
_WITHOUT_MATPLOTLIB = """
import sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Refuse())
sys.argv = ["eks-inference", *sys.argv[1:]]
from eks_inference.cli.main import main
main()
"""
INSTALL = "install the plot extra: pip install 'eks-inference[plot]'"


def _without_matplotlib(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_MATPLOTLIB, *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=REPO,
    )


@pytest.mark.parametrize(
    ("option", "context"),
    [
        ("--cold-start-plot", ("--platform", REFERENCE_PLATFORM)),
        ("--plot", ("--model", "llama-3-8b")),
    ],
)
def test_a_picture_without_the_extra_is_one_line_naming_the_install(
    tmp_path: Path, option: str, context: tuple[str | Path, ...]
) -> None:
    picture = tmp_path / "picture.png"
    started = time.monotonic()
    completed = _without_matplotlib("plan", *context, option, picture)
    assert completed.returncode == 2, completed.stderr
    assert completed.stdout == ""
    assert completed.stderr.splitlines() == [
        f"error: {option} draws with matplotlib, which is not installed (no module named "
        f"'matplotlib'); {INSTALL} (from a checkout: pip install -e '.[plot]')"
    ]
    assert not picture.exists()
    assert time.monotonic() - started < 30


def test_plan_without_the_extra_still_plans(tmp_path: Path) -> None:
    completed = _without_matplotlib("plan", "--platform", REFERENCE_PLATFORM, "--json")
    assert completed.returncode == 0, completed.stderr
    assert '"deployments"' in completed.stdout


def test_the_extra_is_declared_and_the_dev_environment_installs_it() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("matplotlib")]
    assert [d for d in project["optional-dependencies"]["plot"] if d.startswith("matplotlib")]
    runtime = (REPO / "requirements.txt").read_text().splitlines()
    dev = (REPO / "requirements-dev.txt").read_text().splitlines()
    assert not [line for line in runtime if line.startswith("matplotlib")]
    assert "-r requirements.txt" in dev
    assert [line for line in dev if line.startswith("matplotlib==")]
