"""Pinning a replica to the NeuronCores Ray assigned to it (``NEURON_RT_VISIBLE_CORES``)."""

import logging
import os
from collections.abc import Sequence

import ray

# Ray Serve routes records of this logger into the replica's log files.
logger = logging.getLogger("ray.serve")


def neuron_core_list(core_ids: Sequence[str]) -> str:
    """Format core ids for ``NEURON_RT_VISIBLE_CORES``: a range when contiguous (``4-7``),
    else a comma-separated list, which the Neuron runtime also accepts."""
    cores = sorted(int(core) for core in core_ids)
    if not cores:
        raise ValueError("no NeuronCores to format")
    if cores == list(range(cores[0], cores[-1] + 1)):
        return str(cores[0]) if len(cores) == 1 else f"{cores[0]}-{cores[-1]}"
    return ",".join(str(core) for core in cores)


def pin_neuron_cores(tensor_parallel_size: int) -> str:
    """Restrict this process to the NeuronCores Ray assigned to the replica.

    Replicas sharing a node must not see each other's cores: the Neuron runtime would otherwise
    start on the first free cores it finds, not the ones Ray accounted for. Ray usually sets the
    variable itself, but not when ``RAY_EXPERIMENTAL_NOSET_NEURON_RT_VISIBLE_CORES`` is set, so
    it is set here explicitly before the engine (and its engine-core subprocess) starts.
    """
    assigned = ray.get_runtime_context().get_accelerator_ids().get("neuron_cores", [])
    if not assigned:
        raise RuntimeError(
            "Ray assigned no neuron_cores to this replica: set "
            "ray_actor_options.resources.neuron_cores for NeuronLLMServer in the Serve config"
        )
    if len(assigned) < tensor_parallel_size:
        raise RuntimeError(
            f"tensor_parallel_size is {tensor_parallel_size} but Ray assigned only "
            f"{len(assigned)} neuron_cores ({', '.join(assigned)}) to this replica"
        )
    if len(assigned) > tensor_parallel_size:
        logger.warning(
            "Ray assigned %d neuron_cores for tensor_parallel_size %d; the extra cores stay idle",
            len(assigned),
            tensor_parallel_size,
        )
    visible = neuron_core_list(assigned)
    os.environ["NEURON_RT_VISIBLE_CORES"] = visible
    return visible
