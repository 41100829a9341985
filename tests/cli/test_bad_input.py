"""Bad input: one ``error:`` line on stderr, exit code 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from tests.helpers.errors import one_line_error

PLAN_ONE = ("plan", "--model", "llama-3-8b", "--instance-type", "inf2.48xlarge")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            (
                "plan",
                "--model",
                "llama-9",
                "--instance-type",
                "inf2.48xlarge",
                "--tensor-parallel",
                "8",
            ),
            "unknown model 'llama-9'",
        ),
        (
            (
                "plan",
                "--model",
                "llama-3-8b",
                "--instance-type",
                "inf9.huge",
                "--tensor-parallel",
                "8",
            ),
            "unknown instance type 'inf9.huge'",
        ),
        (
            (
                "plan",
                "--model",
                "llama-3-8b",
                "--instance-type",
                "m6i.2xlarge",
                "--tensor-parallel",
                "1",
            ),
            "has no accelerators",
        ),
        ((*PLAN_ONE, "--tensor-parallel", "0"), "--tensor-parallel must be positive, got 0"),
        ((*PLAN_ONE, "--tensor-parallel", "-8"), "--tensor-parallel must be positive"),
        (
            (*PLAN_ONE, "--tensor-parallel", "8", "--max-model-len", "0"),
            "--max-model-len must be positive",
        ),
        (
            (*PLAN_ONE, "--tensor-parallel", "8", "--max-num-seqs", "-1"),
            "--max-num-seqs must be positive",
        ),
        (
            (*PLAN_ONE, "--tensor-parallel", "8", "--price-per-hour", "0"),
            "--price-per-hour must be positive",
        ),
        (
            (*PLAN_ONE, "--tensor-parallel", "8", "--measured-tokens-per-second", "-3"),
            "--measured-tokens-per-second must be positive",
        ),
        ((*PLAN_ONE, "--tensor-parallel", "3"), "not supported by the topology of inf2.48xlarge"),
        ((*PLAN_ONE, "--tensor-parallel", "eight"), "Invalid value for '--tensor-parallel'"),
        ((*PLAN_ONE,), "give both --instance-type and --tensor-parallel"),
        (("plan", "--no-such-option"), "No such option"),
    ],
)
def test_plan_bad_input(cli: Callable[..., Result], args: tuple[str, ...], expected: str) -> None:
    one_line_error(cli(*args), 2, expected)


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("bucket-name/models/x/", "is not an S3 URI"),
        ("https://bucket-name/models/x/", "is not an S3 URI"),
        ("s3://Bad_Bucket/models/x/", "not a valid bucket name"),
        ("s3://ab/models/x/", "not a valid bucket name"),
        ("s3://bucket-name", "has no key prefix"),
        ("s3://bucket-name/", "has no key prefix"),
        ("s3://bucket-name/models/x", "ending with '/'"),
        ("s3://bucket-name/models//x/", "empty path segment"),
    ],
)
def test_upload_malformed_s3_uri(
    cli: Callable[..., Result], tmp_path: Path, uri: str, expected: str
) -> None:
    one_line_error(cli("upload", tmp_path, uri), 2, expected)


@pytest.mark.parametrize(
    ("files", "kind", "expected"),
    [
        ({"model.safetensors": b"x"}, "weights", "no config.json"),
        ({"config.json": b"{}", "README.md": b"x"}, "weights", "no *.safetensors or *.bin"),
        ({}, "artifacts", "is empty"),
        ({".hidden": b"x"}, "artifacts", "is empty"),
        ({"config.json": b"{}", "a.bin": b"x", "_manifest.json": b"{}"}, "weights", "collide"),
    ],
)
def test_upload_checks_the_directory(
    cli: Callable[..., Result],
    tmp_path: Path,
    files: dict[str, bytes],
    kind: str,
    expected: str,
) -> None:
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    result = cli("upload", tmp_path, "s3://bucket-name/models/x/", "--kind", kind)
    one_line_error(result, 2, expected)


def test_upload_part_size_below_the_s3_minimum(cli: Callable[..., Result], tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "m.safetensors").write_bytes(b"x")
    result = cli("upload", tmp_path, "s3://bucket-name/m/", "--part-size", "4")
    one_line_error(result, 2, "--part-size must be at least 5 MiB")


def test_unknown_aws_profile(cli: Callable[..., Result], tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "m.safetensors").write_bytes(b"x")
    result = cli("upload", tmp_path, "s3://bucket-name/m/", "--profile", "no-such-profile")
    one_line_error(result, 2, "AWS profile 'no-such-profile' not found")


def test_invalid_platform_file_lists_pydantic_errors_compactly(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    platform = tmp_path / "platform.yaml"
    platform.write_text(
        "model_bucket_name: models-bucket\n"
        "node_pools: [{name: system, instance_types: [m6i.2xlarge]}]\n"
        "deployments:\n"
        "  - {name: x, model: llama-3-8b, instance_type: inf2.48xlarge,\n"
        "     tensor_parallel_size: 3, weights: {prefix: w/}}\n"
    )
    result = cli("plan", "--platform", platform)
    one_line_error(result, 2, f"invalid platform file {platform}:")
    # Every problem at once, each under its field path.
    assert "deployments.0.tensor_parallel_size: tensor_parallel_size 3" in result.stderr
    assert "deployments.0.neuron.compiled_artifacts_prefix:" in result.stderr


@pytest.mark.parametrize(
    ("content", "expected"),
    [(None, "not found"), ("a: [", "not valid YAML"), ("[]", "is not a platform file")],
)
def test_unreadable_platform_file(
    cli: Callable[..., Result], tmp_path: Path, content: str | None, expected: str
) -> None:
    platform = tmp_path / "p.yaml"
    if content is not None:
        platform.write_text(content)
    for command in ("plan", "preflight"):
        one_line_error(cli(command, "--platform", platform), 2, expected)


def test_unknown_deployment_and_bad_zones(cli: Callable[..., Result]) -> None:
    from tests.helpers.platforms import REFERENCE_PLATFORM

    result = cli("preflight", "--platform", REFERENCE_PLATFORM, "--deployment", "nope")
    one_line_error(result, 2, "no deployment 'nope'")
    result = cli(
        "preflight", "--platform", REFERENCE_PLATFORM, "--availability-zones", "eu-west-1a"
    )
    one_line_error(result, 2, "must be zones of us-east-1")


def test_console_script_exits_2_without_traceback(tmp_path: Path) -> None:
    """The real entry point, as a shell runs it (``python -m eks_inference``)."""
    completed = subprocess.run(
        [sys.executable, "-m", "eks_inference", "upload", str(tmp_path), "s3://bucket-name/x"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines() == [
        "error: 's3://bucket-name/x': the prefix 'x' must be a key prefix inside the bucket "
        "ending with '/', e.g. x/"
    ]
