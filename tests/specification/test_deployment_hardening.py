"""Spec rules that report every problem with the right fix (issue 13, items 7-10).

Item 7: ``neuron.overrides`` holds only NeuronConfig keys the library passes on Inf2, with
their types. Item 8: the spec's integers have sane ranges. Item 9: a field error never hides
the rules of other fields. Item 10: the messages point at the fix that works.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from eks_inference.catalog import INSTANCE_TYPES, MODELS, sizing
from eks_inference.specification.artifacts import override_neuron_config
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.neuron_overrides import ALLOWED_KEYS
from eks_inference.specification.node_pools import NodePool
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.errors import errors_by_field, errors_of
from tests.helpers.platforms import reference, reference_deployment


def from_yaml_errors(tmp_path: Path, data: dict[str, Any]) -> dict[str, str]:
    """The errors of ``PlatformSpec.from_yaml`` for ``data`` written as a platform file."""
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ValidationError) as raised:
        PlatformSpec.from_yaml(path)
    return errors_by_field(raised.value)


def with_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    return reference_deployment(
        0, neuron={**reference_deployment(0)["neuron"], "overrides": overrides}
    )


# Item 7: overrides are NeuronConfig keys, with NeuronConfig's types.


def test_an_unknown_override_is_refused_through_the_platform_file(tmp_path: Path) -> None:
    data = reference()
    data["deployments"][0]["neuron"]["overrides"] = {"fuzed_qkv": True}
    errors = from_yaml_errors(tmp_path, data)
    message = errors["deployments.0.neuron.overrides.fuzed_qkv"]
    assert "'fuzed_qkv' is not an override" in message
    assert "fused_qkv" in message


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ("tp_degree", "tensor_parallel_size"),
        ("batch_size", "limits.max_num_seqs"),
        ("seq_len", "limits.max_model_len"),
        ("max_context_length", "limits.max_model_len"),
        ("torch_dtype", "model.architecture.dtype"),
    ],
)
def test_an_override_of_what_the_spec_sets_names_the_field(key: str, field: str) -> None:
    message = errors_of(with_overrides({key: 8}), ModelDeploymentSpec)[f"neuron.overrides.{key}"]
    assert message.startswith(f"'{key}' is set from ")
    assert field in message


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"fused_qkv": "yes"}, "neuron.overrides.fused_qkv"),
        ({"fused_qkv": 1}, "neuron.overrides.fused_qkv"),
        ({"context_encoding_buckets": [128, 256.5]}, "neuron.overrides.context_encoding_buckets.1"),
        ({"token_generation_buckets": [0]}, "neuron.overrides.token_generation_buckets.0"),
        (
            {"on_device_sampling_config": {"top_k": 0}},
            "neuron.overrides.on_device_sampling_config.top_k",
        ),
        (
            {"on_device_sampling_config": {"topk": 5}},
            "neuron.overrides.on_device_sampling_config.topk",
        ),
        ({"attention_dtype": "int8"}, "neuron.overrides.attention_dtype"),
        (
            {"weights_to_skip_layout_optimization": "lm_head"},
            "neuron.overrides.weights_to_skip_layout_optimization",
        ),
    ],
)
def test_an_override_of_the_wrong_type_is_refused(overrides: dict[str, Any], field: str) -> None:
    assert field in errors_of(with_overrides(overrides), ModelDeploymentSpec)


def test_allowed_overrides_reach_the_neuron_plugin_unchanged() -> None:
    overrides = {
        "fused_qkv": True,
        "sequence_parallel_enabled": True,
        "on_device_sampling_config": {"dynamic": True, "top_k": 50, "global_topk": 256},
        "cc_pipeline_tiling_factor": 1,
    }
    spec = ModelDeploymentSpec.model_validate(with_overrides(overrides))
    payload = override_neuron_config(spec)
    assert {key: payload[key] for key in overrides} == overrides
    assert set(overrides) <= set(ALLOWED_KEYS)


def test_override_buckets_beyond_max_model_len_are_refused() -> None:
    errors = errors_of(
        with_overrides({"context_encoding_buckets": [1024, 8192]}), ModelDeploymentSpec
    )
    assert (
        "buckets [8192] exceed max_model_len (4096)"
        in errors["neuron.overrides.context_encoding_buckets"]
    )


# Item 8: sane ranges for the spec's integers.


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (reference_deployment(1, limits={"max_model_len": 10**12}), "limits.max_model_len"),
        (reference_deployment(1, limits={"max_num_seqs": 10**9}), "limits.max_num_seqs"),
        (
            reference_deployment(1, scaling={"min_replicas": 10**6, "max_replicas": 10**6}),
            "scaling.max_replicas",
        ),
        (
            reference_deployment(0, scaling={"target_ongoing_requests": 10**9}),
            "scaling.target_ongoing_requests",
        ),
        (
            reference_deployment(
                0, neuron={"compiled_artifacts_prefix": "n/", "sequence_buckets": [2**40]}
            ),
            "neuron.sequence_buckets.0",
        ),
    ],
)
def test_absurd_counts_are_field_errors(spec: dict[str, Any], field: str) -> None:
    assert field in errors_of(spec, ModelDeploymentSpec)


def test_an_architecture_of_thousands_of_digits_is_a_field_error_not_an_overflow() -> None:
    architecture = {
        "family": "llama",
        "num_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_kv_heads": 8,
        "vocab_size": 128256,
        "num_parameters": 10**400,
        "max_position_embeddings": 8192,
    }
    errors = errors_of(
        reference_deployment(1, model={"id": "org/huge", "architecture": architecture}),
        ModelDeploymentSpec,
    )
    assert "model.architecture.num_parameters" in errors


@pytest.mark.parametrize(
    "changes", [{"max_size": 10**6}, {"min_size": 10**6}, {"disk_size_gib": 10**7}]
)
def test_node_pool_sizes_have_sane_ranges(changes: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as raised:
        NodePool.model_validate({"name": "g6e", "instance_types": ["g6e.2xlarge"], **changes})
    assert {e["loc"][0] for e in raised.value.errors()} == set(changes)


# Item 9: one run lists every problem.


def test_field_errors_do_not_hide_the_rules_of_a_platform_file(tmp_path: Path) -> None:
    data = reference()
    data["model_bucket_name"] = "Bad_Bucket"
    llama = data["deployments"][0]
    llama["name"] = "Llama_3"
    llama["tensor_parallel_size"] = 3
    llama["limits"] = {"block_size": 7, "max_model_len": 4096, "max_num_seqs": 32}
    llama["weights"] = {"prefix": "models/llama", "loader": "runai_streamer"}
    del llama["neuron"]["compiled_artifacts_prefix"]
    assert set(from_yaml_errors(tmp_path, data)) == {
        "model_bucket_name",
        "deployments.0.name",
        "deployments.0.limits.block_size",
        "deployments.0.weights.prefix",
        # The rules of the deployment, despite the field errors above:
        "deployments.0.tensor_parallel_size",
        "deployments.0.weights.loader",
        "deployments.0.neuron.compiled_artifacts_prefix",
    }


def test_a_bad_bucket_name_does_not_hide_the_capacity_of_the_pools(tmp_path: Path) -> None:
    data = reference()
    data["model_bucket_name"] = "10.0.0.1"
    data["node_pools"][2]["max_size"] = 2
    errors = from_yaml_errors(tmp_path, data)
    assert set(errors) == {"model_bucket_name", "node_pools.2.max_size"}
    assert "set max_size >= 8" in errors["node_pools.2.max_size"]


def test_a_bad_deployment_name_does_not_hide_its_rules() -> None:
    errors = errors_of(
        reference_deployment(1, name="Mistral_7B", scaling={"min_replicas": 1, "max_replicas": 3}),
        ModelDeploymentSpec,
    )
    assert set(errors) == {"name", "scaling.max_replicas"}


def test_a_field_that_failed_is_not_checked_again_as_its_default() -> None:
    # gpu_memory_utilization is refused on Neuron only when set: an invalid value is one error
    # (its range), not also read as the default by the rule.
    errors = errors_of(
        reference_deployment(0, limits={"gpu_memory_utilization": 5}), ModelDeploymentSpec
    )
    assert list(errors) == ["limits.gpu_memory_utilization"]
    assert "less than or equal to 0.98" in errors["limits.gpu_memory_utilization"]


# Item 10: messages that point at the fix that works.


@pytest.mark.parametrize(
    ("prefix", "suggestion"),
    [
        ("models/mistral-7b", "e.g. models/mistral-7b/"),
        ("/models/mistral-7b/", "e.g. models/mistral-7b/"),
        ("/models/mistral-7b", "e.g. models/mistral-7b/"),
        ("s3://bucket/models/mistral-7b", "e.g. models/mistral-7b/"),
    ],
)
def test_the_suggested_prefix_keeps_every_segment(
    tmp_path: Path, prefix: str, suggestion: str
) -> None:
    data = reference()
    data["deployments"][1]["weights"]["prefix"] = prefix
    data["deployments"][0]["neuron"]["compiled_artifacts_prefix"] = prefix
    errors = from_yaml_errors(tmp_path, data)
    assert errors["deployments.1.weights.prefix"].endswith(suggestion)
    assert errors["deployments.0.neuron.compiled_artifacts_prefix"].endswith(suggestion)


_NAMED = re.compile(r"([a-z0-9]+\.[a-z0-9]+) \(TP (\d+)\)")


def _assert_named_instances_fit(message: str, spec: dict[str, Any]) -> list[str]:
    """Every instance type the message names holds the model at the named degree."""
    named = _NAMED.findall(message.split("where it fits:", 1)[1])
    assert named, message
    arch = MODELS[spec["model"]].architecture
    limits = spec.get("limits", {})
    for name, degree in named:
        fit = sizing.memory_fit(
            arch,
            INSTANCE_TYPES[name],
            int(degree),
            limits.get("max_model_len", 4096),
            limits.get("max_num_seqs", 32),
        )
        assert fit.fits, (name, degree)
    prices = [INSTANCE_TYPES[name].price_per_hour for name, _ in named]
    assert prices == sorted(prices)
    return [name for name, _ in named]


def test_a_model_that_fits_no_degree_names_the_instance_types_where_it_fits() -> None:
    spec = reference_deployment(1, model="llama-3.1-70b")
    message = errors_of(spec, ModelDeploymentSpec)["tensor_parallel_size"]
    assert "a larger instance type where it fits:" in message
    assert "g6e.2xlarge" not in _assert_named_instances_fit(message, spec)


def test_an_invalid_degree_where_no_degree_fits_names_instance_types_not_degrees() -> None:
    spec = reference_deployment(
        1, model="llama-3.1-70b", instance_type="g6e.12xlarge", tensor_parallel_size=3
    )
    message = errors_of(spec, ModelDeploymentSpec)["tensor_parallel_size"]
    assert "degrees that work" not in message
    assert "no degree of g6e.12xlarge holds this model" in message
    _assert_named_instances_fit(message, spec)


def test_degrees_that_work_are_degrees_that_hold_the_model() -> None:
    # TP 1 and 2 of inf2.48xlarge run Llama-3-8B but cannot hold it with a batch of 32 x 4096.
    message = errors_of(reference_deployment(0, tensor_parallel_size=3), ModelDeploymentSpec)[
        "tensor_parallel_size"
    ]
    assert message.endswith("degrees that work for this model on inf2.48xlarge: [4, 8, 24]")


def test_gpu_memory_utilization_on_neuron_is_refused(tmp_path: Path) -> None:
    data = reference()
    data["deployments"][0]["limits"]["gpu_memory_utilization"] = 0.8
    errors = from_yaml_errors(tmp_path, data)
    assert "applies to GPUs only" in errors["deployments.0.limits.gpu_memory_utilization"]
    data["deployments"][0]["limits"].pop("gpu_memory_utilization")
    data["deployments"][1]["limits"]["gpu_memory_utilization"] = 0.8
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump(data))
    assert PlatformSpec.from_yaml(path).deployments[1].limits.gpu_memory_utilization == 0.8


@pytest.mark.parametrize(
    ("bucket", "reason"),
    [
        ("192.168.5.4", "formatted as an IP address"),
        ("xn--models", "'xn--', which S3 reserves"),
        ("sthree-models", "'sthree-', which S3 reserves"),
        ("amzn-s3-demo-models", "'amzn-s3-demo-', which S3 reserves"),
        ("models-s3alias", "'-s3alias', which S3 reserves"),
        ("models--ol-s3", "'--ol-s3', which S3 reserves"),
        ("models.mrap", "'.mrap', which S3 reserves"),
        ("models--x-s3", "'--x-s3', which S3 reserves"),
        ("models--table-s3", "'--table-s3', which S3 reserves"),
    ],
)
def test_reserved_and_ip_address_bucket_names_are_refused(
    tmp_path: Path, bucket: str, reason: str
) -> None:
    data = reference()
    data["model_bucket_name"] = bucket
    assert reason in from_yaml_errors(tmp_path, data)["model_bucket_name"]
