"""``preflight`` against the S3/EC2 emulator, with Service Quotas stubbed as AWS answers it.

The emulator does not implement EC2's quotas in Service Quotas, so those responses come from
botocore's ``Stubber``, shaped exactly like GetServiceQuota's real answers; the stubber also
checks that each quota is asked for by its exact code.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from botocore.stub import Stubber  # type: ignore[import-untyped]
from typer.testing import Result

from eks_inference.catalog import INSTANCE_TYPES
from eks_inference.cli.inputs import load_platform
from eks_inference.ops.quotas import vcpu_quota
from eks_inference.specification.artifacts import artifact_prefix, completion_marker_key
from tests.helpers.platforms import REFERENCE_PLATFORM

from .conftest import REGION, ApiCalls

Cli = Callable[..., Result]
PLATFORM = load_platform(REFERENCE_PLATFORM)
BUCKET = PLATFORM.model_bucket_name
LLAMA = PLATFORM.deployment("llama3-8b-inf2")
STANDARD = ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")
INF = ("L-1945791B", "Running On-Demand Inf instances")
G_AND_VT = ("L-DB2E81BA", "Running On-Demand G and VT instances")


@pytest.fixture(autouse=True)
def _wide_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wide enough that no detail cell wraps, so each check is one line to search."""
    monkeypatch.setenv("COLUMNS", "400")


def quota_response(code: str, name: str, value: float) -> dict[str, Any]:
    """A GetServiceQuota answer as AWS returns it for an EC2 vCPU quota."""
    return {
        "Quota": {
            "ServiceCode": "ec2",
            "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaArn": f"arn:aws:servicequotas:{REGION}:123456789012:ec2/{code}",
            "QuotaCode": code,
            "QuotaName": name,
            "Value": value,
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
            "UsageMetric": {
                "MetricNamespace": "AWS/Usage",
                "MetricName": "ResourceCount",
                "MetricDimensions": {
                    "Class": "Standard/OnDemand",
                    "Resource": "vCPU",
                    "Service": "EC2",
                    "Type": "Resource",
                },
                "MetricStatisticRecommendation": "Maximum",
            },
            "QuotaAppliedAtLevel": "ACCOUNT",
        }
    }


