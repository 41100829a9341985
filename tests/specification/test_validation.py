"""What spec errors say (issue 17, item 12): misspelt fields, inputs echoed, units, order."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from eks_inference.catalog import INSTANCE_TYPES
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.validation import shorten
from tests.helpers.errors import errors_by_field, errors_of
from tests.helpers.platforms import reference


def rename(data: dict[str, Any], path: tuple[str | int, ...], new: str) -> dict[str, Any]:
    target: Any = data
    for step in path[:-1]:
        target = target[step]
    target[new] = target.pop(path[-1])
    return data


def test_a_misspelt_field_is_reported_alone_with_the_field_it_resembles() -> None:
    data = rename(reference(), ("deployments", 0, "tensor_parallel_size"), "tensor_paralel_size")
    # Without the suggestion's suppression, the default degree (1) would not hold the model and
    # an error would tell the user to use a degree they had written.
    assert errors_of(data) == {
        "deployments.0.tensor_paralel_size": "unknown field; did you mean tensor_parallel_size?"
    }


@pytest.mark.parametrize(
    ("path", "typo", "meant"),
    [
        (("deployments", 0, "instance_type"), "instance_types", "instance_type"),
        (("deployments", 1, "limits", "max_model_len"), "max_model_length", "max_model_len"),
        (("deployments", 2, "scaling", "max_replicas"), "maxReplicas", "max_replicas"),
        (("node_pools", 1, "instance_types"), "instance_type", "instance_types"),
        (("model_bucket_name",), "model_bucket", "model_bucket_name"),
    ],
)
def test_a_misspelt_required_or_nested_field_is_not_also_reported_missing(
    path: tuple[str | int, ...], typo: str, meant: str
) -> None:
    errors = errors_of(rename(reference(), path, typo))
    where = ".".join(map(str, (*path[:-1], typo)))
    assert errors == {where: f"unknown field; did you mean {meant}?"}


def test_an_unknown_field_like_no_field_gets_no_suggestion() -> None:
    assert errors_of({**reference(), "replicas": 3}) == {"replicas": "unknown field"}


def test_a_field_given_besides_its_misspelling_is_not_suggested() -> None:
    errors = errors_of({**reference(), "regionn": "us-west-2"})
    assert errors == {"regionn": "unknown field"}


def test_a_mapping_with_no_field_of_the_model_is_one_error() -> None:
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}
    assert errors_of(manifest) == {
        "": "none of its 3 keys ('apiVersion', 'kind', 'metadata') is a PlatformSpec field; it "
        "needs model_bucket_name, node_pools"
    }


def test_thousands_of_keys_of_another_file_are_one_error() -> None:
    errors = errors_of({f"k{i}": i for i in range(5000)})
    assert list(errors) == [""]
    assert errors[""].startswith("none of its 5000 keys ('k0', 'k1', 'k2', ...)")


def test_a_long_input_is_echoed_cut_to_a_readable_length() -> None:
    errors = errors_of({**reference(), "model_bucket_name": "a" * 5000})
    message = errors["model_bucket_name"]
    assert message.startswith(f"'{'a' * 40}...' (5000 characters) is not a valid bucket name")
    assert len(message) < 300


def test_a_long_list_of_inputs_is_echoed_by_its_first_items_and_its_length() -> None:
    message = "deployments " + repr([f"d{i}" for i in range(400)]) + " need 800 nodes; set max"
    assert shorten(message) == (
        "deployments ['d0', 'd1', 'd2', 'd3', 'd4', 'd5', 'd6', 'd7', 'd8', 'd9', ... (400 in all)]"
        " need 800 nodes; set max"
    )


def test_lists_of_choices_and_short_quotes_are_kept_whole() -> None:
    message = "'fuzed_qkv' is not an override; use one of [1, 8, 16, 32, 64, 128, 256]"
    assert shorten(message) == message


def test_instance_types_are_listed_smallest_first_within_each_family() -> None:
    errors = errors_of(
        {**reference(), "deployments": [{**reference()["deployments"][1], "instance_type": "x"}]}
    )
    listed = errors["deployments.0.instance_type"].split("use one of ")[1].split(", ")
    g6e = [name for name in listed if name.startswith("g6e.")]
    assert g6e == [
        "g6e.xlarge",
        "g6e.2xlarge",
        "g6e.4xlarge",
        "g6e.8xlarge",
        "g6e.12xlarge",
        "g6e.16xlarge",
        "g6e.24xlarge",
        "g6e.48xlarge",
    ]
    assert sorted(listed) == sorted(n for n, t in INSTANCE_TYPES.items() if t.accelerator != "none")


def test_an_unknown_pool_instance_type_lists_the_catalog_by_size() -> None:
    data = reference()
    data["node_pools"][0]["instance_types"] = ["m6i.huge"]
    message = errors_of(data)["node_pools.0"]
    assert "m6i.xlarge, m6i.2xlarge, m7i.xlarge, m7i.2xlarge" in message


def _too_large(model: str, instance_type: str, tensor_parallel_size: int) -> str:
    with pytest.raises(ValidationError) as raised:
        ModelDeploymentSpec.model_validate(
            {
                "name": "big",
                "model": model,
                "instance_type": instance_type,
                "engine": "vllm",
                "tensor_parallel_size": tensor_parallel_size,
                "weights": {"prefix": "models/big/"},
                "limits": {"max_model_len": 8192, "max_num_seqs": 256},
                "neuron": {"compiled_artifacts_prefix": "artifacts/"},
            }
        )
    return errors_by_field(raised.value)["tensor_parallel_size"]


def test_memory_errors_count_gpus_as_gpus() -> None:
    assert " usable on 1 GPU of g6e.2xlarge;" in _too_large("llama-3.1-70b", "g6e.2xlarge", 1)
    assert " usable on 4 GPUs of g6e.12xlarge;" in _too_large("llama-3.1-70b", "g6e.12xlarge", 4)


def test_memory_errors_count_neuron_cores_as_neuron_cores() -> None:
    message = _too_large("llama-3.1-70b", "inf2.8xlarge", 2)
    assert " usable on 2 NeuronCores of inf2.8xlarge;" in message
