"""The documentation's make commands run as written in a fresh shell of a clone.

A fresh shell has neither the pinned CDK CLI nor Node 24 on its ``PATH``, so the documentation
(README.md and every page under docs/) gives CDK commands through make, whose targets put both
there. ``make -n`` prints what a target would run without running it (nor the setup it depends
on).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.helpers.platforms import REPO

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
TEXT = "\n".join(document.read_text(encoding="utf-8") for document in DOCUMENTS)
MAKE = shutil.which("make")
# `make target` and `make target ARGS="..."`, in inline code or a code block's command line.
_MAKE_COMMAND = re.compile(r'(?:`|^\$ )(make [a-z-]+(?: ARGS="[^"`]*")?)', re.MULTILINE)
_TARGET = re.compile(r"^([a-z][a-z-]*):", re.MULTILINE)
_PINNED_CDK = "node_modules/.bin/cdk --no-notices --no-version-reporting"

COMMANDS = sorted(set(_MAKE_COMMAND.findall(TEXT)))


def test_the_documented_commands_are_read() -> None:
    assert "make synth" in COMMANDS
    assert 'make cdk ARGS="synth -c node_provisioning=karpenter"' in COMMANDS


@pytest.mark.parametrize("command", COMMANDS)
def test_every_make_command_names_a_target(command: str) -> None:
    targets = set(_TARGET.findall((REPO / "Makefile").read_text(encoding="utf-8")))
    assert command.split()[1] in targets, command


def test_the_docs_synthesize_karpenter_mode_with_the_pinned_cli() -> None:
    """The documented command for a Karpenter-mode synth is one make runs with the pinned CLI."""
    (shown,) = (
        span
        for span in re.findall(r"`([^`\n]+)`", TEXT)
        if "node_provisioning=karpenter" in span and "synth" in span
    )
    assert shown.startswith("make "), f"{shown!r} does not run in a fresh shell"
    assert MAKE is not None, "make is needed to build the project"
    arguments = re.fullmatch(r'make (\w+) ARGS="([^"]*)"', shown)
    assert arguments, shown
    dry_run = subprocess.run(
        [MAKE, "-n", arguments.group(1), f"ARGS={arguments.group(2)}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    assert f"{_PINNED_CDK} synth -c node_provisioning=karpenter" in dry_run.stdout.splitlines()