@pytest.fixture
def quotas(api_calls: ApiCalls) -> Iterator[Stubber]:
    """A stubbed Service Quotas client that the CLI uses instead of a real one."""
    client = boto3.client("service-quotas", region_name=REGION)
    api_calls.clients["service-quotas"] = client
    with Stubber(client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


def expect_quota(stubber: Stubber, quota: tuple[str, str], value: float) -> None:
    code, name = quota
    stubber.add_response(
        "get_service_quota",
        quota_response(code, name, value),
        {"ServiceCode": "ec2", "QuotaCode": code},
    )


def expect_reference_quotas(stubber: Stubber, inf: float = 576) -> None:
    """Quotas in pool order: system (4 x 8 vCPUs), inf2 (2 x 192), g6e (6 x 8)."""
    expect_quota(stubber, STANDARD, 640)
    expect_quota(stubber, INF, inf)
    expect_quota(stubber, G_AND_VT, 64)


def upload_weights(cli: Cli, tmp_path: Path, prefix: str) -> None:
    root = tmp_path / prefix.strip("/").replace("/", "_")
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (root / "model.safetensors").write_bytes(os.urandom(4096))
    result = cli("upload", root, f"s3://{BUCKET}/{prefix}")
    assert result.exit_code == 0, result.stderr


def put_artifacts(s3: Any, marker: bool = True) -> None:
    prefix = artifact_prefix(LLAMA)
    s3.put_object(Bucket=BUCKET, Key=prefix + "model.pt", Body=os.urandom(1024))
    s3.put_object(Bucket=BUCKET, Key=prefix + "neuron_config.json", Body=b"{}")
    if marker:
        s3.put_object(Bucket=BUCKET, Key=completion_marker_key(LLAMA), Body=b"")


@pytest.fixture
def ready(cli: Cli, s3: Any, api_calls: ApiCalls, tmp_path: Path) -> None:
    """An account with the bucket, every deployment's weights and llama's artifacts."""
    s3.create_bucket(Bucket=BUCKET)
    for spec in PLATFORM.deployments:
        upload_weights(cli, tmp_path, spec.weights.prefix)
    put_artifacts(s3)


def rows(result: Result) -> list[str]:
    return [line for line in result.stdout.splitlines() if "PASS" in line or "FAIL" in line]


def failing(result: Result) -> list[str]:
    return [line for line in rows(result) if "FAIL" in line]


def test_passes_when_the_account_is_ready(cli: Cli, ready: None, quotas: Stubber) -> None:
    expect_reference_quotas(quotas)
    result = cli("preflight", "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert failing(result) == []
    text = result.stdout
    assert "Preflight: 11 passed, 0 failed" in text
    assert f"s3://{BUCKET} exists" in text
    assert "completion marker present" in text
    assert "inf2.48xlarge offered" in text
    assert "Running On-Demand Inf instances (L-1945791B): 576 vCPUs >= 576 needed" in text
    assert "\x1b[" not in text


def test_fails_naming_missing_weights_artifacts_and_objects(
    cli: Cli, s3: Any, api_calls: ApiCalls, tmp_path: Path, quotas: Stubber
) -> None:
    s3.create_bucket(Bucket=BUCKET)
    upload_weights(cli, tmp_path, "models/llama-3-8b/")
    upload_weights(cli, tmp_path, "models/mistral-7b/")
    s3.delete_object(Bucket=BUCKET, Key="models/mistral-7b/model.safetensors")
    put_artifacts(s3, marker=False)
    expect_reference_quotas(quotas)
    result = cli("preflight", "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: 3 of 11 preflight checks failed"
    text = " ".join(result.stdout.split())
    assert f"s3://{BUCKET}/models/qwen2.5-7b/_manifest.json missing" in text
    assert (
        f"1 of 2 objects listed in the manifest are missing under s3://{BUCKET}/"
        "models/mistral-7b/: model.safetensors" in text
    )
    assert f"completion marker s3://{BUCKET}/{completion_marker_key(LLAMA)} missing" in text


def test_artifacts_uploaded_by_the_cli_pass(
    cli: Cli, s3: Any, api_calls: ApiCalls, tmp_path: Path, quotas: Stubber
) -> None:
    s3.create_bucket(Bucket=BUCKET)
    upload_weights(cli, tmp_path, LLAMA.weights.prefix)
    compiled = tmp_path / "compiled"
    compiled.mkdir()
    (compiled / "model.pt").write_bytes(os.urandom(2048))
    (compiled / "neuron_config.json").write_text("{}")
    uri = f"s3://{BUCKET}/{artifact_prefix(LLAMA)}"
    assert cli("upload", compiled, uri, "--kind", "artifacts").exit_code == 0
    expect_reference_quotas(quotas)
    result = cli("preflight", "--platform", REFERENCE_PLATFORM, "--deployment", LLAMA.name)
    assert result.exit_code == 0, result.stdout
    assert "2 objects, 2.0 KiB, completion marker present" in result.stdout

    # An object listed in the upload manifest that went missing fails the check.
    s3.delete_object(Bucket=BUCKET, Key=artifact_prefix(LLAMA) + "model.pt")
    expect_reference_quotas(quotas)
    result = cli("preflight", "--platform", REFERENCE_PLATFORM, "--deployment", LLAMA.name)
    assert result.exit_code == 1
    assert "1 of 2 objects listed in the manifest are missing" in result.stdout
    assert "model.pt" in result.stdout


def test_one_deployment_only(cli: Cli, ready: None, quotas: Stubber) -> None:
    expect_reference_quotas(quotas)
    result = cli("preflight", "--platform", REFERENCE_PLATFORM, "--deployment", "qwen25-7b-g6e")
    assert result.exit_code == 0, result.stdout
    assert "qwen25-7b-g6e" in result.stdout
    assert "llama3-8b-inf2" not in result.stdout


def test_missing_bucket_fails_every_s3_check(
    cli: Cli, api_calls: ApiCalls, quotas: Stubber
) -> None:
    expect_reference_quotas(quotas)
    result = cli("preflight", "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 1
    text = " ".join(result.stdout.split())
    assert f"bucket {BUCKET} does not exist" in text
    # The bucket, three deployments' weights and llama's artifacts.
    assert len(failing(result)) == 5


def test_instance_type_not_offered_in_the_zones(cli: Cli, ready: None, quotas: Stubber) -> None:
    """us-east-1d offers g6e and m6i but not inf2 (per the emulator's EC2 offering data)."""
    expect_reference_quotas(quotas)
    result = cli(
        "preflight", "--platform", REFERENCE_PLATFORM, "--availability-zones", "us-east-1d"
    )
    assert result.exit_code == 1
    [row] = failing(result)
    assert "inf2.48xlarge is not offered in any of us-east-1d (us-east-1)" in row
    assert "g6e.2xlarge offered" in result.stdout


def test_region_without_the_accelerators(
    cli: Cli, ready: None, quotas: Stubber, tmp_path: Path
) -> None:
    platform = tmp_path / "west.yaml"
    platform.write_text(REFERENCE_PLATFORM.read_text().replace("us-east-1", "us-west-1"))
    expect_reference_quotas(quotas)
    result = cli("preflight", "--platform", platform)
    assert result.exit_code == 1
    text = " ".join(result.stdout.split())
    assert "inf2.48xlarge is not offered in any of us-west-1a, us-west-1b (us-west-1)" in text
    assert "g6e.2xlarge is not offered in any of us-west-1a, us-west-1b (us-west-1)" in text
    [cpu] = [row for row in rows(result) if "m6i.2xlarge offered" in row]
    assert "PASS" in cpu
    assert "offered in us-west-1a, us-west-1b" in cpu


def test_quota_too_small(cli: Cli, ready: None, quotas: Stubber) -> None:
    expect_reference_quotas(quotas, inf=192)
    result = cli("preflight", "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 1
    [row] = failing(result)
    text = " ".join(result.stdout.split())
    assert "vCPU quota" in row
    assert (
        "Running On-Demand Inf instances (L-1945791B) is 192 vCPUs but the node pools need 576 "
        "at max_size (inf2: 3 x 192); request an increase of L-1945791B" in text
    )


def test_default_quota_when_none_is_applied_and_spot_codes(
    cli: Cli, ready: None, quotas: Stubber, tmp_path: Path
) -> None:
    platform = tmp_path / "spot.yaml"
    platform.write_text(
        REFERENCE_PLATFORM.read_text().replace(
            "instance_types: [inf2.48xlarge]",
            "instance_types: [inf2.48xlarge]\n    capacity_type: SPOT",
        )
    )
    expect_quota(quotas, STANDARD, 640)
    code, name = "L-B5D1601B", "All Inf Spot Instance Requests"
    quotas.add_client_error(
        "get_service_quota",
        "NoSuchResourceException",
        "The request failed because the specified service quota does not exist.",
        expected_params={"ServiceCode": "ec2", "QuotaCode": code},
    )
    quotas.add_response(
        "get_aws_default_service_quota",
        quota_response(code, name, 64),
        {"ServiceCode": "ec2", "QuotaCode": code},
    )
    expect_quota(quotas, G_AND_VT, 64)
    result = cli("preflight", "--platform", platform)
    assert result.exit_code == 1
    text = " ".join(result.stdout.split())
    assert (
        "All Inf Spot Instance Requests (L-B5D1601B) is 64 vCPUs but the node pools need 576"
        in text
    )


def test_quota_access_denied_names_the_quota(cli: Cli, ready: None, quotas: Stubber) -> None:
    expect_quota(quotas, STANDARD, 640)
    quotas.add_client_error("get_service_quota", "AccessDeniedException", "not authorized")
    expect_quota(quotas, G_AND_VT, 64)
    result = cli("preflight", "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 1
    text = " ".join(result.stdout.split())
    assert "cannot read Running On-Demand Inf instances (L-1945791B): access denied" in text


@pytest.mark.parametrize(
    ("instance", "capacity", "code"),
    [
        ("inf2.48xlarge", "ON_DEMAND", "L-1945791B"),
        ("inf2.xlarge", "SPOT", "L-B5D1601B"),
        ("g6e.2xlarge", "ON_DEMAND", "L-DB2E81BA"),
        ("g6e.48xlarge", "SPOT", "L-3819A6DF"),
        ("g5.12xlarge", "ON_DEMAND", "L-DB2E81BA"),
        ("p4d.24xlarge", "ON_DEMAND", "L-417A185B"),
        ("p4d.24xlarge", "SPOT", "L-7212CCBC"),
        ("m6i.2xlarge", "ON_DEMAND", "L-1216C47A"),
        ("m7i.xlarge", "SPOT", "L-34B43A08"),
    ],
)
def test_quota_codes(instance: str, capacity: Any, code: str) -> None:
    assert vcpu_quota(INSTANCE_TYPES[instance], capacity).code == code


def test_every_catalog_instance_has_a_quota() -> None:
    for instance in INSTANCE_TYPES.values():
        for capacity in ("ON_DEMAND", "SPOT"):
            assert vcpu_quota(instance, capacity).code.startswith("L-")
