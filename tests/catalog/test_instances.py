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
