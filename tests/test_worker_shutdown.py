"""The test configuration lets a slow xdist worker finish without a stray KeyboardInterrupt.

The project's suite runs on xdist workers (``make test``). This runs a small suite the same
way, with the project's ``tests/conftest.py`` as a plugin, a Hypothesis test (which installs
Hypothesis' gc callback) and a worker teardown that spends longer collecting garbage than
execnet waits before interrupting it, as a worker that held the synthesized apps does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.platforms import REPO

# Longer than the 5 s execnet waits for a worker's execution to end before its SIGINT, and
# shorter than the further 10 s after which it ends the worker.
_TEARDOWN_S = 7

_SLOW_TEARDOWN = f"""
import gc
import time

import pytest


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        return
    heap = [[i] for i in range(500_000)]
    deadline = time.monotonic() + {_TEARDOWN_S}
    while time.monotonic() < deadline:
        gc.collect()
    del heap
"""

_PROPERTY_TEST = """
from hypothesis import given, strategies as st


@given(st.integers())
def test_integers_equal_themselves(number):
    assert number == number
"""


@pytest.mark.long
def test_a_worker_interrupted_while_it_tears_down_prints_no_keyboard_interrupt(
    tmp_path: Path,
) -> None:
    (tmp_path / "conftest.py").write_text(_SLOW_TEARDOWN)
    (tmp_path / "test_property.py").write_text(_PROPERTY_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    # EXECNET_DEBUG=2 traces execnet to stderr, which shows the interrupt was sent.
    env = {**os.environ, "PYTHONPATH": str(REPO), "EXECNET_DEBUG": "2"}
    command = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider"]
    command += ["-n", "1", "-q", "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path)]
    result = subprocess.run(
        [*command, str(tmp_path / "test_property.py")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "1 passed" in result.stdout
    assert "sending ourselves a SIGINT" in result.stderr
    assert "KeyboardInterrupt" not in output
