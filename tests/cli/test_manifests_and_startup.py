"""``manifests`` writes through the chart renderer, owning only its files and failing in one
line; the CLI starts without heavy imports."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import Result

from eks_inference.output import directory as output_dir
from tests.helpers.platforms import REFERENCE_PLATFORM, REPO, reference


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


def _imported_after(arguments: list[str], packages: tuple[str, ...]) -> list[str]:
    """The modules of ``packages`` imported once ``eks-inference ARGUMENTS`` has succeeded, in
    a fresh interpreter (the CLI through its own entry point)."""
    code = (
        "import sys\n"
        "from eks_inference.cli.main import app\n"
        "from typer.testing import CliRunner\n"
        f"result = CliRunner().invoke(app, {arguments!r})\n"
        "assert result.exit_code == 0, result.output\n"
        f"print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in {packages!r})))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return [name for name in completed.stdout.strip().split(",") if name]


def test_plan_imports_neither_cdk_nor_boto3_nor_matplotlib() -> None:
    """``plan`` and ``--help`` stay fast: no jsii runtime, AWS SDK or plotting library."""
    heavy = ("aws_cdk", "jsii", "cdk8s", "boto3", "botocore", "matplotlib")
    assert _imported_after(["plan", "--platform", str(REFERENCE_PLATFORM)], heavy) == []


@pytest.mark.parametrize(
    "platform", ["deployments.yaml", "karpenter", "examples/triton-canary.yaml"]
)
def test_manifests_import_no_jsii_library(platform: str, tmp_path: Path) -> None:
    """``manifests`` writes from plain chart records: no cdk8s, jsii, aws-cdk or constructs is
    imported, so no JavaScript runtime starts (the reference platform in both provisioning
    modes, and an example with traffic splits). It prints plain lines: rich, which the other
    commands' tables need, is not imported either."""
    if platform == "karpenter":
        data = reference()
        data["node_provisioning"] = "karpenter"
        platform_file = tmp_path / "karpenter.yaml"
        platform_file.write_text(yaml.safe_dump(data))
    else:
        platform_file = REPO / platform
    out = tmp_path / "k8s_manifests"
    arguments = ["manifests", "--platform", str(platform_file), "--out", str(out)]
    assert _imported_after(arguments, ("jsii", "cdk8s", "constructs", "aws_cdk", "rich")) == []
    assert (out / "namespace.yaml").is_file()


def test_help_lists_every_command(cli: Callable[..., Result]) -> None:
    result = cli()
    assert result.exit_code == 0
    for command in ("plan", "upload", "preflight", "manifests"):
        assert command in result.stdout


def _lines(text: str) -> list[str]:
    return text.splitlines()


def test_manifests_refuse_a_git_work_tree_and_keep_it_whole(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    """`git init r; mkdir r/apps; eks-inference manifests --out r` deleted both, exit 0."""
    repo = tmp_path / "r"
    (repo / ".git" / "refs").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / "apps").mkdir()
    result = cli("manifests", "--out", repo, "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 2
    assert _lines(result.stderr) == [
        f"error: {repo} holds files the manifest writer did not write (.git/, apps/); choose a "
        "new or empty directory, or pass --allow-other-files to write beside them (they are "
        "left untouched)"
    ]
    assert sorted(str(p.relative_to(repo)) for p in repo.rglob("*")) == [
        ".git",
        ".git/HEAD",
        ".git/refs",
        "apps",
    ]
    allowed = cli(
        "manifests", "--out", repo, "--platform", REFERENCE_PLATFORM, "--allow-other-files"
    )
    assert allowed.exit_code == 0, allowed.stderr
    assert (repo / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert (repo / "apps").is_dir()
    assert (repo / "namespace.yaml").is_file()


def test_manifests_refuse_the_project_directory_and_a_file(
    cli: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "app.py").write_text("print('the project')\n")
    monkeypatch.chdir(project)
    result = cli("manifests", "--out", ".", "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 2
    assert _lines(result.stderr)[0].startswith(
        "error: . holds files the manifest writer did not write (app.py)"
    )
    assert len(_lines(result.stderr)) == 1
    assert [p.name for p in project.iterdir()] == ["app.py"]
    as_file = cli("manifests", "--out", "app.py", "--platform", REFERENCE_PLATFORM)
    assert as_file.exit_code == 2
    assert _lines(as_file.stderr) == ["error: app.py exists and is not a directory"]
    assert (project / "app.py").read_text() == "print('the project')\n"


def test_manifests_refuse_a_symbolic_link_as_the_directory(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    result = cli("manifests", "--out", link, "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 2
    assert _lines(result.stderr) == [
        f"error: {link} is a symbolic link; give the directory it points to, {target}"
    ]
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EBUSY])
def test_a_failed_write_is_one_line_and_keeps_the_previous_manifests(
    cli: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    out = tmp_path / "k8s_manifests"
    assert cli("manifests", "--out", out, "--platform", REFERENCE_PLATFORM).exit_code == 0
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}

    def fail(*args: Any, **kwargs: Any) -> None:
        raise OSError(code, os.strerror(code), str(out / "namespace.yaml"))

    if code == errno.ENOSPC:
        monkeypatch.setattr(output_dir, "_write_text", fail)
    else:
        monkeypatch.setattr(os, "rename", fail)
    result = cli("manifests", "--out", out, "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 1
    assert _lines(result.stderr) == [
        f"error: cannot write the manifests to {out}: {os.strerror(code)} "
        f"({out / 'namespace.yaml'}); the previous manifests there are unchanged"
    ]
    monkeypatch.undo()
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before


def test_a_marker_that_is_not_utf8_is_one_line_and_nothing_changes(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    out = tmp_path / "k8s_manifests"
    assert cli("manifests", "--out", out, "--platform", REFERENCE_PLATFORM).exit_code == 0
    marker = out / ".eks-inference-manifests"
    marker.write_bytes(marker.read_bytes() + b"# caf\xe9\n")
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    result = cli("manifests", "--out", out, "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 2
    assert _lines(result.stderr) == [
        f"error: {marker} is not a file the manifest writer wrote (not UTF-8 text); remove it"
    ]
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before


def test_a_file_name_with_a_newline_in_the_directory_is_named_on_one_line(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "x\ny").write_text("mine\n")
    result = cli("manifests", "--out", out, "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 2
    assert _lines(result.stderr) == [
        f"error: {out} holds files the manifest writer did not write (x\\ny); choose a new or "
        "empty directory, or pass --allow-other-files to write beside them (they are left "
        "untouched)"
    ]
    assert [p.name for p in out.iterdir()] == ["x\ny"]
