"""Typed AWS CDK and cdk8s building blocks for serving LLMs on EKS (Inferentia2 and L40S).

The spec layer (:class:`ModelDeploymentSpec`, :class:`PlatformSpec`, :class:`NodePool`) is
plain Python and imports nothing from CDK; a platform or node pool that breaks the rules
raises :class:`SpecError`, whose text is the one line the CLI prints. The constructs and the
stack load aws-cdk-lib (and with it a Node.js process) only when first used, so the CLI and
manifest rendering stay fast.
Importing the package points jsii at the Node.js 24 the package depends on
(:mod:`eks_inference.nodejs`), so that process is never an end-of-life Node found on ``PATH``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from eks_inference.nodejs import use_pinned_node
from eks_inference.specification.deployment import (
    Limits,
    ModelDeploymentSpec,
    ModelRef,
    NeuronOptions,
    Scaling,
)
from eks_inference.specification.engines import ENGINES
from eks_inference.specification.node_pools import NodePool, Taint
from eks_inference.specification.platform import Placement, PlatformSpec
from eks_inference.specification.provisioning import NodeProvisioning
from eks_inference.specification.validation import SpecError
from eks_inference.specification.weights import Weights

if TYPE_CHECKING:
    from eks_inference.constructs import (
        ApiKeys,
        ApiKeysOptions,
        ClusterAutoscaler,
        ClusterAutoscalerOptions,
        EksAddon,
        FsxCsiDriver,
        FsxCsiDriverOptions,
        InferenceAddons,
        InferenceCluster,
        InferenceObservability,
        KarpenterNodeProvisioning,
        KarpenterOptions,
        KServe,
        KServeOptions,
        KubeRay,
        KubeRayOptions,
        LoadBalancerController,
        LoadBalancerControllerOptions,
        ModelBucket,
        ModelDeployment,
        ModelFileSystem,
        MountpointS3Csi,
        MountpointS3CsiOptions,
        NeuronDevicePlugin,
        NeuronDevicePluginOptions,
        NeuronRayImage,
        NvidiaDevicePlugin,
        NvidiaDevicePluginOptions,
        ObservabilityOptions,
        PinnedHelmChart,
        PlatformAddons,
        PodIdentity,
        PoolNodegroup,
    )
    from eks_inference.stacks import DeploymentStack, InferenceStack

# Every construct, and the records their methods return, by the subpackage that defines it.
_LAZY_MODULES = {
    "eks_inference.constructs": (
        "ApiKeys",
        "ApiKeysOptions",
        "ClusterAutoscaler",
        "ClusterAutoscalerOptions",
        "EksAddon",
        "FsxCsiDriver",
        "FsxCsiDriverOptions",
        "InferenceAddons",
        "InferenceCluster",
        "InferenceObservability",
        "KarpenterNodeProvisioning",
        "KarpenterOptions",
        "KServe",
        "KServeOptions",
        "KubeRay",
        "KubeRayOptions",
        "LoadBalancerController",
        "LoadBalancerControllerOptions",
        "ModelBucket",
        "ModelDeployment",
        "ModelFileSystem",
        "MountpointS3Csi",
        "MountpointS3CsiOptions",
        "NeuronDevicePlugin",
        "NeuronDevicePluginOptions",
        "NeuronRayImage",
        "NvidiaDevicePlugin",
        "NvidiaDevicePluginOptions",
        "ObservabilityOptions",
        "PinnedHelmChart",
        "PlatformAddons",
        "PodIdentity",
        "PoolNodegroup",
    ),
    "eks_inference.stacks": ("DeploymentStack", "InferenceStack"),
}
_LAZY = {name: module for module, names in _LAZY_MODULES.items() for name in names}

# Before any module of the package can import a jsii library, which starts jsii's Node.js.
use_pinned_node()
# The built-in engines register when the registry is first read, so that a spec naming one
# validates however the package was entered (they import no jsii library), and a command that
# refuses its input before validating a deployment does not import them.
ENGINES.load_built_ins_with(lambda: import_module("eks_inference.engines.built_in"))


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'eks_inference' has no attribute {name!r}")
    return getattr(import_module(module), name)


__all__ = [
    "ApiKeys",
    "ApiKeysOptions",
    "ClusterAutoscaler",
    "ClusterAutoscalerOptions",
    "DeploymentStack",
    "EksAddon",
    "FsxCsiDriver",
    "FsxCsiDriverOptions",
    "InferenceAddons",
    "InferenceCluster",
    "InferenceObservability",
    "InferenceStack",
    "KServe",
    "KServeOptions",
    "KarpenterNodeProvisioning",
    "KarpenterOptions",
    "KubeRay",
    "KubeRayOptions",
    "Limits",
    "LoadBalancerController",
    "LoadBalancerControllerOptions",
    "ModelBucket",
    "ModelDeployment",
    "ModelDeploymentSpec",
    "ModelFileSystem",
    "ModelRef",
    "MountpointS3Csi",
    "MountpointS3CsiOptions",
    "NeuronDevicePlugin",
    "NeuronDevicePluginOptions",
    "NeuronOptions",
    "NeuronRayImage",
    "NodePool",
    "NodeProvisioning",
    "NvidiaDevicePlugin",
    "NvidiaDevicePluginOptions",
    "ObservabilityOptions",
    "PinnedHelmChart",
    "Placement",
    "PlatformAddons",
    "PlatformSpec",
    "PodIdentity",
    "PoolNodegroup",
    "Scaling",
    "SpecError",
    "Taint",
    "Weights",
]
