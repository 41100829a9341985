"""Typed AWS CDK and cdk8s building blocks for serving LLMs on EKS (Inferentia2 and L40S).

The spec layer (:class:`ModelDeploymentSpec`, :class:`PlatformSpec`, :class:`NodePool`) is
plain Python and imports nothing from CDK. The constructs and the stack load aws-cdk-lib (and
with it a Node.js process) only when first used, so the CLI and manifest rendering stay fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from eks_inference.node_pools import NodePool, Taint
from eks_inference.platform import Placement, PlatformSpec
from eks_inference.spec import (
    Limits,
    ModelDeploymentSpec,
    ModelRef,
    NeuronOptions,
    Scaling,
    Weights,
)

if TYPE_CHECKING:
    from eks_inference.constructs import (
        InferenceAddons,
        InferenceCluster,
        InferenceObservability,
        ModelBucket,
        ModelDeployment,
    )
    from eks_inference.stacks import InferenceStack

_LAZY = {
    "InferenceAddons": "eks_inference.constructs",
    "InferenceCluster": "eks_inference.constructs",
    "InferenceObservability": "eks_inference.constructs",
    "ModelBucket": "eks_inference.constructs",
    "ModelDeployment": "eks_inference.constructs",
    "InferenceStack": "eks_inference.stacks",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'eks_inference' has no attribute {name!r}")
    return getattr(import_module(module), name)


__all__ = [
    "InferenceAddons",
    "InferenceCluster",
    "InferenceObservability",
    "InferenceStack",
    "Limits",
    "ModelBucket",
    "ModelDeployment",
    "ModelDeploymentSpec",
    "ModelRef",
    "NeuronOptions",
    "NodePool",
    "Placement",
    "PlatformSpec",
    "Scaling",
    "Taint",
    "Weights",
]
