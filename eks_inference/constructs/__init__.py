"""Reusable CDK constructs: the inference cluster, its node groups and add-ons, the model bucket
and the model deployments served on them."""

from eks_inference.constructs.addons import InferenceAddons
from eks_inference.constructs.cluster import InferenceCluster, PodIdentity
from eks_inference.constructs.model_bucket import ModelBucket
from eks_inference.constructs.model_deployment import ModelDeployment, NeuronRayImage
from eks_inference.constructs.nodegroups import PoolNodegroup, cluster_autoscaler_tags

__all__ = [
    "InferenceAddons",
    "InferenceCluster",
    "ModelBucket",
    "ModelDeployment",
    "NeuronRayImage",
    "PodIdentity",
    "PoolNodegroup",
    "cluster_autoscaler_tags",
]
