"""What the app is handed from outside is refused in bounded time with one line, exit 2.

The CDK CLI hands the app its context in ``CDK_CONTEXT_JSON`` and, when that would not fit
the environment, in the file ``CONTEXT_OVERFLOW_LOCATION_ENV`` names: one that is a FIFO
once blocked the app forever. A platform path in the context may hold a NUL byte, which once
ended in pathlib's ``ValueError``. Both are refused before aws-cdk-lib is loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eks_inference.specification.files import SpecFileError, load
from tests.helpers.platforms import REPO

# Far beyond the app's refusal (a fraction of a second), far below a hang.
_TIMEOUT_S = 60


def _app(tmp_path: Path, **environment: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CDK_CONTEXT_JSON", "JSII_NODE")}
    return subprocess.run(
        [sys.executable, str(REPO / "app.py")],
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_S,
        cwd=tmp_path,
        env={**env, "CDK_OUTDIR": str(tmp_path / "cdk.out"), **environment},
        check=False,
    )


def _one_line(completed: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert completed.returncode == 2, completed.stderr
    (line,) = completed.stderr.splitlines()
    assert line.startswith("error: ")
    for text in expected:
        assert text in line, line


def test_a_context_file_that_is_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "context.json"
    os.mkfifo(fifo)
    _one_line(
        _app(tmp_path, CONTEXT_OVERFLOW_LOCATION_ENV=str(fifo)),
        "the CDK context could not be read",
        "not a regular file (a named pipe); give a JSON file",
    )


def test_a_context_file_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    _one_line(
        _app(tmp_path, CONTEXT_OVERFLOW_LOCATION_ENV=str(tmp_path)),
        "not a regular file (a directory)",
    )


def test_a_context_file_the_cli_writes_is_read(tmp_path: Path) -> None:
    context = tmp_path / "context.json"
    context.write_text(json.dumps({"platform": str(tmp_path / "missing.yaml")}))
    _one_line(_app(tmp_path, CONTEXT_OVERFLOW_LOCATION_ENV=str(context)), "missing.yaml not found")


def test_a_platform_path_with_a_nul_byte_is_refused(tmp_path: Path) -> None:
    _one_line(
        _app(tmp_path, CDK_CONTEXT_JSON=json.dumps({"platform": "platform\u0000.yaml"})),
        "platform\\x00.yaml",
        "the path holds a NUL byte",
    )


def test_the_spec_file_reader_refuses_a_nul_byte_as_its_own_error() -> None:
    with pytest.raises(SpecFileError, match="NUL byte"):
        load("deployments\0.yaml")
