"""Node bootstrap: NodeConfig per pool, whole CPUs per serving pod, and the NUMA rule."""

from __future__ import annotations

import email
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from eks_inference.catalog import INSTANCE_TYPES, Accelerator, sizing
from eks_inference.catalog.node_hardware import node_hardware
from eks_inference.charts.node_bootstrap import mime_user_data, node_config
from eks_inference.specification.node_pools import NodePool
from eks_inference.specification.numa import TOPOLOGY_POLICIES, family_policy, pool_policy
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.cli import run_cli
from tests.helpers.errors import errors_by_field, one_line_error


def _pool(instance_type: str) -> NodePool:
    return NodePool(name="pool", instance_types=(instance_type,))


def test_cpu_pools_are_left_as_eks_makes_them() -> None:
    assert node_config(_pool("m6i.2xlarge")) is None


def test_g6e_nodes_stripe_their_nvme_and_align_on_one_numa_node() -> None:
    config = node_config(_pool("g6e.2xlarge"))
    assert config is not None
    assert config["spec"]["instance"] == {"localStorage": {"strategy": "RAID0"}}
    assert config["spec"]["kubelet"]["config"] == {
        "cpuManagerPolicy": "static",
        "topologyManagerPolicy": "single-numa-node",
        "topologyManagerScope": "pod",
    }
    karpenter = node_config(_pool("g6e.2xlarge"), local_storage=False)
    assert karpenter is not None
    assert "instance" not in karpenter["spec"]


def test_inferentia_nodes_have_no_instance_store_and_a_restricted_policy() -> None:
    config = node_config(_pool("inf2.48xlarge"))
    assert config is not None
    assert "instance" not in config["spec"]
    assert config["spec"]["kubelet"]["config"]["topologyManagerPolicy"] == "restricted"


def test_the_user_data_is_one_nodeconfig_part_of_a_mime_archive() -> None:
    config = node_config(_pool("g6e.4xlarge"))
    assert config is not None
    message = email.message_from_string(mime_user_data(config))
    assert message.is_multipart()
    (part,) = message.get_payload()
    assert part.get_content_type() == "application/node.eks.aws"
    assert yaml.safe_load(part.get_payload()) == config


def test_every_accelerator_family_has_a_policy() -> None:
    for instance in INSTANCE_TYPES.values():
        policy = family_policy(instance)
        assert (policy is None) == (instance.accelerator is Accelerator.NONE), instance.name


def test_a_pool_may_set_its_own_policy() -> None:
    pool = NodePool(
        name="big", instance_types=("g6e.48xlarge",), topology_manager_policy="restricted"
    )
    policy = pool_policy(pool)
    assert policy is not None
    assert policy.policy == "restricted"
    config = node_config(pool)
    assert config is not None
    assert config["spec"]["kubelet"]["config"]["topologyManagerPolicy"] == "restricted"
    with pytest.raises(ValidationError, match="accelerator pools only"):
        NodePool(name="cpu", instance_types=("m6i.xlarge",), topology_manager_policy="restricted")


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_serving_pods_get_whole_cpus_within_a_numa_node(name: str) -> None:
    """Whole CPUs, so the static CPU manager pins them; under single-numa-node each replica
    that the spec accepts fits one NUMA node's vCPUs."""
    instance = INSTANCE_TYPES[name]
    for degree in instance.valid_tensor_parallel:
        share = sizing.pod_resources(instance, sizing.replicas_per_node(instance, degree))
        assert share.cpu_millis % 1000 == 0
        assert share.cpu == str(share.cpu_millis // 1000)


def _platform(instance_type: str, degree: int, model: str = "llama-3.1-70b") -> dict[str, Any]:
    return {
        "model_bucket_name": "eks-inference-models-example",
        "node_pools": [
            {"name": "system", "instance_types": ["m6i.2xlarge"], "min_size": 1},
            {"name": "accelerated", "instance_types": [instance_type], "max_size": 4},
        ],
        "deployments": [
            {
                "name": "big",
                "model": model,
                "instance_type": instance_type,
                "engine": "vllm",
                "tensor_parallel_size": degree,
                "limits": {"max_model_len": 4096, "max_num_seqs": 8},
                "weights": {"prefix": "models/big/", "loader": "runai_streamer"},
            }
        ],
    }


def test_a_gpu_replica_across_numa_nodes_is_refused(tmp_path: Path) -> None:
    """TP 8 on g6e.48xlarge takes the GPUs of both sockets: a pool set to single-numa-node
    admits no such pod, so the spec refuses it and names the degree that fits one node."""
    hardware = node_hardware("g6e.48xlarge")
    assert hardware.numa_nodes == 2
    data = _platform("g6e.48xlarge", 8)
    data["node_pools"][1]["topology_manager_policy"] = "single-numa-node"
    with pytest.raises(ValidationError) as caught:
        PlatformSpec.model_validate(data)
    errors = errors_by_field(caught.value)
    message = errors["deployments.0.tensor_parallel_size"]
    assert "spans the NUMA nodes of g6e.48xlarge" in message
    assert "use tensor_parallel_size 1 or 2 or 4, or topology_manager_policy" in message
    assert "restricted on node_pools.1" in message
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data))
    one_line_error(
        run_cli("plan", "--platform", path, cwd=tmp_path),
        2,
        "deployments.0.tensor_parallel_size",
        "topology_manager_policy: restricted on node_pools.1",
    )


def test_a_replica_on_one_numa_node_passes() -> None:
    PlatformSpec.model_validate(_platform("g6e.48xlarge", 4, model="llama-3-8b"))


def test_a_pool_letting_replicas_span_numa_nodes_takes_them() -> None:
    """With restricted, TP 8 spans both sockets of a g6e.48xlarge: Llama 70B is served."""
    data = _platform("g6e.48xlarge", 8)
    data["node_pools"][1]["topology_manager_policy"] = "restricted"
    PlatformSpec.model_validate(data)


def test_nvswitch_gpus_may_span_numa_nodes() -> None:
    """p4d's A100s are joined by NVSwitch: restricted by default, TP 8 is served."""
    assert TOPOLOGY_POLICIES["p4d"].policy == "restricted"
    PlatformSpec.model_validate(_platform("p4d.24xlarge", 8))


def test_inferentia_replicas_may_span_numa_nodes() -> None:
    """restricted admits a whole-node replica on the fewest NUMA nodes: TP 24 on
    inf2.48xlarge is served."""
    assert family_policy(INSTANCE_TYPES["inf2.48xlarge"]) == TOPOLOGY_POLICIES["inf2"]
    data = _platform("inf2.48xlarge", 24)
    data["deployments"][0]["weights"]["loader"] = "mountpoint"
    data["deployments"][0]["neuron"] = {"compiled_artifacts_prefix": "neuron-artifacts/"}
    data["node_pools"][1]["disk_size_gib"] = 1000
    PlatformSpec.model_validate(data)
