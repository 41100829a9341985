"""Reusable CDK constructs: the inference cluster, its node groups and add-ons, the model bucket
and the model deployments served on them."""

from eks_inference.constructs.addons import (
    ApiKeys,
    ClusterAutoscaler,
    DynamoPlatform,
    EfaDevicePlugin,
    FsxCsiDriver,
    InferenceAddons,
    InferenceExtension,
    InferenceObservability,
    KarpenterNodeProvisioning,
    KServe,
    KubeRay,
    LeaderWorkerSet,
    LoadBalancerController,
    MountpointS3Csi,
    NeuronDevicePlugin,
    NvidiaDevicePlugin,
    PlatformAddons,
)
from eks_inference.constructs.addons.addon import AddonConstruct, PlatformAddon
from eks_inference.constructs.addons.api_keys import ApiKeysOptions
from eks_inference.constructs.addons.cluster_autoscaler import ClusterAutoscalerOptions
from eks_inference.constructs.addons.dynamo import DynamoPlatformOptions
from eks_inference.constructs.addons.efa import EfaDevicePluginOptions
from eks_inference.constructs.addons.fsx_csi import FsxCsiDriverOptions
from eks_inference.constructs.addons.helm import HelmAddon, HelmRelease, PinnedHelmChart
from eks_inference.constructs.addons.inference_extension import InferenceExtensionOptions
from eks_inference.constructs.addons.karpenter import KarpenterOptions
from eks_inference.constructs.addons.kserve import KServeOptions
from eks_inference.constructs.addons.kuberay import KubeRayOptions
from eks_inference.constructs.addons.leaderworkerset import LeaderWorkerSetOptions
from eks_inference.constructs.addons.load_balancer_controller import (
    LoadBalancerControllerOptions,
)
from eks_inference.constructs.addons.mountpoint import MountpointS3CsiOptions
from eks_inference.constructs.addons.neuron import NeuronDevicePluginOptions
from eks_inference.constructs.addons.nvidia import NvidiaDevicePluginOptions
from eks_inference.constructs.addons.observability import ObservabilityOptions
from eks_inference.constructs.applied_objects import AppliedObjects
from eks_inference.constructs.cluster import (
    InferenceCluster,
    PodIdentity,
)
from eks_inference.constructs.efa_network import EfaNetwork
from eks_inference.constructs.eks_addon import AddonRole, EksAddon
from eks_inference.constructs.lustre import ModelFileSystem
from eks_inference.constructs.model_bucket import ModelBucket
from eks_inference.constructs.model_deployment import ModelDeployment, NeuronRayImage
from eks_inference.constructs.nodegroups import PoolNodegroup, cluster_autoscaler_tags

__all__ = [
    "AddonConstruct",
    "AddonRole",
    "ApiKeys",
    "ApiKeysOptions",
    "AppliedObjects",
    "ClusterAutoscaler",
    "ClusterAutoscalerOptions",
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
    "KServe",
    "KServeOptions",
    "KarpenterNodeProvisioning",
    "KarpenterOptions",
    "KubeRay",
    "KubeRayOptions",
    "LeaderWorkerSet",
    "LeaderWorkerSetOptions",
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
    "PlatformAddon",
    "PlatformAddons",
    "PodIdentity",
    "PoolNodegroup",
    "cluster_autoscaler_tags",
]
