"""The instance catalog matches the hardware facts the sizing relies on."""

from __future__ import annotations

import pytest

from eks_inference.catalog import INSTANCE_TYPES, Accelerator, instance_type


def test_inferentia2_topology() -> None:
    node = INSTANCE_TYPES["inf2.48xlarge"]
    assert (node.devices, node.cores, node.cores_per_device) == (12, 24, 2)
    assert node.accelerator_memory_bytes == 384 * 1024**3
    assert node.valid_tensor_parallel == (1, 2, 4, 8, 24)
    assert INSTANCE_TYPES["inf2.8xlarge"].valid_tensor_parallel == (1, 2)


def test_gpu_tensor_parallel_is_bounded_by_gpus() -> None:
    assert INSTANCE_TYPES["g6e.12xlarge"].valid_tensor_parallel == (1, 2, 4)
    assert INSTANCE_TYPES["g6e.2xlarge"].accelerator is Accelerator.NVIDIA


def test_unknown_instance_lists_known_ones() -> None:
    with pytest.raises(KeyError, match=r"inf2\.48xlarge"):
        instance_type("inf9.huge")


@pytest.mark.parametrize(
    ("name", "gpu", "memory_gb", "interfaces", "rdma", "interconnect"),
    [
        ("p5.48xlarge", "H100", 640, 32, True, "NVLink"),
        ("p5en.48xlarge", "H200", 1128, 16, True, "NVLink"),
        ("p4d.24xlarge", "A100", 320, 4, True, "NVLink"),
        ("g6e.48xlarge", "L40S", 384, 4, False, "PCIe"),
        ("g6e.24xlarge", "L40S", 192, 2, False, "PCIe"),
        ("g6e.12xlarge", "L40S", 192, 1, False, "PCIe"),
    ],
)
def test_multi_node_instances_carry_their_fabric(
    name: str, gpu: str, memory_gb: int, interfaces: int, rdma: bool, interconnect: str
) -> None:
    node = INSTANCE_TYPES[name]
    assert node.accelerator_model == gpu
    assert node.accelerator_memory_bytes == memory_gb * 1000**3
    assert node.efa
    assert (node.efa_interfaces, node.efa_rdma, node.device_interconnect) == (
        interfaces,
        rdma,
        interconnect,
    )


def test_instances_without_efa_have_no_interfaces() -> None:
    for name in ("g6e.2xlarge", "g6e.4xlarge", "inf2.48xlarge", "m6i.xlarge"):
        node = INSTANCE_TYPES[name]
        assert (node.efa, node.efa_interfaces, node.efa_rdma) == (False, 0, False)
    assert INSTANCE_TYPES["inf2.48xlarge"].device_interconnect == "NeuronLink"
    assert INSTANCE_TYPES["m6i.xlarge"].device_interconnect == ""
