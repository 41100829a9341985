"""The CDK app's entry point: a bad platform file or context is one line, never a traceback.

``python app.py`` and ``cdk synth`` (which runs cdk.json's app command) print the line
``eks-inference plan`` prints for the same file, and the app exits with 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from eks_inference.cli.main import app as cli
from tests.helpers.hostile_platforms import run_measured, write_hostile_platforms
from tests.helpers.platforms import REFERENCE_PLATFORM, REPO, reference

# Every test runs the app in processes of its own and shares no synthesized app, so the tests
# are spread over the workers rather than grouped.
pytestmark = pytest.mark.synth


def _environment(context: dict[str, Any]) -> dict[str, str]:
    """What the Makefile exports for synth, with ``context`` as the CDK CLI passes it."""
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "CDK_CONTEXT_JSON": json.dumps(context),
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        "CDK_DISABLE_VERSION_CHECK": "true",
        "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
    }


def _app(context: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "app.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**_environment(context), "CDK_OUTDIR": str(tmp_path / "cdk.out")},
        check=False,
    )


def _plan_line(platform: Path) -> str:
    result = CliRunner().invoke(cli, ["plan", "--platform", str(platform)])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    return line


def _reference_with(tmp_path: Path, **changes: Any) -> Path:
    data = reference()
    data.update(changes)
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


HOSTILE: dict[str, str] = {
    "unsupported-kubernetes": "kubernetes_version",
    "five-hundred-node-pools": "node_pools: the stack would have",
    "duplicate-key": "duplicate",
    "not-yaml": "platform",
    "missing": "not found",
}


def _hostile(tmp_path: Path, case: str) -> Path:
    path = tmp_path / f"{case}.yaml"
    if case == "unsupported-kubernetes":
        return _reference_with(tmp_path, kubernetes_version="9.99")
    if case == "five-hundred-node-pools":
        pools = reference()["node_pools"]
        extra = [{"name": f"pool{i}", "instance_types": ["m6i.xlarge"]} for i in range(497)]
        return _reference_with(tmp_path, node_pools=[*pools, *extra])
    if case == "duplicate-key":
        path.write_text(REFERENCE_PLATFORM.read_text() + "region: eu-west-1\n")
    elif case == "not-yaml":
        path.write_bytes(b"node_pools: [\x00\xff\xfe")
    return path


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_python_app_prints_the_plan_line_for_a_bad_platform_file(tmp_path: Path, case: str) -> None:
    platform = _hostile(tmp_path, case)
    completed = _app({"platform": str(platform)}, tmp_path)
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.splitlines() == [_plan_line(platform)]
    assert HOSTILE[case] in completed.stderr


@pytest.mark.parametrize(
    ("context_json", "message"),
    [
        ("[1]", "error: the CDK context could not be read: a JSON object of context keys"),
        ("null", "error: the CDK context could not be read: a JSON object of context keys"),
        ('{"platform": ""}', "error: the platform context value is empty;"),
    ],
)
def test_python_app_refuses_context_that_is_no_object_or_names_no_file(
    tmp_path: Path, context_json: str, message: str
) -> None:
    """An empty ``platform`` (``-c platform=$FILE`` with FILE unset) is refused rather than
    read as the reference platform, which would build another platform than the one meant."""
    completed = subprocess.run(
        [sys.executable, str(REPO / "app.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**_environment({}), "CDK_CONTEXT_JSON": context_json},
        check=False,
    )
    assert completed.returncode == 2, completed.stderr
    (line,) = completed.stderr.splitlines()
    assert line.startswith(message)
    assert not (tmp_path / "cdk.out").exists()


def test_python_app_prints_terminal_escapes_in_a_file_name_escaped(tmp_path: Path) -> None:
    """A file name is text from outside: its escape sequences must not reach the terminal."""
    platform = tmp_path / "\x1b]0;title\x07\x1b[2J.yaml"
    completed = _app({"platform": str(platform)}, tmp_path)
    assert completed.returncode == 2, completed.stderr
    assert "\x1b" not in completed.stderr
    assert completed.stderr.splitlines() == [_plan_line(platform)]
    assert "\\x1b]0;title\\x07\\x1b[2J.yaml not found" in completed.stderr


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"region": "eu-west-1"}, "error: invalid context: region: context region 'eu-west-1'"),
        (
            {"node_provisioning": "fargate"},
            "error: invalid context: node_provisioning: context node_provisioning 'fargate'",
        ),
    ],
)
def test_python_app_prints_one_line_for_bad_context(
    tmp_path: Path, context: dict[str, str], message: str
) -> None:
    completed = _app(context, tmp_path)
    assert completed.returncode == 2, completed.stderr
    (line,) = completed.stderr.splitlines()
    assert line.startswith(message)


def test_cdk_synth_shows_the_one_line_and_fails(tmp_path: Path) -> None:
    """The real CLI with the Makefile's flags: the app's line, then the CLI's own exit note.

    The CDK CLI exits with 1 whatever the app's code and adds one line reporting it; the
    app's own output is the plan's line alone, with no traceback.
    """
    platform = _hostile(tmp_path, "unsupported-kubernetes")
    completed = subprocess.run(
        [
            str(REPO / "node_modules" / ".bin" / "cdk"),
            "--no-notices",
            "--no-version-reporting",
            "synth",
            "--quiet",
            "-c",
            f"platform={platform}",
            "-o",
            str(tmp_path / "cdk.out"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=_environment({}),
        check=False,
    )
    assert completed.returncode == 1
    assert completed.stderr.splitlines() == [
        _plan_line(platform),
        "python3 app.py: Subprocess exited with error 2",
    ]
    assert completed.stdout == ""


def test_python_app_gives_the_plan_line_for_a_sample_of_the_hostile_corpus(
    tmp_path: Path,
) -> None:
    """Every tenth file of the hostile corpus that ``plan`` refuses: the app refuses it with
    the same one line and exit 2, never a traceback, within 1 s of CPU and 300 MB, because
    the file is read before aws-cdk-lib is loaded (the whole corpus runs through the CLI in
    tests/cli/test_hostile_platforms.py).

    The sample runs through the app's entry point in one process
    (:mod:`tests.stacks.app_entry_runner`), each run measured there and checked to have left
    aws-cdk-lib unloaded; the first and the last file also run as ``python app.py`` in
    processes of their own, measured by the kernel, start-up included.
    """
    corpus = write_hostile_platforms(tmp_path / "corpus")
    sample = [path for path in corpus[::10] if _plan_exit_code(path) == 2]
    assert len(sample) >= 20
    results = tmp_path / "results.jsonl"
    subprocess.run(
        [sys.executable, "-m", "tests.stacks.app_entry_runner", str(results), *map(str, sample)],
        cwd=REPO,
        env={**_environment({}), "CDK_OUTDIR": str(tmp_path / "cdk.out")},
        check=True,
        timeout=300,
    )
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert [Path(r["file"]) for r in records] == sample
    for platform, record in zip(sample, records, strict=True):
        assert record["exception"] is None, (platform.name, record["exception"])
        assert (record["exit_code"], record["stderr"].splitlines()) == (
            2,
            [_plan_line(platform)],
        ), platform.name
        assert not record["loaded_aws_cdk"], platform.name
        assert record["cpu_s"] < 1.0, (platform.name, record["cpu_s"])
        assert record["peak_rss_mib"] < 300, (platform.name, record["peak_rss_mib"])
    for platform in (sample[0], sample[-1]):
        run = run_measured(
            [sys.executable, str(REPO / "app.py")],
            cwd=tmp_path,
            env={**_environment({"platform": str(platform)}), "CDK_OUTDIR": str(tmp_path)},
            hang_seconds=300,
        )
        assert (run.code, run.stderr.splitlines()) == (2, [_plan_line(platform)]), platform.name
        assert run.cpu_seconds < 1.0, (platform.name, run.cpu_seconds)
        assert run.peak_mib < 300, (platform.name, run.peak_mib)


def _plan_exit_code(platform: Path) -> int:
    return CliRunner().invoke(cli, ["plan", "--platform", str(platform)]).exit_code
