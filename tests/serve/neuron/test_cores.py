"""Pinning a replica to the NeuronCores Ray assigned to it."""

from __future__ import annotations

import os

import pytest

from eks_inference.serve.neuron.cores import neuron_core_list, pin_neuron_cores


@pytest.mark.parametrize(
    ("ids", "visible"),
    [
        (["0"], "0"),
        (["0", "1"], "0-1"),
        (["6", "4", "7", "5"], "4-7"),
        (["1", "3"], "1,3"),
        (["10", "9", "12"], "9,10,12"),
    ],
)
def test_neuron_core_list(ids: list[str], visible: str) -> None:
    assert neuron_core_list(ids) == visible


def test_neuron_core_list_needs_cores() -> None:
    with pytest.raises(ValueError, match="no NeuronCores"):
        neuron_core_list([])


def test_pin_neuron_cores_exports_the_assigned_cores(assigned_cores: list[str]) -> None:
    assigned_cores.extend(["8", "9", "10", "11"])
    assert pin_neuron_cores(4) == "8-11"
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == "8-11"


def test_pin_neuron_cores_requires_neuron_cores_from_ray(assigned_cores: list[str]) -> None:
    with pytest.raises(RuntimeError, match=r"ray_actor_options\.resources\.neuron_cores"):
        pin_neuron_cores(2)


def test_pin_neuron_cores_requires_enough_cores_for_tensor_parallelism(
    assigned_cores: list[str],
) -> None:
    assigned_cores.extend(["0", "1"])
    with pytest.raises(RuntimeError, match="tensor_parallel_size is 4"):
        pin_neuron_cores(4)
