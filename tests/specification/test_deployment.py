"""Every deployment rule, one bad spec per row: the error names the field and the fix."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from eks_inference.specification.deployment import ModelDeploymentSpec
from tests.helpers.errors import errors_of

# Explicit architecture whose KV heads (12) TP 8 neither divides nor is a multiple of.
_ODD_KV_MODEL = {
    "id": "example/odd-kv",
    "architecture": {
        "family": "llama",
        "num_layers": 24,
        "hidden_size": 3072,
        "num_attention_heads": 48,
        "num_kv_heads": 12,
        "vocab_size": 32000,
        "num_parameters": 3_000_000_000,
        "max_position_embeddings": 8192,
    },
}


def neuron_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "llama",
        "model": "llama-3-8b",
        "instance_type": "inf2.48xlarge",
        "engine": "rayservice",
        "tensor_parallel_size": 8,
        "scaling": {"min_replicas": 1, "max_replicas": 3},
        "weights": {"prefix": "models/llama/"},
        "neuron": {"compiled_artifacts_prefix": "neuron-artifacts/"},
    }
    spec.update(overrides)
    return spec


def gpu_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "mistral",
        "model": "mistral-7b",
        "instance_type": "g6e.2xlarge",
        "engine": "vllm",
        "tensor_parallel_size": 1,
        "weights": {"prefix": "models/mistral/", "loader": "runai_streamer"},
    }
    spec.update(overrides)
    return spec


BAD_SPECS = [
    pytest.param(gpu_spec(name="Mistral_7B"), "name", "pattern", id="name-not-dns-label"),
    pytest.param(gpu_spec(model="llama-4"), "model", "llama-3-8b", id="unknown-catalog-model"),
    pytest.param(gpu_spec(instance_type="m6i.xlarge"), "instance_type", "g6e", id="cpu-instance"),
    pytest.param(
        neuron_spec(tensor_parallel_size=12),
        "tensor_parallel_size",
        "valid: [1, 2, 4, 8, 24]",
        id="tp-not-on-topology",
    ),
    pytest.param(
        gpu_spec(model="qwen2.5-7b", instance_type="g6e.48xlarge", tensor_parallel_size=8),
        "tensor_parallel_size",
        "degrees that work for this model on g6e.48xlarge: [1, 2, 4]",
        id="gpu-tp-does-not-divide-heads",
    ),
    pytest.param(
        gpu_spec(model=_ODD_KV_MODEL, instance_type="g6e.48xlarge", tensor_parallel_size=8),
        "tensor_parallel_size",
        "12 KV heads",
        id="gpu-kv-head-rule",
    ),
    pytest.param(
        gpu_spec(model="llama-3.1-70b"),
        "tensor_parallel_size",
        "a larger instance type",
        id="weights-do-not-fit",
    ),
    pytest.param(
        neuron_spec(tensor_parallel_size=2, limits={"max_num_seqs": 64}),
        "tensor_parallel_size",
        "use tensor_parallel_size 4 or max_num_seqs <= 27",
        id="kv-cache-does-not-fit",
    ),
    pytest.param(
        neuron_spec(scaling={"min_replicas": 4, "max_replicas": 2}),
        "scaling.min_replicas",
        "set min_replicas <= max_replicas",
        id="min-above-max",
    ),
    pytest.param(
        gpu_spec(scaling={"min_replicas": 1, "max_replicas": 3}),
        "scaling.max_replicas",
        "engine: rayservice",
        id="standalone-vllm-cannot-autoscale",
    ),
    pytest.param(
        gpu_spec(engine="rayservice"),
        "weights.loader",
        "loader: mountpoint",
        id="runai-streamer-needs-standalone-vllm",
    ),
    pytest.param(
        neuron_spec(engine="vllm", weights={"prefix": "m/", "loader": "runai_streamer"}),
        "weights.loader",
        "loader: mountpoint",
        id="runai-streamer-needs-gpu",
    ),
    pytest.param(
        gpu_spec(limits={"block_size": 24}),
        "limits.block_size",
        "[1, 8, 16, 32, 64, 128, 256]",
        id="block-size",
    ),
    pytest.param(
        neuron_spec(
            neuron={"compiled_artifacts_prefix": "neuron/", "sequence_buckets": [128, 1000]}
        ),
        "neuron.sequence_buckets.1",
        "power of two",
        id="neuron-bucket-not-power-of-two",
    ),
    pytest.param(
        neuron_spec(neuron={}),
        "neuron.compiled_artifacts_prefix",
        "allow_compile_at_startup: true",
        id="neuron-needs-compiled-artifacts",
    ),
    pytest.param(
        neuron_spec(model="gemma-2-9b", tensor_parallel_size=8),
        "neuron.allow_poor_compile_architecture",
        "serve it on a GPU instance",
        id="gemma-on-neuron-needs-opt-in",
    ),
    pytest.param(
        gpu_spec(weights={"prefix": "models/mistral", "loader": "runai_streamer"}),
        "weights.prefix",
        "ending with '/'",
        id="weights-prefix-trailing-slash",
    ),
    pytest.param(
        gpu_spec(neuron={"compiled_artifacts_prefix": "neuron/"}),
        "neuron",
        "remove them",
        id="neuron-options-on-gpu",
    ),
    pytest.param(
        neuron_spec(neuron={"compiled_artifacts_prefix": "neuron"}),
        "neuron.compiled_artifacts_prefix",
        "ending with '/'",
        id="artifacts-prefix-trailing-slash",
    ),
]


@pytest.mark.parametrize(("spec", "field", "fix"), BAD_SPECS)
def test_bad_spec_names_field_and_fix(spec: dict[str, Any], field: str, fix: str) -> None:
    messages = errors_of(spec, ModelDeploymentSpec)
    assert field in messages, messages
    assert fix in messages[field]


def test_every_problem_is_reported_at_once() -> None:
    spec = neuron_spec(
        tensor_parallel_size=3,
        limits={"block_size": 7},
        weights={"prefix": "models/llama", "loader": "runai_streamer"},
        neuron={},
    )
    assert set(errors_of(spec, ModelDeploymentSpec)) == {
        "tensor_parallel_size",
        "limits.block_size",
        "weights.prefix",
        "weights.loader",
        "neuron.compiled_artifacts_prefix",
    }


def test_invalid_tensor_parallel_is_not_also_sized() -> None:
    with pytest.raises(ValidationError) as raised:
        ModelDeploymentSpec.model_validate(neuron_spec(tensor_parallel_size=3))
    assert len(raised.value.errors()) == 1


def test_valid_specs_derive_placement_numbers() -> None:
    neuron = ModelDeploymentSpec.model_validate(neuron_spec(scaling={"max_replicas": 4}))
    assert neuron.replicas_per_node == 3
    assert neuron.max_nodes == 2
    assert neuron.nodes_during_rollout == 2  # 4 workers + a new cluster's 1 still fit 2 nodes
    assert neuron.target_ongoing_requests == 24
    gpu = ModelDeploymentSpec.model_validate(gpu_spec())
    assert gpu.model.id == "mistralai/Mistral-7B-Instruct-v0.1"
    assert gpu.replicas_per_node == 1


def test_compile_at_startup_and_gemma_opt_in_are_explicit() -> None:
    spec = ModelDeploymentSpec.model_validate(
        neuron_spec(
            model="gemma-2-9b",
            neuron={"allow_compile_at_startup": True, "allow_poor_compile_architecture": True},
        )
    )
    assert spec.neuron_options.compiled_artifacts_prefix is None


def test_json_schema_documents_the_fields() -> None:
    schema = ModelDeploymentSpec.model_json_schema()
    assert {"name", "model", "instance_type", "engine", "weights"} <= set(schema["properties"])
    assert set(schema["required"]) == {"name", "model", "instance_type", "weights"}
