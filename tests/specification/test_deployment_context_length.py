"""``max_model_len`` is bounded by the context each model supports (issue 13, item 11).

vLLM derives the longest ``max_model_len`` it accepts from the model's ``config.json``
(``max_position_embeddings``) and refuses a longer one at start-up on GPUs; the Neuron plugin
skips that check, so the model would be served past the positions it was trained on. The spec
refuses it first, for catalog models and explicit architectures alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from eks_inference.catalog import MODELS
from eks_inference.cli.main import app
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.errors import errors_by_field, errors_if_invalid, errors_of
from tests.helpers.platforms import REFERENCE_PLATFORM, reference

# config.json's max_position_embeddings of each catalog entry's Hugging Face model.
CONFIG_CONTEXT = {
    "llama-3-8b": 8192,
    "llama-3.1-70b": 131072,
    "mistral-7b": 32768,
    "qwen2.5-7b": 32768,
    "gemma-2-9b": 8192,
    "llama-3.1-405b": 131072,
    "llama-3.1-405b-fp8": 131072,
    "qwen3-coder-480b": 262144,
}

EXPLICIT_ARCHITECTURE: dict[str, Any] = {
    "family": "llama",
    "num_layers": 16,
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_kv_heads": 8,
    "vocab_size": 32000,
    "num_parameters": 1_000_000_000,
}


def gpu_deployment(model: Any, max_model_len: int) -> dict[str, Any]:
    return {
        "name": "context",
        "model": model,
        "instance_type": "g6e.48xlarge",
        "engine": "vllm",
        "tensor_parallel_size": 4,
        "limits": {"max_model_len": max_model_len, "max_num_seqs": 1},
        "weights": {"prefix": "models/m/"},
    }


def test_every_catalog_model_records_its_config_context() -> None:
    assert set(CONFIG_CONTEXT) == set(MODELS)
    for name, context in CONFIG_CONTEXT.items():
        assert MODELS[name].architecture.max_position_embeddings == context, name


@pytest.mark.parametrize(("model", "context"), sorted(CONFIG_CONTEXT.items()))
def test_max_model_len_up_to_the_model_context_and_no_further(model: str, context: int) -> None:
    # At its whole context a model may fail other rules (70B's KV cache does not fit TP 4).
    valid_length = errors_if_invalid(gpu_deployment(model, context), ModelDeploymentSpec)
    assert "limits.max_model_len" not in valid_length
    errors = errors_of(gpu_deployment(model, context + 1), ModelDeploymentSpec)
    assert errors["limits.max_model_len"] == (
        f"max_model_len {context + 1} exceeds the {context} tokens the model supports "
        f"(max_position_embeddings); set max_model_len <= {context}"
    )


def test_platform_file_reports_the_deployment_whose_context_is_too_long(tmp_path: Path) -> None:
    data = reference()
    qwen = next(d for d in data["deployments"] if d["model"] == "qwen2.5-7b")
    position = data["deployments"].index(qwen)
    # 131072 needs YaRN rope scaling, which Qwen2.5-7B-Instruct's config.json does not enable.
    qwen["limits"]["max_model_len"] = 131072
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValidationError) as raised:
        PlatformSpec.from_yaml(path)
    messages = errors_by_field(raised.value)
    assert "set max_model_len <= 32768" in messages[f"deployments.{position}.limits.max_model_len"]


def test_the_reference_platform_stays_within_every_model_context() -> None:
    platform = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
    for deployment in platform.deployments:
        arch = deployment.model.architecture
        assert deployment.limits.max_model_len <= arch.max_position_embeddings


def test_an_explicit_architecture_must_state_its_context() -> None:
    model = {"id": "example/small", "architecture": EXPLICIT_ARCHITECTURE}
    errors = errors_of(gpu_deployment(model, 2048), ModelDeploymentSpec)
    assert errors["model.architecture.max_position_embeddings"] == "Field required"


def test_an_explicit_architecture_bounds_max_model_len() -> None:
    architecture = {**EXPLICIT_ARCHITECTURE, "max_position_embeddings": 2048}
    model = {"id": "example/small", "architecture": architecture}
    ModelDeploymentSpec.model_validate(gpu_deployment(model, 2048))
    # The default max_model_len (4096) is longer than this model's context.
    raw = gpu_deployment(model, 2048)
    del raw["limits"]["max_model_len"]
    message = errors_of(raw, ModelDeploymentSpec)["limits.max_model_len"]
    assert "set max_model_len <= 2048" in message


@pytest.mark.parametrize(
    "extra",
    [("--instance-type", "inf2.48xlarge", "--tensor-parallel", "8"), ("--plot", "plot.png")],
)
def test_plan_refuses_a_context_the_model_does_not_support(
    extra: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        app, ["plan", "--model", "llama-3-8b", "--max-model-len", "16384", *extra]
    )
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr.splitlines() == [
        "error: max_model_len 16384 exceeds the 8192 tokens the model supports "
        "(max_position_embeddings); set max_model_len <= 8192"
    ]
    assert not (tmp_path / "plot.png").exists()
