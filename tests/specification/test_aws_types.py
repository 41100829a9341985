"""A prefix is granted as an IAM pattern, so no prefix may hold a pattern character of its own.

Every place that takes a key prefix or an S3 URI goes through the one rule in
:func:`eks_inference.specification.aws_types.key_prefix_problem`: the deployment spec
(``weights.prefix``,
``neuron.compiled_artifacts_prefix``), the model bucket's grants, Mountpoint volumes and the
CLI's ``s3://`` URIs (``upload``, and ``preflight`` through the platform file).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from typer.testing import CliRunner

from eks_inference.charts.mountpoint import MountpointVolume
from eks_inference.cli.main import app as cli_app
from eks_inference.constructs.model_bucket import ModelBucket
from eks_inference.ops.errors import BadInput
from eks_inference.ops.s3uri import parse_prefix_uri
from eks_inference.specification.aws_types import key_prefix_problem, suggested_key_prefix
from tests.helpers.errors import errors_of
from tests.helpers.platforms import reference

# '*' and '?' are IAM wildcards, '${...}' a policy variable.
PATTERN_PREFIXES = ["*/", "models/*/", "models/llama*/", "models/${aws:username}/", "{x}/"]
INFERENTIA = 0  # the reference platform's Inferentia2 deployment, which compiles artifacts


@pytest.mark.parametrize("prefix", PATTERN_PREFIXES)
def test_a_weights_prefix_with_an_iam_pattern_character_is_refused(prefix: str) -> None:
    data = reference()
    data["deployments"][1]["weights"]["prefix"] = prefix
    message = errors_of(data)["deployments.1.weights.prefix"]
    assert message.startswith(f"prefix {prefix!r} has ")
    assert "which IAM reads as a wildcard or policy variable" in message
    assert "write the prefix literally, e.g. " in message


@pytest.mark.parametrize("prefix", PATTERN_PREFIXES)
def test_a_compiled_artifacts_prefix_with_an_iam_pattern_character_is_refused(prefix: str) -> None:
    data = reference()
    data["deployments"][INFERENTIA]["neuron"]["compiled_artifacts_prefix"] = prefix
    errors = errors_of(data)
    message = errors[f"deployments.{INFERENTIA}.neuron.compiled_artifacts_prefix"]
    assert message.startswith(f"compiled artifacts prefix {prefix!r} has ")
    assert "which IAM reads as a wildcard or policy variable" in message


def test_the_suggested_prefix_drops_the_pattern_characters() -> None:
    assert suggested_key_prefix("models/*/") == "models/"
    assert suggested_key_prefix("models/llama*/") == "models/llama/"
    assert suggested_key_prefix("*/") == ""
    # With nothing left to suggest, the message still shows a literal prefix.
    assert key_prefix_problem("*/", name="prefix") == (
        "prefix '*/' has '*', which IAM reads as a wildcard or policy variable, so the grant "
        "would reach other prefixes; write the prefix literally, e.g. models/llama-3-8b/"
    )


@pytest.mark.parametrize("grant", ["grant_read_prefix", "grant_write_prefix"])
@pytest.mark.parametrize("prefix", PATTERN_PREFIXES)
def test_the_model_bucket_grants_no_prefix_with_an_iam_pattern_character(
    grant: str, prefix: str
) -> None:
    stack = Stack(App(), "Grants")
    bucket = ModelBucket(stack, "Models")
    role = iam.Role(stack, "Reader", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    with pytest.raises(ValueError, match="which IAM reads as a wildcard or policy variable"):
        getattr(bucket, grant)(role, prefix)


@pytest.mark.parametrize("prefix", PATTERN_PREFIXES)
def test_a_mountpoint_volume_refuses_a_prefix_with_an_iam_pattern_character(prefix: str) -> None:
    with pytest.raises(ValueError, match=r"Mountpoint prefix .* which IAM reads as a wildcard"):
        MountpointVolume(
            name="weights",
            bucket_name="eks-inference-models-example",
            region="us-east-1",
            prefix=prefix,
            cache_size_gib=4,
        )


@pytest.mark.parametrize("prefix", PATTERN_PREFIXES)
def test_an_s3_uri_with_an_iam_pattern_character_is_refused(prefix: str) -> None:
    with pytest.raises(BadInput, match="which IAM reads as a wildcard or policy variable"):
        parse_prefix_uri(f"s3://eks-inference-models-example/{prefix}")


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """AWS calls, should any be made, go to a closed port of 127.0.0.1 with fake credentials."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.mark.usefixtures("no_aws")
def test_upload_to_a_wildcard_prefix_exits_2_with_one_line(tmp_path: Path) -> None:
    # A model directory the uploader accepts, so that only the URI can be refused.
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    result = CliRunner().invoke(
        cli_app, ["upload", str(tmp_path), "s3://eks-inference-models-example/*/"]
    )
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.output.splitlines() if line.strip()]
    assert "'*/' has '*', which IAM reads as a wildcard" in line


@pytest.mark.usefixtures("no_aws")
def test_preflight_of_a_platform_with_a_wildcard_prefix_exits_2_with_one_line(
    tmp_path: Path,
) -> None:
    data = reference()
    data["deployments"][1]["weights"]["prefix"] = "models/*/"
    platform_file = tmp_path / "platform.yaml"
    platform_file.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(cli_app, ["preflight", "--platform", str(platform_file)])
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.output.splitlines() if line.strip()]
    assert "deployments.1.weights.prefix" in line
    assert "which IAM reads as a wildcard" in line


def test_names_below_a_prefix_may_hold_iam_pattern_characters() -> None:
    # Only the granted prefix is read as a pattern: the uploader keeps such file names.
    from eks_inference.specification.aws_types import key_characters_problem

    assert key_characters_problem("shard*1.safetensors") is None
    assert key_characters_problem("a?b") == "has a control character, '?', '#' or '\\'"
