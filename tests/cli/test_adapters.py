"""LoRA adapters in the bucket: ``upload --kind adapter`` puts an adapter folder under the
deployment's adapters prefix, and ``preflight`` reads each ``adapter_config.json`` back from
the S3 emulator and refuses one that does not fit the deployment, one line and exit 2 each."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.stub import Stubber  # type: ignore[import-untyped]
from typer.testing import Result

from eks_inference.charts.model_server import MODEL_MOUNT_PATH
from eks_inference.cli.inputs import load_platform
from eks_inference.ops.upload.manifest import MANIFEST_NAME
from tests.helpers.errors import one_line_error
from tests.helpers.platforms import EXAMPLES_DIR, platform_data

from .conftest import ApiCalls
from .test_preflight import G_AND_VT, STANDARD, expect_quota, quotas, upload_weights

Cli = Callable[..., Result]
EXAMPLE = EXAMPLES_DIR / "lora-adapters.yaml"
PLATFORM = load_platform(EXAMPLE)
BUCKET = PLATFORM.model_bucket_name
(SPEC,) = PLATFORM.deployments
assert SPEC.adapters is not None
ADAPTERS = SPEC.adapters
# What PEFT's save_pretrained writes for a rank-8 adapter of the attention projections.
__all__ = ["quotas"]  # the stubbed Service Quotas fixture of the preflight tests
PEFT_CONFIG: dict[str, Any] = {
    "peft_type": "LORA",
    "base_model_name_or_path": SPEC.model.id,
    "r": 8,
    "lora_alpha": 16,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "task_type": "CAUSAL_LM",
}


@pytest.fixture(autouse=True)
def _wide_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")


def adapter_folder(tmp_path: Path, name: str, **changes: Any) -> Path:
    folder = tmp_path / "adapters" / name
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({**PEFT_CONFIG, **changes}))
    (folder / "adapter_model.safetensors").write_bytes(os.urandom(2048))
    return folder


def upload_adapter(cli: Cli, tmp_path: Path, name: str, **changes: Any) -> Result:
    """Upload adapter ``name``; an on-demand one names the server's model path as its base, as
    vLLM's filesystem resolver needs (docs/lora-adapters.md)."""
    if name in ADAPTERS.on_demand:
        changes = {"base_model_name_or_path": MODEL_MOUNT_PATH, **changes}
    folder = adapter_folder(tmp_path, name, **changes)
    return cli("upload", folder, f"s3://{BUCKET}/{ADAPTERS.folder(name)}", "--kind", "adapter")


def expect_quotas(quotas: Stubber) -> None:
    """The example's pools in order: system (3 x 4 vCPUs), g6e-2 (2 x 8)."""
    expect_quota(quotas, STANDARD, 640)
    expect_quota(quotas, G_AND_VT, 64)


@pytest.fixture
def uploaded(cli: Cli, s3: Any, api_calls: ApiCalls, tmp_path: Path) -> None:
    """The bucket with the weights and every adapter of the example, each uploaded by the CLI."""
    s3.create_bucket(Bucket=BUCKET)
    upload_weights(cli, tmp_path, SPEC.weights.prefix)
    for name in ADAPTERS.names:
        result = upload_adapter(cli, tmp_path, name)
        assert result.exit_code == 0, result.stderr


def test_upload_puts_an_adapter_folder_under_the_prefix(cli: Cli, s3: Any, uploaded: None) -> None:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=ADAPTERS.prefix)["Contents"]
    keys = {item["Key"] for item in listed}
    for name in ADAPTERS.names:
        folder = f"{ADAPTERS.prefix}{name}/"
        assert {f"{folder}adapter_config.json", f"{folder}adapter_model.safetensors"} <= keys
        assert f"{folder}{MANIFEST_NAME}" in keys
    body = s3.get_object(Bucket=BUCKET, Key=f"{ADAPTERS.folder('support-tone')}adapter_config.json")
    assert json.loads(body["Body"].read()) == PEFT_CONFIG


