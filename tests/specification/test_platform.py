"""Rules across deployments: pools must offer and hold them, names are unique."""

from __future__ import annotations

from typing import Any

import pytest

from eks_inference.specification.platform import PlatformSpec
from tests.helpers.errors import errors_of
from tests.helpers.platforms import REFERENCE_PLATFORM, reference


def test_reference_platform_places_every_deployment() -> None:
    platform = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
    assert platform.system_pool.name == "system"
    placements = {d.name: platform.placement(d).workers.name for d in platform.deployments}
    assert placements == {"llama3-8b-inf2": "inf2", "mistral-7b-g6e": "g6e", "qwen25-7b-g6e": "g6e"}


def test_pool_max_size_holds_deployments_sharing_it() -> None:
    data = reference()
    data["node_pools"][2]["max_size"] = 7
    errors = errors_of(data)
    # mistral: 2 replicas + 1 surge pod; qwen: 4 workers + a new cluster's 1 during an upgrade.
    assert "need up to 8 g6e.2xlarge nodes" in errors["node_pools.2.max_size"]
    assert "set max_size >= 8" in errors["node_pools.2.max_size"]


def test_instance_type_must_be_offered_by_a_pool() -> None:
    data = reference()
    data["deployments"][1]["instance_type"] = "g6e.4xlarge"
    errors = errors_of(data)
    assert "add a pool for it" in errors["deployments.1.instance_type"]


def test_deployment_errors_carry_their_position() -> None:
    data = reference()
    data["deployments"][2]["tensor_parallel_size"] = 2
    errors = errors_of(data)
    assert "valid: [1]" in errors["deployments.2.tensor_parallel_size"]


@pytest.mark.parametrize(
    ("edit", "field", "message"),
    [
        (
            lambda d: d["deployments"].append(dict(d["deployments"][0])),
            "deployments.3.name",
            "twice",
        ),
        (lambda d: d["node_pools"].pop(0), "node_pools", "add a CPU pool"),
        (lambda d: d.update(model_bucket_name="Models_Bucket"), "model_bucket_name", "bucket name"),
    ],
)
def test_platform_rules(edit: Any, field: str, message: str) -> None:
    data = reference()
    edit(data)
    errors = errors_of(data)
    assert message in errors[field], errors


def test_neuron_compile_must_fit_the_pool_root_volume() -> None:
    data = reference()
    data["deployments"][0]["model"] = {
        "id": "example/llama-34b",
        "architecture": {
            "family": "llama",
            "num_layers": 60,
            "hidden_size": 7168,
            "num_attention_heads": 56,
            "num_kv_heads": 8,
            "vocab_size": 64000,
            "num_parameters": 34_000_000_000,
            "max_position_embeddings": 16384,
        },
    }
    data["deployments"][0]["limits"] = {"max_model_len": 4096, "max_num_seqs": 8}
    errors = errors_of(data)
    # 63.3 GiB of weights -> 64 + 16 GiB of output + 64 GiB of caches, beside 60 GiB of images.
    assert "needs 144 GiB of local disk" in errors["node_pools.1.disk_size_gib"]
    assert "set disk_size_gib >= 204" in errors["node_pools.1.disk_size_gib"]
    data["node_pools"][1]["disk_size_gib"] = 204
    assert PlatformSpec.model_validate(data)
