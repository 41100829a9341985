"""Node pools derive labels, taints, AMI types and autoscaler resources from one object."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from eks_inference.names import NODE_POOL_LABEL
from eks_inference.specification.node_pools import NodePool


def test_neuron_pool() -> None:
    pool = NodePool(name="inf2", instance_types=("inf2.48xlarge",))
    assert pool.ami_type == "AL2023_x86_64_NEURON"
    assert pool.labels == {NODE_POOL_LABEL: "inf2"}
    assert pool.tolerations() == [
        {
            "key": "aws.amazon.com/neuron",
            "operator": "Equal",
            "value": "true",
            "effect": "NoSchedule",
        }
    ]
    assert pool.taints[0].cloudformation_effect == "NO_SCHEDULE"
    assert pool.extended_resources() == {
        "aws.amazon.com/neuroncore": 24,
        "aws.amazon.com/neuron": 12,
    }
    assert pool.root_volume_gib == 200
    assert pool.min_size == 0


def test_gpu_pool_carries_the_device_plugin_label() -> None:
    pool = NodePool(name="g6e", instance_types=("g6e.12xlarge",))
    assert pool.ami_type == "AL2023_x86_64_NVIDIA"
    assert pool.labels["nvidia.com/gpu.present"] == "true"
    assert pool.taints[0].key == "nvidia.com/gpu"
    assert pool.extended_resources() == {"nvidia.com/gpu": 4}


def test_cpu_pool() -> None:
    pool = NodePool(name="system", instance_types=("m6i.xlarge", "m7i.xlarge"), min_size=2)
    assert pool.ami_type == "AL2023_x86_64_STANDARD"
    assert pool.taints == ()
    assert pool.node_selector() == {NODE_POOL_LABEL: "system"}
    assert pool.extended_resources() == {}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "Inf_2", "instance_types": ("inf2.xlarge",)}, "DNS-1123"),
        ({"name": "a", "instance_types": ("inf2.xlarge", "inf2.8xlarge")}, "exactly one"),
        ({"name": "a", "instance_types": ("inf2.xlarge", "m6i.xlarge")}, "mix accelerator"),
        ({"name": "a", "instance_types": ("x1.huge",)}, "unknown instance types"),
        ({"name": "a", "instance_types": ("g6e.xlarge",), "disk_size_gib": 50}, "at least 200"),
        ({"name": "a", "instance_types": ("m6i.xlarge",), "min_size": 3, "max_size": 2}, "exceeds"),
    ],
)
def test_bad_pools(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        NodePool.model_validate(fields)
