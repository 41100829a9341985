"""Small pure pieces: S3 URIs, byte formatting, compact validation errors."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from eks_inference.cli.main import app
from eks_inference.ops.errors import summarize_validation_error
from eks_inference.ops.s3uri import S3Prefix, parse_prefix_uri
from eks_inference.ops.text import format_bytes, plural
from eks_inference.specification.deployment import ModelDeploymentSpec


def test_parse_prefix_uri() -> None:
    target = parse_prefix_uri("s3://my-models.example/models/llama-3-8b/")
    assert target == S3Prefix("my-models.example", "models/llama-3-8b/")
    assert target.key("config.json") == "models/llama-3-8b/config.json"
    assert target.relative("models/llama-3-8b/a/b.bin") == "a/b.bin"
    assert str(target) == "s3://my-models.example/models/llama-3-8b/"


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1536, "1.5 KiB"),
        (11 * 1024**2, "11.0 MiB"),
        (16 * 1024**3, "16.0 GiB"),
    ],
)
def test_format_bytes(size: int, text: str) -> None:
    assert format_bytes(size) == text


def test_plural() -> None:
    assert plural(1, "file") == "1 file"
    assert plural(0, "file") == "0 files"


def test_validation_summary_is_one_line_with_paths() -> None:
    with pytest.raises(ValidationError) as caught:
        ModelDeploymentSpec.model_validate(
            {
                "name": "ok",
                "model": "llama-3-8b",
                "instance_type": "g6e.xlarge",
                "tensor_parallel_size": 3,
                "weights": {"prefix": "no-slash"},
            }
        )
    summary = summarize_validation_error(caught.value)
    assert "\n" not in summary
    assert summary.startswith("weights.prefix: prefix 'no-slash' must be a key prefix")
    assert "; tensor_parallel_size: tensor_parallel_size 3 is not supported" in summary


@pytest.mark.parametrize(
    ("kind", "field"), [("deployment", "tensor_parallel_size"), ("platform", "node_pools")]
)
def test_schema_command_prints_the_json_schema(kind: str, field: str) -> None:
    result = CliRunner().invoke(app, ["schema", kind])
    assert result.exit_code == 0, result.output
    assert field in json.loads(result.output)["properties"]
