"""The ``eks-inference`` console script run as a shell runs it: in its own process, with a
timeout, and with no AWS configuration reachable (bad input must fail before any call)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Seconds a run refusing bad input may take, start-up included; each takes about one.
_TIMEOUT_S = 30


def console_script() -> str:
    """The ``eks-inference`` script installed beside this interpreter."""
    beside = Path(sys.executable).with_name("eks-inference")
    if not beside.exists():
        pytest.fail("the eks-inference console script is not installed; run `make setup-dev`")
    return str(beside)


def run_cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``eks-inference ARGS`` with no AWS configuration reachable (bad input fails first)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    return subprocess.run(
        [console_script(), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        timeout=_TIMEOUT_S,
        cwd=cwd,
        env=env,
    )