def test_upload_refuses_a_folder_that_is_not_an_adapter(cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "not-an-adapter"
    folder.mkdir()
    (folder / "adapter_model.safetensors").write_bytes(b"x")
    result = cli("upload", folder, f"s3://{BUCKET}/{ADAPTERS.folder('x')}", "--kind", "adapter")
    one_line_error(result, 2, "does not look like a LoRA adapter", "no adapter_config.json")


def test_preflight_passes_with_every_adapter_uploaded(
    cli: Cli, uploaded: None, quotas: Stubber
) -> None:
    expect_quotas(quotas)
    result = cli("preflight", "--platform", EXAMPLE)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert f"s3://{BUCKET}/{ADAPTERS.prefix}: 3 adapters" in result.stdout
    assert "3 configs fit the deployment" in result.stdout


def test_preflight_fails_a_missing_adapter_like_missing_weights(
    cli: Cli, s3: Any, api_calls: ApiCalls, tmp_path: Path, quotas: Stubber
) -> None:
    s3.create_bucket(Bucket=BUCKET)
    upload_weights(cli, tmp_path, SPEC.weights.prefix)
    assert upload_adapter(cli, tmp_path, "support-tone").exit_code == 0
    expect_quotas(quotas)
    result = cli("preflight", "--platform", EXAMPLE)
    assert result.exit_code == 1
    folder = ADAPTERS.folder("sql-writer")
    assert f"s3://{BUCKET}/{folder}adapter_config.json missing" in result.stdout
    assert f"eks-inference upload DIR s3://{BUCKET}/{folder} --kind adapter" in result.stdout


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"base_model_name_or_path": "mistralai/Mistral-7B-Instruct-v0.1"},
            (
                "base_model_name_or_path is 'mistralai/Mistral-7B-Instruct-v0.1'",
                f"not the deployment's model '{SPEC.model.id}'",
            ),
        ),
        (
            {"r": 64},
            ("r 64 exceeds adapters.max_lora_rank 16", "set adapters.max_lora_rank to 64"),
        ),
        (
            {"target_modules": ["q_proj", "mlp.experts.0.w1"]},
            ("target_modules 'mlp.experts.0.w1' are not modules vllm applies adapters to",),
        ),
    ],
)
def test_preflight_refuses_an_adapter_that_does_not_fit_the_deployment(
    cli: Cli,
    s3: Any,
    api_calls: ApiCalls,
    tmp_path: Path,
    quotas: Stubber,
    changes: dict[str, Any],
    expected: tuple[str, ...],
) -> None:
    s3.create_bucket(Bucket=BUCKET)
    upload_weights(cli, tmp_path, SPEC.weights.prefix)
    wrong_one = "support-tone"  # preloaded; on-demand adapters are checked below
    for name in ADAPTERS.names:
        wrong = changes if name == wrong_one else {}
        assert upload_adapter(cli, tmp_path, name, **wrong).exit_code == 0
    expect_quotas(quotas)
    result = cli("preflight", "--platform", EXAMPLE)
    line = one_line_error(
        result, 2, f"deployment {SPEC.name}: adapter '{wrong_one}'", "adapter_config.json"
    )
    for text in expected:
        assert text in line
    assert "sql-writer" not in line
    assert "legal-summary" not in line


def test_preflight_refuses_an_on_demand_adapter_vllm_would_never_find(
    cli: Cli, s3: Any, api_calls: ApiCalls, tmp_path: Path, quotas: Stubber
) -> None:
    """vLLM's filesystem resolver loads an on-demand adapter only if its base model is the
    server's model path: one naming the Hugging Face id is refused with the value to set."""
    s3.create_bucket(Bucket=BUCKET)
    upload_weights(cli, tmp_path, SPEC.weights.prefix)
    for name in ADAPTERS.names:
        base = {"base_model_name_or_path": SPEC.model.id} if name == "legal-summary" else {}
        assert upload_adapter(cli, tmp_path, name, **base).exit_code == 0
    expect_quotas(quotas)
    one_line_error(
        cli("preflight", "--platform", EXAMPLE),
        2,
        "adapter 'legal-summary'",
        f"not '{MODEL_MOUNT_PATH}' as an on-demand adapter of '{SPEC.model.id}' needs",
        f"set base_model_name_or_path to '{MODEL_MOUNT_PATH}'",
        "or list it under preload",
    )


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"engine": "rayservice"},
            (
                "deployments.0.adapters: engine rayservice",
                "does not serve LoRA adapters",
                "or use engine: vllm or kserve",
            ),
        ),
        (
            {
                "adapters": {
                    **ADAPTERS.model_dump(),
                    "max_loras": 10,
                    "max_cpu_loras": 10,
                    "max_lora_rank": 512,
                }
            },
            ("deployments.0.adapters.max_loras:", "leaving no KV cache", "use max_loras <= 9"),
        ),
        (
            {"adapters": {**ADAPTERS.model_dump(), "max_lora_rank": 48}},
            (
                "deployments.0.adapters.max_lora_rank:",
                "max_lora_rank 48 is not a rank vLLM accepts; use one of [1, 8, 16, 32, 64",
            ),
        ),
    ],
)
def test_bad_adapters_are_one_line_naming_the_field_and_the_fix(
    cli: Cli, tmp_path: Path, changes: dict[str, Any], expected: tuple[str, ...]
) -> None:
    data = platform_data(EXAMPLE)
    data["deployments"][0].update(changes)
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data))
    one_line_error(cli("plan", "--platform", path), 2, *expected)


def test_plan_prints_the_slots_and_the_kv_tokens_they_cost(cli: Cli) -> None:
    """On one L40S the 4 slots of rank 16 take 369,426,432 bytes (see
    ``tests/catalog/test_sizing_adapters.py``): 2,818 tokens of KV cache at 131,072 bytes a
    token, leaving 204,239 of the 207,057 the weights leave."""
    result = cli("plan", "--platform", EXAMPLE, "--json")
    assert result.exit_code == 0, result.stderr
    (planned,) = json.loads(result.stdout)["deployments"]
    assert planned["adapters"] == {
        "adapters": 3,
        "slots": 4,
        "max_lora_rank": 16,
        "gib": 369_426_432 / 1024**3,
        "kv_tokens": 204_239,
        "kv_tokens_cost": 2_818,
        "cpu_loras": 8,
        "cpu_gib": 8 * 92_356_608 / 1024**3,
    }
    table = cli("plan", "--platform", EXAMPLE)
    assert "LoRA adapter slots (per replica)" in table.stdout
    assert "204,239" in table.stdout
