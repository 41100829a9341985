"""How long a model server may take to come up: model load, compile, node launch and image pull.

Pure arithmetic on a validated spec, so that the charts (startup probes, rollout deadlines, the
Ray Service's initializing timeout), the autoscaler's scale-in window, the alert on a replica
stuck loading and the CLI's plan all read the same budget without loading cdk8s.

A budget is what may pass before something is declared stuck, not what is expected: it is the
larger of a pessimistic allowance (below) and :data:`ESTIMATE_MARGIN` times the cold-start
estimate of the deployment's loader (:func:`eks_inference.specification.cold_start.cold_start`), so
the
estimate ``plan`` prints always fits well inside what the probes, do-not-disrupt durations
and alerts allow.
"""

from __future__ import annotations

import math

from eks_inference.catalog import sizing
from eks_inference.specification.cold_start import cold_start
from eks_inference.specification.deployment import ModelDeploymentSpec

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
# The estimate's figures are medians of one published run each; a busy S3 prefix, a cold page
# cache or a contended network can triple a phase, so the budget is at least three estimates.
ESTIMATE_MARGIN = 3


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
    estimate = cold_start(spec)
    expected = estimate.seconds("weights") + estimate.seconds("engine")
    return math.ceil(max(seconds, ESTIMATE_MARGIN * expected))


def image_seconds(spec: ModelDeploymentSpec) -> int:
    """Seconds budgeted for launching a node and pulling the images before the server starts:
    the serving image's allowance, and the weights image's (``loader: image``) at the margin."""
    weights_image = cold_start(spec).seconds("weights_image")
    return NODE_AND_IMAGE_SECONDS + math.ceil(ESTIMATE_MARGIN * weights_image)


def rollout_seconds(spec: ModelDeploymentSpec) -> int:
    """Seconds from creating a replica to it serving: node launch, image pull, model load."""
    return image_seconds(spec) + model_load_seconds(spec)
