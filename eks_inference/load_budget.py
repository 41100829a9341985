"""How long a model server may take to come up: model load, compile, node launch and image pull.

Pure arithmetic on a validated spec, so that the charts (startup probes, rollout deadlines, the
Ray Service's initializing timeout), the autoscaler's scale-in window, the alert on a replica
stuck loading and the CLI's plan all read the same budget without loading cdk8s.
"""

from __future__ import annotations

import math

from eks_inference import sizing
from eks_inference.spec.deployment import ModelDeploymentSpec

# Model load budget: what a model server may take from container start to a healthy engine.
# The base covers engine start, graph capture or Neuron model load and warm-up: minutes on a
# GPU, longer on Neuron, where loading the compiled model and sharding the weights onto the
# cores takes most of it. Reading the weights is budgeted at a pessimistic 170 MiB/s (6 s per
# GiB) through Mountpoint or the Run:ai streamer. Compiling in the pod (development only)
# takes about 15 minutes for 15 GB of weights: budget twice that, at least 30 minutes.
_LOAD_BASE_SECONDS_GPU = 600
_LOAD_BASE_SECONDS_NEURON = 1200
_LOAD_SECONDS_PER_WEIGHT_GIB = 6
_COMPILE_SECONDS_PER_WEIGHT_GIB = 120
_COMPILE_MIN_SECONDS = 1800
# Before a model can load at all, a node may have to be launched from zero (3-5 minutes) and
# a 10-20 GiB inference image pulled onto it (5-10 minutes).
NODE_AND_IMAGE_SECONDS = 900


def weights_gib(spec: ModelDeploymentSpec) -> float:
    """Size of the weights in GiB at the model's dtype."""
    return sizing.gib(sizing.weight_bytes(spec.model.architecture))


def compiles_at_startup(spec: ModelDeploymentSpec) -> bool:
    """True when a Neuron pod has no compiled artifacts to load and compiles itself."""
    return spec.on_neuron and not spec.has_compiled_artifacts


def _compile_budget(spec: ModelDeploymentSpec) -> float:
    return max(_COMPILE_MIN_SECONDS, weights_gib(spec) * _COMPILE_SECONDS_PER_WEIGHT_GIB)


def compile_seconds(spec: ModelDeploymentSpec) -> int:
    """Seconds budgeted for compiling ``spec``'s model for Neuron (twice the usual time)."""
    return math.ceil(_compile_budget(spec))


def model_load_seconds(spec: ModelDeploymentSpec) -> int:
    """Seconds a model server may take from container start to a healthy engine.

    Sizes the startup probe of vLLM pods, the alert on a replica stuck loading and, with node
    and image time added, the Ray Service's initializing timeout and the autoscaler's scale-in
    window. See the constants above for where each part comes from.
    """
    gib = weights_gib(spec)
    base = _LOAD_BASE_SECONDS_NEURON if spec.on_neuron else _LOAD_BASE_SECONDS_GPU
    seconds = base + gib * _LOAD_SECONDS_PER_WEIGHT_GIB
    if compiles_at_startup(spec):
        seconds += _compile_budget(spec)
    return math.ceil(seconds)


def rollout_seconds(spec: ModelDeploymentSpec) -> int:
    """Seconds from creating a replica to it serving: node launch, image pull, model load."""
    return NODE_AND_IMAGE_SECONDS + model_load_seconds(spec)
