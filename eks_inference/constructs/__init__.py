"""Reusable CDK constructs: the inference cluster, its node groups and add-ons, the model bucket
and the model deployments served on them."""

from eks_inference.constructs.addons import InferenceAddons
from eks_inference.constructs.api_keys import ApiKeys
from eks_inference.constructs.cluster import InferenceCluster, PodIdentity
from eks_inference.constructs.karpenter import KarpenterNodeProvisioning
from eks_inference.constructs.load_balancer_controller import LoadBalancerController
from eks_inference.constructs.model_bucket import ModelBucket
from eks_inference.constructs.model_deployment import ModelDeployment, NeuronRayImage
from eks_inference.constructs.nodegroups import PoolNodegroup, cluster_autoscaler_tags
from eks_inference.constructs.observability import InferenceObservability

__all__ = [
    "ApiKeys",
    "InferenceAddons",
    "InferenceCluster",
    "InferenceObservability",
    "KarpenterNodeProvisioning",
    "LoadBalancerController",
    "ModelBucket",
    "ModelDeployment",
    "NeuronRayImage",
    "PodIdentity",
    "PoolNodegroup",
    "cluster_autoscaler_tags",
]
