"""``manifests`` writes through the chart renderer; the CLI starts without heavy imports."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from typer.testing import Result

from .conftest import REFERENCE_PLATFORM


def test_manifests_are_written(cli: Callable[..., Result], tmp_path: Path) -> None:
    out = tmp_path / "k8s_manifests"
    result = cli("manifests", "--out", out, "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 0, result.stderr
    written = sorted(p for p in out.rglob("*.yaml"))
    assert written
    assert f"wrote {len(written)} manifest files to {out}" in result.stdout


def test_manifests_need_an_output_directory(cli: Callable[..., Result]) -> None:
    result = cli("manifests")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: Missing option '--out'")


def test_plan_imports_neither_cdk_nor_boto3_nor_matplotlib() -> None:
    """``plan`` and ``--help`` stay fast: no jsii runtime, AWS SDK or plotting library."""
    code = (
        "import sys\n"
        "from eks_inference.cli.main import app\n"
        "from typer.testing import CliRunner\n"
        f"result = CliRunner().invoke(app, ['plan', '--platform', {str(REFERENCE_PLATFORM)!r}])\n"
        "assert result.exit_code == 0, result.output\n"
        "heavy = sorted(m for m in ('aws_cdk', 'jsii', 'cdk8s', 'boto3', 'botocore', 'matplotlib')"
        " if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert completed.stdout.strip() == ""


def test_help_lists_every_command(cli: Callable[..., Result]) -> None:
    result = cli()
    assert result.exit_code == 0
    for command in ("plan", "upload", "preflight", "manifests"):
        assert command in result.stdout
